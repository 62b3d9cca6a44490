//! `hotgate-bench`: benchmark programs, each comparing hotgate against a baseline in
//! the same run, printing JSON lines.
//!
//! Run: `scripts/bench [reads|lookup|recovery|tiering|deletion] [options]` (it builds in
//! release mode and installs Redis first), or `cargo run --release -p hotgate-bench --
//! <bench>`. `--help` lists each bench's options; each option also reads the
//! `HOTGATE_BENCH_*` variable it names.
//!
//! - `reads` (the default): freshness, Flight reads against a bare Flight server,
//!   governed against admin reads, authorization cost, audit on against off;
//! - `lookup`: primary-key lookups against Redis; `recovery`: primary-key state open
//!   and rebuild times, and restart to serving with gigabytes of log tables;
//! - `tiering`: conversion against the raw parquet writer, a simulated day of tiering;
//! - `deletion`: a compliance deletion on a large table, accepted to verified;
//! - `aggregate`: a Flight SQL `GROUP BY` over both tiers against DataFusion reading
//!   the same files directly;
//! - `catalogs`: one tiering commit into a REST catalog and Postgres against SQLite;
//! - `kafka`: a Kafka source against a bare rskafka consumer, and produce-to-visible
//!   latency.

use clap::{Parser, Subcommand};

mod aggregate;
mod bare_flight;
mod catalog_commit;
mod deletion;
mod gateway;
mod kafka;
mod lookup;
mod reads;
mod restart;
mod sql;
mod stats;
mod tiering;

// mimalloc: requests make many small allocations (JSON, Arrow arrays, gRPC frames), which
// it serves faster than glibc's allocator, notably across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "hotgate-bench",
    about = "hotgate's benchmarks, each against a baseline in the same run"
)]
struct Cli {
    #[command(subcommand)]
    bench: Option<Bench>,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Freshness, Flight reads against a bare Flight server, governance and audit costs.
    Reads {
        /// Rows per second the freshness producer sends.
        #[arg(long, env = "HOTGATE_BENCH_RATE", default_value_t = 2000.0)]
        rate: f64,
    },
    /// Batched and single-key lookups against Redis (MGET, GET) on loopback.
    Lookup {
        /// Keys in the primary-key table.
        #[arg(long, env = "HOTGATE_BENCH_KEYS", default_value_t = 1_000_000)]
        keys: i64,
    },
    /// Open and rebuild times of a primary-key table's RocksDB state, and restart to
    /// serving with gigabytes of hot log tables.
    Recovery {
        /// Table sizes to measure, comma-separated.
        #[arg(long, env = "HOTGATE_BENCH_RECOVERY_KEYS", value_delimiter = ',',
              default_values_t = [1_000_000i64, 10_000_000])]
        keys: Vec<i64>,
        /// GiB of hot log segments for the restart; 0 skips it.
        #[arg(long, env = "HOTGATE_BENCH_LOG_GB", default_value_t = 10.0)]
        log_gb: f64,
    },
    /// Conversion against the raw parquet writer, and a simulated day of tiering.
    Tiering {
        /// Length of the simulated day in seconds (the volume stays the same).
        #[arg(long, env = "HOTGATE_BENCH_DAY_SECS", default_value_t = 86_400)]
        day_secs: i64,
        /// Rows in the simulated day.
        #[arg(long, env = "HOTGATE_BENCH_DAY_ROWS", default_value_t = 4_000_000)]
        day_rows: usize,
    },
    /// A compliance deletion from accepted to verified on a large table.
    Deletion {
        /// Size of the tiered table in MiB of Parquet.
        #[arg(long, env = "HOTGATE_BENCH_DELETION_MB", default_value_t = 2048)]
        mb: u64,
    },
    /// One tiering commit into a REST catalog (rustberg) and Postgres, against SQLite.
    Catalogs,
    /// A Kafka source's ingest against a bare rskafka consumer, and produce-to-read
    /// latency, on tansu.
    Kafka {
        /// Records in the topic.
        #[arg(long, env = "HOTGATE_BENCH_KAFKA_RECORDS", default_value_t = 1_000_000)]
        records: i64,
    },
    /// A Flight SQL `GROUP BY` over both tiers against DataFusion on the same files.
    Aggregate {
        /// Rows written and tiered first (the cold tier).
        #[arg(long, env = "HOTGATE_BENCH_COLD_ROWS", default_value_t = 8_000_000)]
        cold_rows: usize,
        /// Rows written after, left in the hot tier.
        #[arg(long, env = "HOTGATE_BENCH_HOT_ROWS", default_value_t = 4_000_000)]
        hot_rows: usize,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hotgate-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // No bench named is `reads`, parsed so that its options' variables still apply.
    let bench = cli
        .bench
        .or_else(|| Cli::parse_from(["hotgate-bench", "reads"]).bench);
    let run = match bench.expect("a bench") {
        Bench::Reads { rate } => runtime.block_on(reads::reads(rate)),
        Bench::Lookup { keys } => runtime.block_on(lookup::lookup(keys)),
        Bench::Recovery { keys, log_gb } => runtime.block_on(async {
            lookup::recovery(keys).await?;
            if log_gb > 0.0 {
                restart::restart(log_gb).await?;
            }
            Ok(())
        }),
        Bench::Tiering { day_secs, day_rows } => {
            runtime.block_on(tiering::tiering(day_secs, day_rows))
        }
        Bench::Deletion { mb } => runtime.block_on(deletion::deletion(mb)),
        Bench::Catalogs => runtime.block_on(catalog_commit::catalogs()),
        Bench::Kafka { records } => runtime.block_on(kafka::kafka(records)),
        Bench::Aggregate {
            cold_rows,
            hot_rows,
        } => runtime.block_on(aggregate::aggregate(cold_rows, hot_rows)),
    };
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotgate-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
