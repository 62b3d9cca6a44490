//! Sources: Kafka topics consumed into hot tables, exactly once, governed on the way in.
//!
//! Owns the source settings (`[[sources]]` and `/v1/sources`), the consumer tasks, the decoding of records
//! into rows, the positions file and `_system.rejects`. Must not touch the store's
//! internals: rows go in through `HotTable::append_from_source` and
//! `write_changes_from_source`, which keep each row's source offset durable with the
//! row (`hotgate_store::source_marks`), so that a replay from any earlier position
//! writes nothing twice.
//!
//! - [`config`]: a source's settings and their checks;
//! - [`consumer`]: the per-partition loops (fetch, decode, write rules, audit, write);
//! - [`avro`]: Avro values (a fixed writer schema, or the Confluent wire format with a
//!   schema registry) → the JSON objects `decode` reads;
//! - [`decode`]: JSON records → rows, and the rejects;
//! - [`checkpoint`]: the next offset per partition, the lower bound a restart resumes at;
//! - [`managed`]: the sources created through the API and the paused ones, on disk;
//! - [`rejects`]: the `_system.rejects` table;
//! - [`status`]: what the status route and `/metrics` show.

pub mod avro;
pub mod checkpoint;
pub mod config;
pub mod consumer;
pub mod decode;
pub mod managed;
pub mod rejects;
pub mod status;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub use config::SourceConfig;
pub use status::{Origin, PartitionStatus, SourceState, SourceStatus};

use crate::background::{Background, StoppableTask};
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;
use consumer::SourceRuntime;
use managed::Managed;

/// Every source of the server: those of the config file and those created through the
/// API, each with its running task (none while paused).
#[derive(Debug)]
pub struct Sources {
    /// `<data_dir>/sources`: the positions files and the managed file.
    dir: PathBuf,
    entries: parking_lot::Mutex<BTreeMap<String, Arc<Entry>>>,
    /// What the API changed, as on disk.
    managed: parking_lot::Mutex<Managed>,
    /// One management call at a time: the managed file, the entries and the running
    /// tasks change together.
    manage: tokio::sync::Mutex<()>,
    /// Set by [`Sources::start`]: where the tasks run.
    background: OnceLock<Background>,
    rejects: tokio::sync::OnceCell<Arc<rejects::Rejects>>,
}

#[derive(Debug)]
struct Entry {
    runtime: Arc<SourceRuntime>,
    origin: Origin,
    task: parking_lot::Mutex<Option<StoppableTask>>,
}

/// A source as `GET /v1/sources` shows it: its state and its settings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SourceView {
    #[serde(flatten)]
    pub status: SourceStatus,
    pub settings: SourceConfig,
}

impl Sources {
    /// Checks the configured sources and those the API created, and reads their
    /// positions; nothing is contacted. A bad setting is an error naming it, and the
    /// server does not start.
    pub fn open(data_dir: &Path, configs: &[SourceConfig]) -> Result<Self> {
        let dir = data_dir.join("sources");
        let managed = Managed::load(&dir)?;
        let declared = configs
            .iter()
            .map(|c| (c, Origin::Config))
            .chain(managed.sources.iter().map(|c| (c, Origin::Api)));
        let mut entries = BTreeMap::new();
        for (config, origin) in declared {
            config.validate().map_err(GatewayError::InvalidArgument)?;
            if entries.contains_key(&config.name) {
                return Err(GatewayError::InvalidArgument(match origin {
                    Origin::Config => format!("sources: two sources are named {:?}", config.name),
                    Origin::Api => format!(
                        "sources: {:?} is declared in the config file and was also created \
                         through POST /v1/sources; rename or remove the one in the config file",
                        config.name
                    ),
                }));
            }
            let checkpoint = checkpoint::Checkpoint::open(&dir, &config.name, &config.topic)?;
            let runtime = Arc::new(SourceRuntime::new(config.clone(), checkpoint, origin)?);
            if managed.paused.contains(&config.name) {
                runtime.set_state(SourceState::Paused, None);
            }
            entries.insert(
                config.name.clone(),
                Arc::new(Entry {
                    runtime,
                    origin,
                    task: parking_lot::Mutex::new(None),
                }),
            );
        }
        Ok(Self {
            dir,
            entries: parking_lot::Mutex::new(entries),
            managed: parking_lot::Mutex::new(managed),
            manage: tokio::sync::Mutex::new(()),
            background: OnceLock::new(),
            rejects: tokio::sync::OnceCell::new(),
        })
    }

