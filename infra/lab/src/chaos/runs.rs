//! GetUsers runs as EventBridge and `mailctl run` make them: asynchronous, retried twice;
//! and the release of a local-time campaign's send slots, one after another.

use super::faults::ChaosMailer;
use anyhow::Result;
use mailflow::ports::Mailer;
use mailflow_local::pipeline::LocalPipeline;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// One GetUsers run, invoked asynchronously as EventBridge and `mailctl run` do: a failed
/// attempt is retried twice.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutcome {
    pub name: String,
    pub attempts: usize,
    /// Whether the first attempt was killed part-way.
    pub killed: bool,
    pub completed: bool,
    pub users_enqueued: u64,
    pub errors: Vec<String>,
}

const ATTEMPTS: usize = 3;

pub(super) async fn invoke_async<M: Mailer + Clone + 'static>(
    pipeline: Arc<LocalPipeline<M>>,
    name: &str,
    event: Value,
    kill_first_after: Option<Duration>,
) -> RunOutcome {
    let mut outcome = RunOutcome {
        name: name.into(),
        ..Default::default()
    };
    for attempt in 0..ATTEMPTS {
        outcome.attempts += 1;
        let call = pipeline.start(event.clone());
        let result = match kill_first_after.filter(|_| attempt == 0) {
            Some(after) => match tokio::time::timeout(after, call).await {
                Ok(result) => result,
                Err(_) => {
                    outcome.killed = true;
                    Err(anyhow::anyhow!("killed {after:?} into the invocation"))
                }
            },
            None => call.await,
        };
        match result {
            Ok(summary) => {
                outcome.completed = true;
                outcome.users_enqueued = summary["usersEnqueued"].as_u64().unwrap_or(0);
                return outcome;
            }
            Err(err) => {
                outcome.errors.push(format!("{err:#}"));
                tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
            }
        }
    }
    outcome
}

/// Releases every send slot, one every `every` (the simulator's clock moves to each in
/// turn, and to the retries of a release that failed), until none is left; a call that
/// fails (the AWS outage) is tried again. Answers the slots released.
pub(super) async fn release_slots(
    pipeline: &LocalPipeline<ChaosMailer>,
    every: Duration,
) -> Result<usize> {
    let mut failures = 0;
    // Slots' releases, not their sweeps (which, a quarter of an hour after each, find
    // nobody here and are not waited between).
    let released = || {
        let fired = pipeline.releases_fired();
        let sweep = fired
            .last()
            .is_some_and(|f| f.schedule.starts_with("sweep-"));
        let releases = fired.iter().filter(|f| f.schedule.starts_with("release-"));
        (releases.count(), sweep)
    };
    loop {
        match pipeline.release_next().await {
            Ok(Some(_)) => {
                if released().1 {
                    continue;
                }
            }
            Ok(None) => return Ok(released().0),
            Err(err) if failures < 60 => {
                failures += 1;
                tracing::warn!(reason = %format!("{err:#}"), "chaos: releasing a slot failed; trying again");
            }
            Err(err) => return Err(err.context("releasing the send slots")),
        }
        tokio::time::sleep(every).await;
    }
}
