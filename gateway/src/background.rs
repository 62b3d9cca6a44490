//! The server's background loops (tiering scheduler, maintenance, deletion driver,
//! grants refresh, JWKS refresh, audit flushes and checkpoints) run as tasks of one
//! tracker under one cancellation token, so that shutdown can stop them and wait for
//! them before the store closes. No loop is a detached `tokio::spawn`.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone, Default)]
pub struct Background {
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Background {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `task` until it returns; it must return soon after its token is cancelled.
    pub fn spawn<F>(&self, name: &'static str, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let running = task(self.cancel.clone());
        self.tracker.spawn(async move {
            running.await;
            tracing::debug!(task = name, "background task ended");
        });
    }

    /// Runs `task` under a token of its own, cancelled by [`StoppableTask::stop`] or with
    /// every other loop: for what an API call starts and stops (a source).
    pub fn spawn_stoppable<F>(
        &self,
        name: &'static str,
        task: impl FnOnce(CancellationToken) -> F,
    ) -> StoppableTask
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.child_token();
        let running = task(cancel.clone());
        let handle = self.tracker.spawn(async move {
            running.await;
            tracing::debug!(task = name, "background task ended");
        });
        StoppableTask { cancel, handle }
    }

    /// Cancels every loop and waits up to `wait` for all of them to end; false when
    /// some did not (a tiering cycle or a deletion step still at work).
    pub async fn stop(&self, wait: Duration) -> bool {
        self.cancel.cancel();
        self.tracker.close();
        tokio::time::timeout(wait, self.tracker.wait())
            .await
            .is_ok()
    }
}

/// A loop that can be stopped alone.
#[derive(Debug)]
pub struct StoppableTask {
    cancel: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl StoppableTask {
    /// Cancels the loop and waits until it has ended.
    pub async fn stop(self) {
        self.cancel.cancel();
        if let Err(e) = self.handle.await
            && e.is_panic()
        {
            tracing::error!("a stopped background task had panicked: {e}");
        }
    }
}
