//! Looking at what a server or store left on disk.

use std::path::{Path, PathBuf};

/// Every file under `dir` whose name ends in `.<extension>`, sorted.
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == extension) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every hot log segment under `dir`, sorted.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    files_with_extension(dir, "log")
}

/// The total size of every hot log segment under `dir`.
pub fn segment_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}
