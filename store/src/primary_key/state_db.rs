//! The store's one RocksDB: a column family per primary-key table, tuned for point
//! lookups, and the state cache in front of it.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, BoundColumnFamily, Cache, ColumnFamilyDescriptor, DBCompressionType,
    DBWithThreadMode, DataBlockIndexType, MultiThreaded, Options,
};

use super::APPLIED_CF;
use crate::error::{Result, StoreError};
use crate::state_cache::StateCache;

pub(super) type Db = DBWithThreadMode<MultiThreaded>;

/// Block cache shared by every table's column family.
const BLOCK_CACHE_BYTES: usize = 256 << 20;
/// Memtable size of a table's column family.
const MEMTABLE_BYTES: usize = 8 << 20;

/// The store's one RocksDB: a column family per primary-key table.
pub struct StateDb {
    pub(super) db: Db,
    /// Current rows in memory, shared by every table, in front of `db` for lookups.
    pub(super) cache: Arc<StateCache>,
    /// Column family options: tuned for point lookups (whole-key Bloom filters, hashed
    /// data-block index, one shared block cache), while keeping ordered bucket scans.
    cf_options: Options,
}

impl std::fmt::Debug for StateDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateDb")
            .field("path", &self.db.path())
            .finish()
    }
}

pub(super) fn rocks(what: &str, e: rocksdb::Error) -> StoreError {
    StoreError::Unavailable(format!("primary-key state: {what}: {e}"))
}

impl StateDb {
    /// Opens (creating) the RocksDB at `path` with every column family it has, with a
    /// state cache of `cache_bytes` (0: none).
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Arc<Self>> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // A new MANIFEST at every version edit: it then records only the live SST files
        // (with their smallest and largest keys), never the key bounds of files that
        // compactions removed, so an erased key leaves the MANIFEST with its file. The
        // edits are rare (flushes, compactions) and the snapshot is small.
        options.set_max_manifest_file_size(1);
        let mut names = Db::list_cf(&options, path).unwrap_or_default();
        for required in ["default", APPLIED_CF] {
            if !names.iter().any(|n| n == required) {
                names.push(required.to_owned());
            }
        }
        let cf_options = lookup_options(&Cache::new_lru_cache(BLOCK_CACHE_BYTES));
        let cfs = names
            .iter()
            .map(|n| ColumnFamilyDescriptor::new(n, cf_options.clone()));
        let db = Db::open_cf_descriptors(&options, path, cfs).map_err(|e| rocks("open", e))?;
        Ok(Arc::new(Self {
            db,
            cache: Arc::new(StateCache::new(cache_bytes)),
            cf_options,
        }))
    }

    /// Bytes held by the state cache.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.weight()
    }

    pub(super) fn cf(&self, name: &str) -> Result<Arc<BoundColumnFamily<'_>>> {
        if let Some(cf) = self.db.cf_handle(name) {
            return Ok(cf);
        }
        self.db
            .create_cf(name, &self.cf_options)
            .map_err(|e| rocks("create column family", e))?;
        self.db
            .cf_handle(name)
            .ok_or_else(|| StoreError::Unavailable(format!("column family {name} vanished")))
    }
}

/// Column family options for key lookups: a lookup of 1,000 random keys must not read a
/// data block per SST level for keys that are absent there, so every table has
/// whole-key Bloom filters (10 bits/key, ~1% false positives), cached with the index
/// blocks in one LRU cache, and data blocks with a hash index for in-block search.
/// No compression (see below).
fn lookup_options(cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
    let mut options = Options::default();
    options.set_block_based_table_factory(&table);
    options.set_memtable_whole_key_filtering(true);
    options.set_memtable_prefix_bloom_ratio(0.02);
    // Uncompressed SST files: a compliance deletion proves the erased values left the
    // state by searching its files' bytes, which compression would make meaningless.
    // The block cache holds uncompressed blocks either way, so lookups do not pay.
    options.set_compression_type(DBCompressionType::None);
    // Small memtables: a random lookup in a skiplist of a million rows costs more than in
    // Bloom-filtered SST blocks, and a flushed memtable also advances the applied offset,
    // which bounds the changelog replay after a crash (there is no RocksDB WAL).
    options.set_write_buffer_size(MEMTABLE_BYTES);
    options
}
