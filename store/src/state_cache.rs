//! The current rows of primary-key tables in memory: a write-through, memory-bounded
//! cache in front of RocksDB that serves lookups.
//!
//! Owns the cache and the protocol that keeps it coherent with RocksDB. It must not
//! decide what a write changes (that is [`crate::primary_key`]) and never holds a row RocksDB
//! does not hold: it is dropped with the process and refilled by writes and lookups.
//!
//! Why: a RocksDB point read walks the memtables, the Bloom filters of every level and
//! an index and data block per candidate file, several microseconds per key on a small
//! machine. A hash probe is a tenth of that, so a lookup of 1,000 keys whose rows are
//! cached costs what a key-value server would.
//!
//! **Coherence.** Each bucket has a gate holding a write generation:
//! - a write bumps it before its RocksDB write (odd: in progress), then after, updates
//!   the cache and bumps it again (even), all under the gate's write lock;
//! - a lookup reads a bucket's cached rows under the gate's read lock, noting the
//!   generation, then fetches the rest from RocksDB. It fills the cache, and trusts the
//!   mix of cached and fetched rows, only if the generation did not move meanwhile;
//!   otherwise it reads the whole bucket's keys from RocksDB (one consistent read).
//!
//! So a lookup never shows half of a bucket's write, and a fill never puts back a row
//! that a newer write replaced or deleted.

use std::sync::Arc;

use quick_cache::DefaultHashBuilder;
use quick_cache::sync::Cache;

/// Weight of an entry beyond its value's bytes: the slot, the `Arc` pointer and header.
const ENTRY_OVERHEAD: u64 = 40;

/// A cached row with its RocksDB key, in one allocation: `[key length: u32][key][row]`.
///
/// Why one allocation: a probe of a random key misses the CPU cache on every pointer it
/// follows, and a lookup of 1,000 keys is mostly such misses. The cache is keyed by a
/// 64-bit hash of (table, key), held inline in its slots; the key stored here is
/// compared on every probe, so two keys sharing a hash only evict each other.
#[derive(Clone)]
pub(crate) struct CachedRow(Arc<[u8]>);

impl CachedRow {
    fn new(key: &[u8], row: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(4 + key.len() + row.len());
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(row);
        Self(bytes.into())
    }

    fn key_len(&self) -> usize {
        u32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]]) as usize
    }

    fn key(&self) -> &[u8] {
        &self.0[4..4 + self.key_len()]
    }

    /// The stored row (the RocksDB value).
    pub(crate) fn row(&self) -> &[u8] {
        &self.0[4 + self.key_len()..]
    }
}

impl std::ops::Deref for CachedRow {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.row()
    }
}

#[derive(Debug, Clone)]
struct RowWeight;

impl quick_cache::Weighter<u64, CachedRow> for RowWeight {
    fn weight(&self, _slot: &u64, value: &CachedRow) -> u64 {
        value.0.len() as u64 + ENTRY_OVERHEAD
    }
}

type Rows = Cache<u64, CachedRow, RowWeight>;

/// The cache shared by every primary-key table of a store.
pub(crate) struct StateCache {
    rows: Option<Rows>,
    /// Hashes (table, key) to a cache slot.
    slots: DefaultHashBuilder,
    next_table: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for StateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache")
            .field("capacity", &self.rows.as_ref().map(Cache::capacity))
            .field("weight", &self.rows.as_ref().map(Cache::weight))
            .finish()
    }
}

impl StateCache {
    /// A cache of at most `bytes` (keys, rows and overhead); 0 turns it off.
    pub(crate) fn new(bytes: u64) -> Self {
        let rows = (bytes > 0).then(|| {
            // A guess at the entry count only sizes the hash table up front.
            let estimated = (bytes / 256).clamp(1024, 1 << 22) as usize;
            Cache::with_weighter(estimated, bytes, RowWeight)
        });
        Self {
            rows,
            slots: DefaultHashBuilder::default(),
            next_table: Default::default(),
        }
    }

    /// A slot for one table's rows; a table opened twice gets a new one, so rows of an
    /// earlier incarnation are never served.
    pub(crate) fn table(self: &Arc<Self>, buckets: u32) -> TableCache {
        TableCache {
            cache: Arc::clone(self),
            table: self
                .next_table
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            gates: (0..buckets).map(|_| parking_lot::RwLock::new(0)).collect(),
        }
    }

