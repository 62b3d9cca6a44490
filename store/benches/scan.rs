//! A scan of 5 of 50 columns against all 50 columns over the same data.
//!
//! Prints JSON lines: the median time of each over several runs and their ratio.
//! Run: `cargo bench -p hotgate-store --bench scan`.

use std::time::Instant;

use arrow_array::RecordBatch;
use hotgate_store::{ScanRequest, Store, StoreOptions, TableName, TableSpec};

const COLUMNS: usize = 50;
const ROWS_PER_BATCH: usize = 8192;
const BATCHES: usize = 60;
const RUNS: usize = 7;

fn spec() -> TableSpec {
    serde_json::from_value(hotgate_testkit::wide_spec("wide", COLUMNS, 1)).expect("spec")
}

fn batch(seed: usize) -> RecordBatch {
    let now = chrono::Utc::now().timestamp_micros();
    hotgate_testkit::wide_batch(COLUMNS, ROWS_PER_BATCH, seed as i64, now)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time_scan(store: &Store, columns: Option<Vec<String>>) -> (f64, usize) {
    let table = store
        .table(&TableName::new("bench", "wide").expect("name"))
        .expect("table");
    let request = ScanRequest {
        columns,
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        rows = 0;
        for b in table.scan(&request).expect("plan") {
            rows += b.expect("read").batch.num_rows();
        }
        times.push(start.elapsed().as_secs_f64());
    }
    (median(times), rows)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("dir");
    let store = rt.block_on(async {
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        store.create_table(spec()).await.expect("create");
        let name = TableName::new("bench", "wide").expect("name");
        for i in 0..BATCHES {
            store.append(&name, &batch(i)).await.expect("append");
        }
        store
    });
    let _warm = time_scan(&store, None);
    let (all, rows_all) = time_scan(&store, None);
    let five: Vec<String> = ["key", "c5", "c10", "c20", "c41"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (some, rows_some) = time_scan(&store, Some(five));
    assert_eq!(rows_all, rows_some);
    let line = |cols: usize, secs: f64| {
        serde_json::json!({"bench": "hot_scan", "columns": cols, "of": COLUMNS, "rows": rows_all,
            "median_s": secs, "rows_per_s": rows_all as f64 / secs})
    };
    println!("{}", line(COLUMNS, all));
    println!("{}", line(5, some));
    println!(
        "{}",
        serde_json::json!({"bench": "scan_summary", "speedup_5_of_50": all / some})
    );
    rt.block_on(store.close());
}
