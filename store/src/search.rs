//! Searching a hot table's files for literal values: the hot half of a deletion's
//! proof (the tierer searches the cold half, the table's Iceberg location). The store
//! owns these files, so it is the one that reads them: the table's directory (its
//! definition, its logs' segments and their sidecars) and, for a primary-key table, the
//! files of the shared RocksDB that can hold its state.

use std::path::{Path, PathBuf};

use crate::bucket::LogId;
use crate::error::{Result, StoreError};
use crate::hot_table::HotTable;
use crate::primary_key::state_bytes_of_string;

/// What a search of a hot table's files found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotSearch {
    pub files_searched: usize,
    pub bytes_searched: u64,
    /// Files of the logs of other buckets, not read (a search scoped to some buckets).
    pub files_skipped: usize,
    /// The first file holding a literal, relative to the data directory (the literal
    /// itself is not named).
    pub first_match: Option<String>,
}

/// Whether `haystack` contains any of `needles` (empty needles never match).
pub fn contains_any(haystack: &[u8], needles: &[Vec<u8>]) -> bool {
    needles
        .iter()
        .any(|n| !n.is_empty() && memchr::memmem::find(haystack, n).is_some())
}

impl HotTable {
    /// Searches the raw bytes of every file the table's rows can be in for `literals`.
    /// In a primary-key table's files, each UTF-8 literal is also searched in the form
    /// RocksDB stores it (the arrow row format cuts strings into blocks). A file that
    /// vanishes meanwhile (a compaction, a segment rename) is skipped. Blocking.
    ///
    /// With `buckets`, the files of other buckets' logs (`day=*/bucket=B/`) are not
    /// read: the caller knows no other bucket can hold a matching row. Every other file
    /// is: the table's own files outside the log directories, and the whole RocksDB
    /// state, whose files mix every bucket (and hold keys and values in their index
    /// blocks and bounds).
    pub fn search_literals(
        &self,
        literals: &[Vec<u8>],
        buckets: Option<&[u32]>,
    ) -> Result<HotSearch> {
        let mut needles = literals.to_vec();
        if self.is_primary_key() {
            for literal in literals {
                if let Ok(text) = std::str::from_utf8(literal) {
                    needles.push(state_bytes_of_string(text)?);
                }
            }
        }
        let state_files = self.state_files()?;
        let root = self.dir().parent().unwrap_or(self.dir()).to_path_buf();
        let mut found = HotSearch::default();
        let search = |path: PathBuf, found: &mut HotSearch| {
            let Ok(bytes) = std::fs::read(&path) else {
                return;
            };
            found.files_searched += 1;
            found.bytes_searched += bytes.len() as u64;
            if found.first_match.is_none() && contains_any(&bytes, &needles) {
                found.first_match = Some(relative(&root, &path));
            }
        };
        for path in state_files {
            search(path, &mut found);
        }
        let mut pending = vec![self.dir().to_path_buf()];
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StoreError::io(&dir, e)),
            };
            for entry in entries {
                let path = entry.map_err(|e| StoreError::io(&dir, e))?.path();
                if path.is_dir() {
                    pending.push(path);
                } else if buckets.is_some_and(|b| {
                    bucket_of_log_file(self.dir(), &path).is_some_and(|of| !b.contains(&of))
                }) {
                    found.files_skipped += 1;
                } else {
                    search(path, &mut found);
                }
            }
        }
        Ok(found)
    }
}

/// The bucket whose log directory (`<table>/day=*/bucket=B/`) holds `path`, if one does.
fn bucket_of_log_file(table_dir: &Path, path: &Path) -> Option<u32> {
    let mut parts = path.strip_prefix(table_dir).ok()?.components();
    let day = parts.next()?.as_os_str().to_str()?;
    let bucket = parts.next()?.as_os_str().to_str()?;
    // A file directly in `day=*` is no log's, so it is searched.
    parts.next()?;
    LogId::parse_dirs(day, bucket).map(|id| id.bucket)
}

/// `path` relative to `root`, or its file name when it lies elsewhere.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .ok()
        .or_else(|| path.file_name().map(Path::new))
        .unwrap_or(path)
        .display()
        .to_string()
}
