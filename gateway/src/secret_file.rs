//! Key files in the data dir (the write hash key, the audit signing key): hex text,
//! created once with mode 0600 and reused after, so hashes and signatures stay stable
//! across restarts.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The trimmed contents of `path`; when it does not exist, `create()`'s text is written
/// there first: to a 0600 temp file, synced, renamed into place, directory synced. So the
/// secret is never readable by others, and a crash leaves either no key or a whole one.
pub fn load_or_create(path: &Path, create: impl FnOnce() -> String) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => return Ok(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let fail =
        |what: &str, p: &Path, e: std::io::Error| format!("cannot {what} {}: {e}", p.display());
    std::fs::create_dir_all(dir).map_err(|e| fail("create", dir, e))?;
    let text = create();
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| fail("create", &tmp, e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| fail("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| fail("rename", &tmp, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("sync", dir, e))?;
    tracing::info!(path = %path.display(), "created key file");
    Ok(text)
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
