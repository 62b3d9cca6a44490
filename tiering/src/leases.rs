//! Read leases on cold snapshots.
//!
//! A union read plans on one snapshot and opens its data files while it streams, which
//! can outlast the snapshot being current. Whatever deletes files that only expired
//! snapshots reference (the compliance purge, cold retention, maintenance's purge) first
//! waits until no read still holds a lease on an expired snapshot; if reads do not
//! finish in time, the deletion is deferred to a later run, never done under them.
//!
//! A lease is taken while the table's current state is read, so a snapshot cannot be
//! expired between a read choosing it and the lease being held.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

/// The leases of one table: how many reads hold each snapshot.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<i64, usize>>,
    released: tokio::sync::Notify,
}

/// A read's hold on a snapshot; released when the last clone drops.
#[derive(Debug)]
pub struct SnapshotLease {
    leases: Arc<Leases>,
    snapshot_id: i64,
}

impl Drop for SnapshotLease {
    fn drop(&mut self) {
        let mut held = self.leases.held.lock();
        if let Some(count) = held.get_mut(&self.snapshot_id) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.snapshot_id);
            }
        }
        drop(held);
        self.leases.released.notify_waiters();
    }
}

impl Leases {
    pub(crate) fn acquire(self: &Arc<Self>, snapshot_id: i64) -> Arc<SnapshotLease> {
        *self.held.lock().entry(snapshot_id).or_default() += 1;
        Arc::new(SnapshotLease {
            leases: Arc::clone(self),
            snapshot_id,
        })
    }

    /// How many leases are held on snapshots outside `live`.
    pub(crate) fn held_outside(&self, live: &HashSet<i64>) -> usize {
        self.held
            .lock()
            .iter()
            .filter(|(id, _)| !live.contains(id))
            .map(|(_, n)| *n)
            .sum()
    }

    /// Waits up to `timeout` for every lease outside `live` to be released. Returns how
    /// many are still held (0: the files of other snapshots may go).
    pub(crate) async fn drain_outside(&self, live: &HashSet<i64>, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a release between the two is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let held = self.held_outside(live);
            if held == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return self.held_outside(live);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_purge_waits_for_reads_of_expired_snapshots_only() {
        let leases = Arc::new(Leases::default());
        let old = leases.acquire(1);
        let current = leases.acquire(2);
        let live: HashSet<i64> = [2].into();
        assert_eq!(leases.held_outside(&live), 1);
        assert_eq!(
            leases.drain_outside(&live, Duration::from_millis(20)).await,
            1,
            "a read of snapshot 1 is still streaming"
        );
        let waiter = {
            let leases = Arc::clone(&leases);
            let live = live.clone();
            tokio::spawn(async move { leases.drain_outside(&live, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(old);
        assert_eq!(waiter.await.unwrap(), 0);
        drop(current);
        assert_eq!(leases.held_outside(&HashSet::new()), 0);
    }
}
