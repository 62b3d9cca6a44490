//! The background driver: runs the next step of every pending request, about twice a
//! second, until cancelled. A step that fails with a retryable error is retried with
//! exponential backoff (0.5 s up to 10 s, with jitter); one that fails with an error no retry can
//! fix (a bad predicate, a table that cannot be named) is parked until the next start.
//! Either way the request's status shows the attempts and the last error.

use std::collections::HashMap;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::DeletionState;
use super::steps::{ApplyCold, ApplyHot, Purge, StepContext, run};
use super::verify::Verify;
use crate::error::Result;

/// How often the driver looks for work, and the first retry delay.
const TICK: Duration = Duration::from_millis(500);
/// The longest delay between retries of a failing step (before jitter). Short, because
/// a deletion has a deadline and most failures (a catalog restart, reads still
/// streaming from expired snapshots) clear within seconds.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// The retry state of a request whose current step failed.
#[derive(Debug)]
struct Failing {
    attempts: u32,
    /// Not before this instant; `None` when parked (the error is not retryable).
    next: Option<Instant>,
    delays: ExponentialBackoff,
}

impl Failing {
    fn new() -> Self {
        Self {
            attempts: 0,
            next: Some(Instant::now()),
            delays: ExponentialBuilder::new()
                .with_min_delay(TICK)
                .with_max_delay(MAX_DELAY)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.next.is_some_and(|n| now >= n)
    }
}

/// Runs the step that takes a request out of `state`.
async fn step(state: DeletionState, ctx: &StepContext, id: &str) -> Result<()> {
    match state {
        DeletionState::Accepted => run::<ApplyHot>(ctx, id).await,
        DeletionState::HotApplied => run::<ApplyCold>(ctx, id).await,
        DeletionState::ColdApplied => run::<Purge>(ctx, id).await,
        DeletionState::Purged => run::<Verify>(ctx, id).await,
        DeletionState::Verified => Ok(()),
    }
}

/// Drives every pending request until `cancel` fires. A step in progress when it
/// fires completes or fails as a whole: each step is durable before the next begins.
pub async fn drive(ctx: StepContext, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing: HashMap<String, Failing> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = cancel.cancelled() => return,
        }
        for state in DeletionState::ALL {
            for id in ctx.deletions.ids_in(state) {
                if cancel.is_cancelled() {
                    return;
                }
                if failing.get(&id).is_some_and(|f| !f.due(Instant::now())) {
                    continue;
                }
                match step(state, &ctx, &id).await {
                    Ok(()) => {
                        failing.remove(&id);
                    }
                    Err(e) => {
                        let f = failing.entry(id.clone()).or_insert_with(Failing::new);
                        f.attempts += 1;
                        let retry = e.is_retryable();
                        f.next = retry
                            .then(|| f.delays.next().map(|d| Instant::now() + d))
                            .flatten();
                        let step = state.next().map_or("none", DeletionState::as_str);
                        if retry {
                            tracing::warn!(%id, step, attempts = f.attempts, "deletion step failed; retrying: {e}");
                        } else {
                            tracing::error!(%id, step, attempts = f.attempts, "deletion step failed and is parked until the next start: {e}");
                        }
                        ctx.deletions.note_failure(&id, step, f.attempts, retry, &e);
                    }
                }
            }
        }
    }
}
