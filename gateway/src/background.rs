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