    /// Bytes held now.
    pub(crate) fn weight(&self) -> u64 {
        self.rows.as_ref().map_or(0, Cache::weight)
    }
}

/// One table's view of the cache, with its buckets' gates.
#[derive(Debug)]
pub(crate) struct TableCache {
    cache: Arc<StateCache>,
    table: u32,
    gates: Vec<parking_lot::RwLock<u64>>,
}

/// What a lookup saw of a bucket in the cache.
pub(crate) struct BucketProbe {
    /// The generation under which the hits were read; odd while a write runs.
    generation: u64,
}

impl BucketProbe {
    /// Whether a write was running while the cache was read: the bucket must then be
    /// read from RocksDB alone.
    pub(crate) fn write_running(&self) -> bool {
        self.generation % 2 == 1
    }
}

impl TableCache {
    fn rows(&self) -> Option<&Rows> {
        self.cache.rows.as_ref()
    }

    fn slot(&self, key: &[u8]) -> u64 {
        self.cache.slots.hash_one((self.table, key))
    }

    pub(crate) fn enabled(&self) -> bool {
        self.rows().is_some()
    }

    fn gate(&self, bucket: u32) -> &parking_lot::RwLock<u64> {
        // Bucket numbers come from the table's own routing, so they are in range.
        &self.gates[bucket as usize % self.gates.len()]
    }

