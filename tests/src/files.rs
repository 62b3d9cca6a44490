//! Looking at what a server or store left on disk.

use std::path::{Path, PathBuf};

/// How many files under `dir` have names ending with `suffix`.
pub fn count_files(dir: &Path, suffix: &str) -> usize {
    all_files(dir)
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .count()
}

/// Every file under `dir`, sorted (none when `dir` does not exist).
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
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
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Whether the file at `path` holds the bytes `needle` anywhere (false when it cannot
/// be read, as a file removed meanwhile).
pub fn file_contains(path: &Path, needle: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

/// Every file under `dir` that holds the bytes `needle`, sorted.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut files = all_files(dir);
    files.retain(|p| file_contains(p, needle));
    files
}

/// Every file under `dir` whose name ends in `.<extension>`, sorted.
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = all_files(dir);
    files.retain(|p| p.extension().is_some_and(|x| x == extension));
    files
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

/// Copies the tree at `from` to `to` (a snapshot of a data directory to damage).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
