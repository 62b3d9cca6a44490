//! Key files in the data dir (the write hash key, the audit signing key, the embedded
//! issuer's key): hex text, created once with mode 0600 through the store's durable
//! file helpers and reused after, so hashes, signatures and tokens stay valid across
//! restarts.

use std::path::Path;

use hotgate_store::fs::{create_dir_durable, write_secret_durable};

/// The trimmed contents of `path`; when it does not exist, `create()`'s text is written
/// there first (0600 temp file, fsync, rename, directory fsync), so the secret is never
/// readable by others, and a crash leaves either no key or a whole one.
pub fn load_or_create(path: &Path, create: impl FnOnce() -> String) -> Result<String, String> {
    let read = |path: &Path| std::fs::read_to_string(path).map(|t| t.trim().to_owned());
    match read(path) {
        Ok(text) => return Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir_durable(dir).map_err(|e| e.to_string())?;
    write_secret_durable(path, create().as_bytes()).map_err(|e| e.to_string())?;
    tracing::info!(path = %path.display(), "created key file");
    // Two processes that start at once (`hotgate serve` and `hotgate token`) may both
    // create a key: the last rename wins, and reading it back makes both use that one.
    read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_once_with_mode_0600_then_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/k.key");
        let first = super::load_or_create(&path, || "abc".into()).unwrap();
        let again = super::load_or_create(&path, || unreachable!("the key exists")).unwrap();
        assert_eq!((first.as_str(), again.as_str()), ("abc", "abc"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