    /// Reads `keys` of one bucket: `out[i]` gets the cached row of `keys[i]`, if any.
    pub(crate) fn probe<'k>(
        &self,
        bucket: u32,
        keys: impl Iterator<Item = &'k [u8]>,
        mut out: impl FnMut(Option<CachedRow>),
    ) -> BucketProbe {
        let gate = self.gate(bucket).read();
        let generation = *gate;
        match self.rows() {
            Some(rows) if generation.is_multiple_of(2) => {
                for key in keys {
                    out(rows.get(&self.slot(key)).filter(|r| r.key() == key));
                }
            }
            _ => keys.for_each(|_| out(None)),
        }
        BucketProbe { generation }
    }

    /// After fetching a bucket's other keys from RocksDB: if no write touched the bucket
    /// since `probe`, stores `fetched` rows and returns true; otherwise returns false
    /// and stores nothing.
    pub(crate) fn settle<'a>(
        &self,
        bucket: u32,
        probe: &BucketProbe,
        fetched: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> bool {
        let gate = self.gate(bucket).read();
        if *gate != probe.generation || probe.write_running() {
            return false;
        }
        if let Some(rows) = self.rows() {
            for (key, value) in fetched {
                rows.insert(self.slot(key), CachedRow::new(key, value));
            }
        }
        true
    }

    /// Runs `write` (the bucket's RocksDB write) with the bucket's generation odd, then
    /// makes the cache hold exactly what was written: `Some` rows stored, `None` keys
    /// removed. A failed write leaves the cache without any of the keys.
    pub(crate) fn write_through<T, E>(
        &self,
        bucket: u32,
        writes: &[(Vec<u8>, Option<Vec<u8>>)],
        write: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let gate = self.gate(bucket);
        *gate.write() += 1;
        let result = write();
        let mut generation = gate.write();
        if let Some(rows) = self.rows() {
            for (key, value) in writes {
                match (value, &result) {
                    (Some(value), Ok(_)) => rows.insert(self.slot(key), CachedRow::new(key, value)),
                    _ => {
                        rows.remove_if(&self.slot(key), |r| r.key() == key.as_slice());
                    }
                }
            }
        }
        *generation += 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[u8]) -> Option<Vec<u8>> {
        Some(v.to_vec())
    }

    /// One table of `buckets` in a 1 MiB cache of its own (the table holds the cache).
    fn cache_of(buckets: u32) -> TableCache {
        Arc::new(StateCache::new(1 << 20)).table(buckets)
    }

    /// A write of `key` (a delete when `value` is `None`) that RocksDB accepts.
    fn write(t: &TableCache, bucket: u32, key: &[u8], value: Option<Vec<u8>>) {
        t.write_through(bucket, &[(key.to_vec(), value)], || Ok::<_, ()>(()))
            .unwrap();
    }

    fn cached(t: &TableCache, bucket: u32, key: &[u8]) -> Option<Vec<u8>> {
        let mut got = None;
        t.probe(bucket, std::iter::once(key), |v| {
            got = v.map(|v| v.to_vec())
        });
        got
    }

    #[test]
    fn writes_go_through_and_deletes_remove() {
        let t = cache_of(2);
        write(&t, 0, b"a", row(b"1"));
        assert_eq!(cached(&t, 0, b"a"), row(b"1"));
        write(&t, 0, b"a", None);
        assert_eq!(cached(&t, 0, b"a"), None);
    }

    #[test]
    fn a_slot_holding_another_key_is_a_miss() {
        let t = cache_of(1);
        // What a 64-bit hash collision leaves behind: b's row in a's slot.
        t.rows()
            .unwrap()
            .insert(t.slot(b"a"), CachedRow::new(b"b", b"1"));
        assert_eq!(cached(&t, 0, b"a"), None);
        // A delete of a leaves b's row alone; a write of a takes the slot.
        write(&t, 0, b"a", None);
        assert!(t.rows().unwrap().get(&t.slot(b"a")).is_some());
        write(&t, 0, b"a", row(b"2"));
        assert_eq!(cached(&t, 0, b"a"), row(b"2"));
    }

    #[test]
    fn a_failed_write_leaves_none_of_its_keys_cached() {
        let t = cache_of(1);
        write(&t, 0, b"a", row(b"1"));
        let failed = t.write_through(0, &[(b"a".to_vec(), row(b"2"))], || Err::<(), _>("io"));
        assert!(failed.is_err());
        assert_eq!(cached(&t, 0, b"a"), None, "RocksDB may hold either row now");
    }

    #[test]
    fn a_fill_is_refused_after_a_write_to_the_bucket() {
        let t = cache_of(2);
        let probe = t.probe(1, std::iter::once(&b"k"[..]), |_| {});
        // A write lands between the lookup's probe and its RocksDB read.
        write(&t, 1, b"k", None);
        assert!(!t.settle(1, &probe, std::iter::once((&b"k"[..], &b"stale"[..]))));
        assert_eq!(
            cached(&t, 1, b"k"),
            None,
            "the deleted row must not come back"
        );
        // Another bucket's write does not disturb a fill.
        let probe = t.probe(0, std::iter::once(&b"k"[..]), |_| {});
        write(&t, 1, b"x", row(b"1"));
        assert!(t.settle(0, &probe, std::iter::once((&b"k"[..], &b"v"[..]))));
        assert_eq!(cached(&t, 0, b"k"), row(b"v"));
    }

    #[test]
    fn a_probe_during_a_write_reads_nothing_cached() {
        let t = cache_of(1);
        write(&t, 0, b"a", row(b"1"));
        let during = t.write_through(0, &[(b"a".to_vec(), row(b"2"))], || {
            let mut seen = Some(CachedRow::new(b"a", b"?"));
            let probe = t.probe(0, std::iter::once(&b"a"[..]), |v| seen = v);
            Ok::<_, ()>((probe.write_running(), seen))
        });
        let (running, seen) = during.unwrap();
        assert!(running);
        assert!(seen.is_none());
        assert_eq!(cached(&t, 0, b"a"), row(b"2"));
    }

    #[test]
    fn tables_do_not_share_rows_and_a_zero_budget_caches_nothing() {
        let cache = Arc::new(StateCache::new(1 << 20));
        let (a, b) = (cache.table(1), cache.table(1));
        write(&a, 0, b"k", row(b"1"));
        assert_eq!(cached(&b, 0, b"k"), None);
        let off = Arc::new(StateCache::new(0)).table(1);
        write(&off, 0, b"k", row(b"1"));
        assert!(!off.enabled());
        assert_eq!(cached(&off, 0, b"k"), None);
    }

    #[test]
    fn the_budget_bounds_the_bytes_held() {
        let cache = Arc::new(StateCache::new(64 * 1024));
        let t = cache.table(1);
        for i in 0..10_000u32 {
            t.write_through(0, &[(i.to_be_bytes().to_vec(), row(&[7; 100]))], || {
                Ok::<_, ()>(())
            })
            .unwrap();
        }
        assert!(cache.weight() <= 64 * 1024, "{}", cache.weight());
        assert!(cache.weight() > 0);
    }
}