    /// Starts a task per source that is not paused. A source whose table does not
    /// exist yet waits for it, with the reason in its status.
    pub async fn start(&self, state: &Arc<GatewayState>, background: &Background) -> Result<()> {
        let _manage = self.manage.lock().await;
        let _ = self.background.set(background.clone());
        let entries: Vec<Arc<Entry>> = self.entries.lock().values().cloned().collect();
        for entry in entries {
            if !self.is_paused(&entry.runtime.config.name) {
                self.run(state, &entry).await?;
            }
        }
        Ok(())
    }

    /// The status of every source.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        self.entries
            .lock()
            .values()
            .map(|e| e.runtime.status.lock().clone())
            .collect()
    }

    /// The status of the source `name`.
    pub fn status(&self, name: &str) -> Option<SourceStatus> {
        self.entries
            .lock()
            .get(name)
            .map(|e| e.runtime.status.lock().clone())
    }

    /// The status and settings of the source `name`.
    pub fn view(&self, name: &str) -> Option<SourceView> {
        self.entries.lock().get(name).map(|e| SourceView {
            status: e.runtime.status.lock().clone(),
            settings: e.runtime.config.clone(),
        })
    }

    /// The status and settings of every source.
    pub fn views(&self) -> Vec<SourceView> {
        self.entries
            .lock()
            .values()
            .map(|e| SourceView {
                status: e.runtime.status.lock().clone(),
                settings: e.runtime.config.clone(),
            })
            .collect()
    }

    /// Creates and starts a source. Refused, with nothing written, when a setting is
    /// bad, the name is taken, the table does not exist or cannot take the records, or
    /// the name consumed another topic before. The broker is not contacted: a source
    /// whose brokers cannot be reached waits, with the reason in its status.
    pub async fn create(
        &self,
        state: &Arc<GatewayState>,
        config: SourceConfig,
    ) -> Result<SourceView> {
        let _manage = self.manage.lock().await;
        config.validate().map_err(GatewayError::InvalidArgument)?;
        if self.entries.lock().contains_key(&config.name) {
            return Err(GatewayError::AlreadyExists(format!(
                "a source named {:?} exists",
                config.name
            )));
        }
        match consumer::table_ready(state, &config) {
            Ok(_) => {}
            Err(GatewayError::NotFound(_)) => {
                return Err(GatewayError::NotFound(format!(
                    "table {} does not exist; create it before its source",
                    config.table
                )));
            }
            Err(e) => return Err(e),
        }
        // Positions left by a deleted source of the same name: it goes on after them,
        // on the same topic only (its rows' source marks carry the name).
        let checkpoint = checkpoint::Checkpoint::open(&self.dir, &config.name, &config.topic)?;
        let mut next = self.managed.lock().clone();
        next.sources.push(config.clone());
        next.paused.remove(&config.name);
        next.store(&self.dir)?;
        *self.managed.lock() = next;
        let entry = Arc::new(Entry {
            runtime: Arc::new(SourceRuntime::new(config.clone(), checkpoint, Origin::Api)?),
            origin: Origin::Api,
            task: parking_lot::Mutex::new(None),
        });
        self.entries
            .lock()
            .insert(config.name.clone(), Arc::clone(&entry));
        tracing::info!(source = %config.name, topic = %config.topic, table = %config.table, "source created");
        self.run(state, &entry).await?;
        Ok(self.view(&config.name).expect("just created"))
    }

    /// Stops the source `name` and forgets its settings. Its positions file stays: a
    /// source created again under the name goes on after them. Sources of the config
    /// file are removed there, not here.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let _manage = self.manage.lock().await;
        let entry = self.entry(name)?;
        if entry.origin == Origin::Config {
            return Err(GatewayError::InvalidArgument(format!(
                "source {name:?} is declared in the config file; remove it there"
            )));
        }
        let mut next = self.managed.lock().clone();
        next.sources.retain(|c| c.name != name);
        next.paused.remove(name);
        next.store(&self.dir)?;
        *self.managed.lock() = next;
        self.stop(&entry).await;
        self.entries.lock().remove(name);
        tracing::info!(source = %name, "source deleted");
        Ok(())
    }

    /// Pauses the source `name`: its task stops once its current commit group is
    /// durable, and it stays paused across restarts until resumed. Pausing a paused
    /// source changes nothing.
    pub async fn pause(&self, name: &str) -> Result<SourceView> {
        let _manage = self.manage.lock().await;
        let entry = self.entry(name)?;
        if !self.is_paused(name) {
            let mut next = self.managed.lock().clone();
            next.paused.insert(name.to_owned());
            next.store(&self.dir)?;
            *self.managed.lock() = next;
            self.stop(&entry).await;
            entry.runtime.set_state(SourceState::Paused, None);
            tracing::info!(source = %name, "source paused");
        }
        Ok(self.view(name).expect("looked up above"))
    }

    /// Resumes the source `name` from where it stopped. A source that failed (a bad
    /// record under `on_error = "stop"`) is started again, and meets the same record
    /// unless the topic or the table changed. Resuming a running source changes nothing.
    pub async fn resume(&self, state: &Arc<GatewayState>, name: &str) -> Result<SourceView> {
        let _manage = self.manage.lock().await;
        let entry = self.entry(name)?;
        let failed = entry.runtime.status.lock().state == SourceState::Failed;
        if self.is_paused(name) {
            let mut next = self.managed.lock().clone();
            next.paused.remove(name);
            next.store(&self.dir)?;
            *self.managed.lock() = next;
        } else if !failed {
            return Ok(self.view(name).expect("looked up above"));
        }
        self.stop(&entry).await;
        entry.runtime.set_state(SourceState::Waiting, None);
        self.run(state, &entry).await?;
        tracing::info!(source = %name, "source resumed");
        Ok(self.view(name).expect("looked up above"))
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>> {
        self.entries
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| GatewayError::NotFound(format!("no source {name:?}")))
    }

    fn is_paused(&self, name: &str) -> bool {
        self.managed.lock().paused.contains(name)
    }

    /// Starts the source's task (once [`Sources::start`] has run; before it, `start`
    /// starts it).
    async fn run(&self, state: &Arc<GatewayState>, entry: &Arc<Entry>) -> Result<()> {
        let Some(background) = self.background.get() else {
            return Ok(());
        };
        let rejects = self
            .rejects
            .get_or_try_init(|| async { rejects::Rejects::open(&state.store).await.map(Arc::new) })
            .await?;
        let (state, runtime, rejects) = (
            Arc::clone(state),
            Arc::clone(&entry.runtime),
            Arc::clone(rejects),
        );
        let task = background.spawn_stoppable("source", move |cancel| {
            consumer::run_source(state, runtime, rejects, cancel)
        });
        *entry.task.lock() = Some(task);
        Ok(())
    }

    async fn stop(&self, entry: &Entry) {
        let task = entry.task.lock().take();
        if let Some(task) = task {
            task.stop().await;
        }
    }
}

impl hotgate_tiering::SourceProgress for Sources {
    /// Each source's in-memory positions: a partition's moves on only once the rows
    /// below it are durable (or were dropped), so every record below it is in a log.
    fn consumed(&self, table: &hotgate_store::TableName) -> hotgate_tiering::SourcePartitions {
        self.entries
            .lock()
            .values()
            .filter(|e| {
                hotgate_store::TableName::parse(&e.runtime.config.table).is_ok_and(|n| &n == table)
            })
            .map(|e| (e.runtime.config.name.clone(), e.runtime.checkpoint.all()))
            .collect()
    }
}

impl crate::deletion::SourcePositions for Sources {
    fn positions_into(&self, table: &str) -> Vec<crate::deletion::KafkaRecords> {
        self.statuses()
            .into_iter()
            .filter(|s| s.table == table)
            .flat_map(|s| {
                s.partitions.into_iter().filter_map(move |p| {
                    Some(crate::deletion::KafkaRecords {
                        source: s.name.clone(),
                        topic: s.topic.clone(),
                        partition: p.partition,
                        through_offset: p.next_offset? - 1,
                    })
                })
            })
            .collect()
    }
}
