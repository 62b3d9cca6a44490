//! The recovery point of a log: how far into its active segment the frames were durable
//! and whole when it was written, so that opening the log reads and CRC-checks only the
//! frames past it (Kafka's recovery-point checkpoint). A clean close writes it at the
//! segment's end, so a restart after one reads no payload at all; while the log runs,
//! the writer refreshes it every [`RECOVERY_POINT_BYTES`] of commits, so a crash costs
//! at most that much reading.
//!
//! It is written without `fsync` (temp file, then rename): a lost or torn one is ignored
//! and the whole segment is checked, as if there were none. It vouches only for bytes
//! that were synced before it was written, and the writer never writes below a commit's
//! end, so those bytes stay as they were. It also names the stored CRC of the frame that
//! ends at its position: a file that no longer holds that frame there (rewritten, cut)
//! is checked whole.
//!
//! Format: `HGRP0001`, the segment's base offset and the position (little-endian u64
//! each), the CRC of the frame ending at the position (u32), and a CRC32C of everything
//! before it.

use std::path::{Path, PathBuf};

/// The writer refreshes the recovery point after this many bytes of commits.
pub(super) const RECOVERY_POINT_BYTES: u64 = 16 * 1024 * 1024;

const MAGIC: &[u8; 8] = b"HGRP0001";
const FILE: &str = "recovery-point";
const LEN: usize = 8 + 8 + 8 + 4 + 4;

/// Frames of segment `base` that end at or before `position` were durable and whole;
/// the last of them has stored CRC `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RecoveryPoint {
    pub base: u64,
    pub position: u64,
    pub crc: u32,
}

fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

impl RecoveryPoint {
    fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.base.to_le_bytes());
        b[16..24].copy_from_slice(&self.position.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc.to_le_bytes());
        let sum = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&sum.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != LEN || &b[0..8] != MAGIC {
            return None;
        }
        let sum = u32::from_le_bytes(b[28..32].try_into().ok()?);
        if crc32c::crc32c(&b[..28]) != sum {
            return None;
        }
        Some(Self {
            base: u64::from_le_bytes(b[8..16].try_into().ok()?),
            position: u64::from_le_bytes(b[16..24].try_into().ok()?),
            crc: u32::from_le_bytes(b[24..28].try_into().ok()?),
        })
    }

    /// The recovery point in the log directory `dir`, if there is a readable one. One
    /// that cannot be read costs only time, so it is logged and ignored.
    pub(super) fn read(dir: &Path) -> Option<Self> {
        let path = path_in(dir);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let point = Self::decode(&bytes);
                if point.is_none() {
                    tracing::warn!(path = %path.display(), "ignoring an unreadable recovery point");
                }
                point
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring the recovery point: {e}");
                None
            }
        }
    }

    /// Removes the recovery point in `dir`, if there is one. Failing leaves a point
    /// that names a segment no longer there, which opening ignores.
    pub(super) fn remove(dir: &Path) {
        let path = path_in(dir);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot remove the recovery point: {e}")
            }
        }
    }

    /// Replaces the recovery point in `dir`. Failing costs only the next open's time.
    pub(super) fn write(&self, dir: &Path) {
        let path = path_in(dir);
        let tmp = path.with_extension("tmp");
        if let Err(e) =
            std::fs::write(&tmp, self.encode()).and_then(|()| std::fs::rename(&tmp, &path))
        {
            tracing::warn!(path = %path.display(), "cannot write the recovery point: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovery_point_round_trips_and_a_damaged_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RecoveryPoint::read(dir.path()), None);
        let point = RecoveryPoint {
            base: 7,
            position: 1 << 33,
            crc: 0xdead_beef,
        };
        point.write(dir.path());
        assert_eq!(RecoveryPoint::read(dir.path()), Some(point));
        let mut bytes = std::fs::read(path_in(dir.path())).unwrap();
        bytes[17] ^= 1;
        std::fs::write(path_in(dir.path()), &bytes).unwrap();
        assert_eq!(RecoveryPoint::read(dir.path()), None);
        std::fs::write(path_in(dir.path()), &bytes[..20]).unwrap();
        assert_eq!(RecoveryPoint::read(dir.path()), None);
    }
}
