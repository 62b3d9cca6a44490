//! Durable files. Every file written whole (table definitions, deletion sidecars,
//! rewritten segments, and the gateway's key files and deletion records) goes through
//! these helpers: write a temp file, fsync it, rename it into place, fsync the
//! directory. A crash leaves the old file or the new one, never a torn one, and a new
//! name survives a power loss. Errors name the path that failed.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// Syncs a directory, so the entries created or renamed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
}

/// Creates `dir` and every missing parent, syncing each parent so the new entries
/// survive a crash.
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(StoreError::io(dir, e)),
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` (created or truncated, with `mode` when it is created) and
/// fsyncs the file. Not atomic on its own: use it for a temp file, then
/// [`rename_durable`].
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| StoreError::io(path, e))
}

/// Renames `from` to `to` and syncs `to`'s directory.
pub fn rename_durable(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| StoreError::io(to, e))?;
    match to.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// The temp file `path` is written through: its name with `.tmp` appended.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes a small file atomically and durably: temp file, fsync, rename, fsync of the
/// directory. Readable by the owner and the group (0640 before the umask).
pub fn write_file_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    write_synced(&tmp, bytes, 0o640)?;
    rename_durable(&tmp, path)
}

/// [`write_file_durable`] for a secret: the file is created with mode 0600, so it is
/// never readable by others, not even for a moment.
pub fn write_secret_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    // A leftover temp file from a crash could have other permissions: start afresh.
    let _ = fs::remove_file(&tmp);
    write_synced(&tmp, bytes, 0o600)?;
    rename_durable(&tmp, path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_durable_write_replaces_the_file_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/def.json");
        create_dir_durable(path.parent().unwrap()).unwrap();
        write_file_durable(&path, b"one").unwrap();
        write_file_durable(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!temp_path(&path).exists());
        assert_eq!(temp_path(&path).file_name().unwrap(), "def.json.tmp");
    }

    #[test]
    fn secrets_are_created_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        fs::write(temp_path(&path), b"stale").unwrap();
        fs::set_permissions(temp_path(&path), fs::Permissions::from_mode(0o644)).unwrap();
        write_secret_durable(&path, b"secret").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(fs::read(&path).unwrap(), b"secret");
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/f.json");
        let err = write_file_durable(&missing, b"x").unwrap_err().to_string();
        assert!(err.contains("f.json.tmp"), "{err}");
    }
}
