//! Sources: Kafka topics consumed into hot tables, exactly once, governed on the way in.
//!
//! Owns the source settings (`[[sources]]`), the consumer tasks, the decoding of records
//! into rows, the positions file and `_system.rejects`. Must not touch the store's
//! internals: rows go in through `HotTable::append_from_source` and
//! `write_changes_from_source`, which keep each row's source offset durable with the
//! row (`hotgate_store::source_marks`), so that a replay from any earlier position
//! writes nothing twice.
//!
//! - [`config`]: a source's settings and their checks;
//! - [`consumer`]: the per-partition loops (fetch, decode, write rules, audit, write);
//! - [`decode`]: JSON records → rows, and the rejects;
//! - [`checkpoint`]: the next offset per partition, the lower bound a restart resumes at;
//! - [`rejects`]: the `_system.rejects` table;
//! - [`status`]: what the status route and `/metrics` show.

pub mod checkpoint;
pub mod config;
pub mod consumer;
pub mod decode;
pub mod rejects;
pub mod status;

use std::path::Path;
use std::sync::Arc;

pub use config::SourceConfig;
pub use status::{PartitionStatus, SourceState, SourceStatus};

use crate::background::Background;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;
use consumer::SourceRuntime;

/// Every source of the server.
#[derive(Debug, Default)]
pub struct Sources {
    sources: Vec<Arc<SourceRuntime>>,
}

impl Sources {
    /// Checks the configured sources and reads their positions; nothing is contacted.
    /// A bad setting is an error naming it, and the server does not start.
    pub fn open(data_dir: &Path, configs: &[SourceConfig]) -> Result<Self> {
        let dir = data_dir.join("sources");
        let mut sources = Vec::with_capacity(configs.len());
        for config in configs {
            config.validate().map_err(GatewayError::InvalidArgument)?;
            if sources
                .iter()
                .any(|s: &Arc<SourceRuntime>| s.config.name == config.name)
            {
                return Err(GatewayError::InvalidArgument(format!(
                    "sources: two sources are named {:?}",
                    config.name
                )));
            }
            let checkpoint = checkpoint::Checkpoint::open(&dir, &config.name, &config.topic)?;
            sources.push(Arc::new(SourceRuntime::new(config.clone(), checkpoint)));
        }
        Ok(Self { sources })
    }

    /// Starts a task per source. A source whose table does not exist yet waits for it,
    /// with the reason in its status.
    pub async fn start(&self, state: &Arc<GatewayState>, background: &Background) -> Result<()> {
        if self.sources.is_empty() {
            return Ok(());
        }
        let rejects = Arc::new(rejects::Rejects::open(&state.store).await?);
        for source in &self.sources {
            let (state, source, rejects) =
                (Arc::clone(state), Arc::clone(source), Arc::clone(&rejects));
            background.spawn("source", move |cancel| {
                consumer::run_source(state, source, rejects, cancel)
            });
        }
        Ok(())
    }

    /// The status of every source.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        self.sources
            .iter()
            .map(|s| s.status.lock().clone())
            .collect()
    }

    /// The status of the source `name`.
    pub fn status(&self, name: &str) -> Option<SourceStatus> {
        self.sources
            .iter()
            .find(|s| s.config.name == name)
            .map(|s| s.status.lock().clone())
    }
}
