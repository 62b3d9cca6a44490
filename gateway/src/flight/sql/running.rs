//! Statements that can be cancelled: each `GetFlightInfo` of a statement names its run
//! with an id (in its ticket), and `CancelFlightInfo` of that `FlightInfo` cancels it,
//! whether it is streaming already or not yet started. Only the principal that got the
//! `FlightInfo` may cancel it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow_flight::CancelStatus;
use hotgate_policy::Principal;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::error::{GatewayError, Result};

#[derive(Debug)]
struct Run {
    owner: String,
    token: CancellationToken,
    created: Instant,
}

/// The runs of the server that may still be cancelled.
#[derive(Debug)]
pub(super) struct RunningStatements {
    runs: Mutex<HashMap<String, Run>>,
    /// How long an id stays cancellable: the statement time limit, and some slack for
    /// the client to start its `DoGet`.
    lifetime: Duration,
}

impl RunningStatements {
    pub(super) fn new(statement_timeout: Duration) -> Self {
        Self {
            runs: Mutex::new(HashMap::new()),
            lifetime: statement_timeout.saturating_add(Duration::from_secs(600)),
        }
    }

    /// The cancellation token of run `id` of `principal`, created on first use.
    pub(super) fn token(&self, principal: &Principal, id: &str) -> CancellationToken {
        let mut runs = self.runs.lock();
        let lifetime = self.lifetime;
        runs.retain(|_, r| r.created.elapsed() < lifetime);
        let run = runs.entry(id.to_owned()).or_insert_with(|| Run {
            owner: principal.name.clone(),
            token: CancellationToken::new(),
            created: Instant::now(),
        });
        if run.owner == principal.name {
            run.token.clone()
        } else {
            // Another principal's run id: this caller's run is not affected by it.
            CancellationToken::new()
        }
    }

    /// A run that ended: nothing left to cancel.
    pub(super) fn finished(&self, id: &str) {
        self.runs.lock().remove(id);
    }

    /// Cancels runs `ids` of `principal` (the runs a `CancelFlightInfo`'s tickets name).
    pub(super) fn cancel(&self, principal: &Principal, ids: &[String]) -> Result<CancelStatus> {
        let runs = self.runs.lock();
        let mut status = CancelStatus::NotCancellable;
        for id in ids {
            match runs.get(id) {
                Some(run) if run.owner == principal.name => {
                    run.token.cancel();
                    status = CancelStatus::Cancelled;
                }
                Some(_) => {
                    return Err(GatewayError::PermissionDenied(
                        "CancelFlightInfo: the statement belongs to another principal".into(),
                    ));
                }
                None => {}
            }
        }
        Ok(status)
    }
}
