//! Release schedules on the simulator's clock: the drain that fires them while the queues
//! run (and jumps the clock to the next one when all is quiet), GetUsers invoked as
//! Scheduler invokes it (asynchronously, Lambda's retries and on-failure destination
//! included), and what fired when.

use super::{get_users_arn, lock, timeout, LocalPipeline, PipelineOptions, GET_USERS};
use crate::async_invoke::{AsyncInvoker, Invoke};
use crate::runner::{self, ConsumerStats, Quiet};
use crate::scheduler::SimClock;
use crate::stack::Stack;
use anyhow::{Context, Result};
use mailflow::assemble::LambdaGetUsers;
use mailflow::ports::{Clock, Mailer};
use mailflow::runtime::Invocation;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl<M: Mailer + Clone + 'static> LocalPipeline<M> {
    /// Runs every consumer until the queues drain and nothing is left to release. Release
    /// schedules fire at their instant on the simulator's clock, whatever the queues are
    /// doing, as asynchronous invocations of GetUsers (Lambda's retries and on-failure
    /// destination included); when everything is quiet the clock jumps to the next schedule
    /// or retry.
    pub async fn drain(&self, max_wait: Duration) -> Result<BTreeMap<String, ConsumerStats>> {
        let sqs = aws_sdk_sqs::Client::new(&self.stack.sdk);
        let drained = runner::run_until_drained_then(
            &sqs,
            self.consumers()?,
            max_wait,
            || self.get_users_async.busy(),
            || Box::pin(self.skip_to_next()),
        );
        let ticker = async {
            loop {
                if let Err(err) = self.fire_due().await {
                    tracing::warn!(reason = %format!("{err:#}"), "the local scheduler could not read its schedules; trying again");
                }
                tokio::time::sleep(SCHEDULER_TICK).await;
            }
        };
        let stats = tokio::select! {
            drained = drained => drained,
            never = ticker => never,
        }?;
        crate::iam::ensure_no_denials(&self.stack).await?;
        Ok(stats)
    }

    /// The queues are quiet: an asynchronous invocation still running or due keeps the run
    /// going; else the clock moves to the next schedule or retry and fires it; else the run
    /// is over.
    async fn skip_to_next(&self) -> Result<Quiet> {
        if self.get_users_async.busy() {
            return Ok(Quiet::Waiting);
        }
        let Some(next) = self.next_instant().await? else {
            // A schedule fired while the instant was looked up.
            return Ok(if self.get_users_async.busy() {
                Quiet::Waiting
            } else {
                Quiet::Done
            });
        };
        self.clock.advance_to(next);
        self.fire_due().await?;
        Ok(Quiet::Advanced)
    }

    /// Runs every consumer until the queues drain, firing no schedule.
    pub async fn drain_queues(
        &self,
        max_wait: Duration,
    ) -> Result<BTreeMap<String, ConsumerStats>> {
        let sqs = aws_sdk_sqs::Client::new(&self.stack.sdk);
        let stats = runner::run_until_drained(&sqs, self.consumers()?, max_wait).await?;
        crate::iam::ensure_no_denials(&self.stack).await?;
        Ok(stats)
    }

    /// The next instant something is due: a release schedule or a retry of an asynchronous
    /// invocation (`None` when neither is left).
    async fn next_instant(&self) -> Result<Option<i64>> {
        let schedule = match &self.scheduler {
            Some(scheduler) => {
                let schedules = scheduler.schedules().await?;
                let fired = lock(&self.fired);
                schedules
                    .into_iter()
                    .find(|d| !fired.contains(&d.name))
                    .map(|d| d.at_ms)
            }
            None => None,
        };
        let retry = self.get_users_async.next_retry_ms();
        Ok(schedule.into_iter().chain(retry).min())
    }

    /// Fires every release schedule whose instant has come on the simulator's clock (an
    /// asynchronous invocation of GetUsers, then the schedule is deleted) and starts the
    /// retries that are due.
    pub async fn fire_due(&self) -> Result<()> {
        let _one_look = self.firing.lock().await;
        self.get_users_async.run_due();
        let Some(scheduler) = &self.scheduler else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let mut failed = None;
        for due in scheduler.schedules().await? {
            if due.at_ms > now {
                break;
            }
            let first = lock(&self.fired).insert(due.name.clone());
            // Scheduler invokes the target as the schedule's role; one its policy does not
            // allow is retried and then dead-lettered on AWS, never run (recorded, and the
            // run fails on it).
            if first && !self.may_invoke(&due).await? {
                tracing::error!(schedule = %due.name, target = %due.target_arn, "the schedule's role may not invoke its target");
            } else if first {
                lock(&self.releases_fired).push(ReleaseFired {
                    schedule: due.name.clone(),
                    at_ms: due.at_ms,
                    fired_at_ms: now,
                    get_users_running: self.get_users_async.running(),
                });
                self.get_users_async.submit(due.input.clone());
            }
            // ActionAfterCompletion: DELETE, once the target has the event (a schedule fired
            // before whose delete did not go through is deleted now); one that fails does
            // not hold up the next.
            // Once deleted it is forgotten: GetUsers may make a schedule of the same name again
            // (a second run holding users for a slot already released), which fires again.
            match scheduler.delete(&due.name).await {
                Ok(()) => {
                    lock(&self.fired).remove(&due.name);
                }
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Whether the schedule's role may invoke its target (`lambda:InvokeFunction`).
    async fn may_invoke(&self, due: &crate::scheduler::Due) -> Result<bool> {
        let role = self
            .stack
            .template
            .roles
            .iter()
            .find(|id| self.stack.names.get(*id) == Some(&due.role_arn))
            .with_context(|| {
                format!(
                    "schedule {} runs as {}, no role of this stack",
                    due.name, due.role_arn
                )
            })?;
        crate::iam::authorize(&self.stack, role, "lambda:InvokeFunction", &due.target_arn).await
    }

    /// Moves the clock to the next release schedule or retry (if it is ahead), fires what
    /// is due then and waits for those invocations to end; the instant it moved to, or
    /// `None` when nothing is left.
    pub async fn release_next(&self) -> Result<Option<i64>> {
        let Some(next) = self.next_instant().await? else {
            return Ok(None);
        };
        self.clock.advance_to(next);
        self.fire_due().await?;
        // What was started ends; a retry one of them schedules waits for the next call.
        while self.get_users_async.running() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Some(next))
    }

    /// Invokes GetUsers asynchronously with `event`, as the weekly schedule does: accepted at
    /// once; `drain` waits for it, its retries included.
    pub fn invoke_async(&self, event: Value) {
        self.get_users_async.submit(event);
    }

    /// What became of GetUsers' asynchronous invocations (the release schedules').
    pub fn async_stats(&self) -> crate::async_invoke::AsyncStats {
        self.get_users_async.stats()
    }

    /// GetUsers' asynchronous invocations, for a test to watch while the pipeline runs (a
    /// fault that lasts until Lambda has given up on one, `FaultSwitch::set_while`).
    pub fn get_users_async(&self) -> std::sync::Arc<crate::async_invoke::AsyncInvoker> {
        self.get_users_async.clone()
    }

    /// Every release schedule fired so far: its instant and the clock when it fired.
    pub fn releases_fired(&self) -> Vec<ReleaseFired> {
        lock(&self.releases_fired).clone()
    }
}

/// GetUsers as the release schedules invoke it: asynchronously, with its timeout, Lambda's
/// retries and its on-failure destination (a queue of `stack`), retries due on `clock`.
pub(super) fn get_users_async(
    stack: &Stack,
    options: &PipelineOptions,
    get_users: Arc<LambdaGetUsers>,
    clock: Arc<SimClock>,
) -> Result<Arc<AsyncInvoker>> {
    let function = stack.template.function(GET_USERS)?;
    let destination = match &function.async_invoke.on_failure_queue {
        Some(queue) => Some((
            aws_sdk_sqs::Client::new(&stack.sdk),
            stack.queue_url(queue)?.to_owned(),
        )),
        None => None,
    };
    let timeout = timeout(stack, options, GET_USERS)?;
    Ok(AsyncInvoker::new(
        GET_USERS,
        get_users_invoke(get_users, timeout, get_users_arn(stack)),
        function.async_invoke.clone(),
        destination,
        clock,
    ))
}

/// How often the local scheduler looks for due schedules (simulator time runs at real pace
/// in between).
const SCHEDULER_TICK: Duration = Duration::from_millis(250);

/// A release schedule the simulator fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseFired {
    pub schedule: String,
    pub at_ms: i64,
    pub fired_at_ms: i64,
    /// GetUsers invocations still running when it fired (a run still holding users, say).
    pub get_users_running: usize,
}

/// GetUsers as Lambda runs an asynchronous invocation of it: with its timeout; an error or a
/// timeout is a failed attempt.
fn get_users_invoke(get_users: Arc<LambdaGetUsers>, timeout: Duration, arn: String) -> Invoke {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    Arc::new(move |event| {
        let get_users = get_users.clone();
        let arn = arn.clone();
        Box::pin(async move {
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut invocation = Invocation::with_timeout(format!("get-users-async-{n}"), timeout);
            invocation.function_arn = Some(arn);
            match tokio::time::timeout(timeout, get_users.handle(event, &invocation)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!(
                    "Task timed out after {} seconds",
                    timeout.as_secs()
                )),
            }
        })
    })
}
