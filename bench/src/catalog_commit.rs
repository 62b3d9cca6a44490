//! `hotgate-bench catalogs`: the time of one tiering commit into an Iceberg REST catalog
//! (rustberg on loopback) and into Postgres, against the embedded SQLite catalog, in the
//! same run.
//!
//! Each round appends the same small batch to a two-bucket table in each catalog
//! (interleaved, so noise hits all alike) and times:
//!
//! - `cycle`: a forced tiering cycle (load, convert two logs, commit);
//! - `commit`: the commit alone, an empty append on the current snapshot (manifest list,
//!   then the catalog's pointer swap or `CommitTableRequest`), then the reload.
//!
//! Printed: the median of 20 rounds for each, and REST and Postgres over SQLite.

use std::time::Instant;

use hotgate_store::{HotTable, Store, StoreOptions};
use hotgate_testkit::{PostgresServer, RestCatalogServer, T0};
use hotgate_tiering::commit::{CommitRequest, commit};
use hotgate_tiering::{Catalog, CatalogConfig, Tierer};

use crate::gateway::BenchResult;
use crate::stats::median;

const ROUNDS: usize = 20;
const ROWS: usize = 2_000;

struct Target {
    name: &'static str,
    _dir: tempfile::TempDir,
    _store: Store,
    hot: std::sync::Arc<HotTable>,
    tierer: Tierer,
    cycle_ms: Vec<f64>,
    commit_ms: Vec<f64>,
}

async fn target(
    name: &'static str,
    config: impl FnOnce(&std::path::Path) -> BenchResult<CatalogConfig>,
) -> BenchResult<Target> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("hot"), StoreOptions::default())?;
    let hot = store
        .create_table(crate::tiering::spec(2, 128 << 20, "5m")?)
        .await?;
    let tierer = Tierer::new(Catalog::open(config(dir.path())?).await?);
    tierer.ensure_table(&hot).await?;
    Ok(Target {
        name,
        _dir: dir,
        _store: store,
        hot,
        tierer,
        cycle_ms: Vec::new(),
        commit_ms: Vec::new(),
    })
}

pub(crate) async fn catalogs() -> BenchResult<()> {
    let rest = RestCatalogServer::start();
    let postgres = PostgresServer::start();
    let mut targets = vec![
        target("sqlite", |dir| Ok(CatalogConfig::embedded(dir))).await?,
        target("rest", |_| Ok(serde_json::from_value(rest.catalog_json())?)).await?,
        target("postgres", |dir| {
            Ok(serde_json::from_value(serde_json::json!({
                "type": "sql",
                "uri": postgres.uri(),
                "warehouse": format!("file://{}", std::path::absolute(dir)?.join("warehouse").display()),
            }))?)
        })
        .await?,
    ];
    for round in 0..ROUNDS {
        let first = (round * ROWS) as i64;
        let rows = crate::tiering::batch(first, ROWS, |i| T0 + i * 1_000)?;
        for t in &mut targets {
            t.hot.append(&rows).await?;
            let started = Instant::now();
            t.tierer.cycle(&t.hot, T0, true).await?;
            t.cycle_ms.push(started.elapsed().as_secs_f64() * 1e3);

            let name = t.hot.def().name().clone();
            let catalog = t.tierer.catalog();
            let table = catalog.load(&name).await?;
            let started = Instant::now();
            commit(catalog, &name, &table, CommitRequest::append(Vec::new())).await?;
            t.commit_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    let sqlite_cycle = median(targets[0].cycle_ms.clone());
    let sqlite_commit = median(targets[0].commit_ms.clone());
    for t in &targets {
        let (cycle, commit) = (median(t.cycle_ms.clone()), median(t.commit_ms.clone()));
        println!(
            "{}",
            serde_json::json!({
                "bench": "catalog_commit",
                "catalog": t.name,
                "rounds": ROUNDS,
                "rows_per_cycle": ROWS,
                "cycle_ms_median": cycle,
                "commit_ms_median": commit,
                "cycle_over_sqlite": cycle / sqlite_cycle,
                "commit_over_sqlite": commit / sqlite_commit,
            })
        );
    }
    Ok(())
}
