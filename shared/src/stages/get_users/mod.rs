//! GetUsers: streams the campaign's audience out of MongoDB onto the users queue.
//!
//! Started by the weekly EventBridge schedule, by hand with `{"campaignId": "..."}`, or by a
//! checkpoint message on the continuation queue: when the audience does not fit in one
//! invocation it stops before the deadline, waits for every in-flight batch, and enqueues a
//! checkpoint (the last user id enqueued) that starts the next invocation where it left off.
//! The rooms: requests (`request`), the first start (`start`), the audience loop
//! (`fan_out`) with its send buffers (`outbox`) and read-ahead (`read_ahead`), a segment's
//! end (`finish`), local time's holds and slot releases (`hold`, `release`), the experiment
//! (`experiment`) and the invocation's metrics (`metrics`).

mod definition;
mod experiment;
mod fan_out;
mod finish;
mod hold;
mod metrics;
mod outbox;
mod read_ahead;
mod release;
mod request;
mod start;

use super::CampaignStateCache;
use crate::config::GetUsersConfig;
use crate::domain::campaign::CampaignError;
use crate::domain::digest::OddFollows;
use crate::domain::local_time::{self, LocalTimeError};
use crate::domain::messages::parse_body;
use crate::domain::topics::{ExclusionCounts, TopicError};
use crate::domain::user_id::UserId;
use crate::ports::{
    CampaignStates, Clock, ConsumedQueue, DefinitionLoader, ExperimentResults, OutgoingQueue,
    QueueError, SendReport, StoreError, SystemClock, UserDirectory, WaitingRoom,
};
use crate::runtime::batch::batch_response;
use crate::runtime::Invocation;
use futures::future::BoxFuture;
pub(crate) use hold::schedule_slot;
pub use metrics::METRIC_NAMES;
pub use release::{Release, ReleaseEvent, ReleaseSummary, RELEASE_LANES};
use request::Continuation;
pub use request::{parse_request, Checkpoint, ContinuationRecord, Request, Run};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum GetUsersError {
    #[error("unrecognised event: {0}. Expected an EventBridge \"Scheduled Event\", {{\"campaignId\": \"weekly-2026-W47\"}} (optionally with since, until, topic, includeFailed, includeCancelled, and localTime with sendDate, fallbackZone, passedTime), a send slot's release, or an SQS batch of checkpoints")]
    BadRequest(String),
    #[error("local-time delivery: {0}")]
    LocalTime(#[from] LocalTimeError),
    #[error(transparent)]
    Guardrail(#[from] crate::domain::guardrails::GuardrailError),
    #[error(transparent)]
    Experiment(#[from] crate::domain::experiment::ExperimentError),
    #[error("{0}")]
    Waiting(String),
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The driver's error, as text: no driver type in the stage's signature.
    #[error("reading the audience from MongoDB failed: {0}")]
    Mongo(String),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("the campaigns table (reading or recording the campaign) failed: {0}")]
    Campaigns(String),
    #[error(transparent)]
    Definition(#[from] crate::domain::definition::pin::PinError),
    /// A pushed definition that cannot run: unknown, no such version, refused by this
    /// build.
    #[error("{0}")]
    DefinitionRefused(String),
    /// MongoDB refused a query of the definition: the run fails once, with the reason.
    #[error("the campaign's definition failed: {0}")]
    DefinitionQuery(String),
}

impl GetUsersError {
    /// The same event would fail the same way again (the others are the stores' faults).
    pub fn repeats(&self) -> bool {
        matches!(
            self,
            Self::BadRequest(_)
                | Self::LocalTime(_)
                | Self::Guardrail(_)
                | Self::Experiment(_)
                | Self::Campaign(_)
                | Self::Topic(_)
                | Self::Definition(_)
                | Self::DefinitionRefused(_)
                | Self::DefinitionQuery(_)
        )
    }
}

/// The log line each GetUsers invocation ends with (its `users_enqueued` is what the
/// benchmark counts).
pub const FINISHED_LOG_MESSAGE: &str = "GetUsers finished";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub campaign_id: String,
    pub segment: u32,
    pub users_enqueued: usize,
    /// Users of the audience whose id cannot travel in a queue message (a string `_id` with a
    /// control character, or longer than `MAX_USER_ID_BYTES`): refused here, each logged with
    /// the id's length, never enqueued (CreateEmails would refuse every retry of them).
    pub users_refused: usize,
    /// Users with new followers left out by the campaign topic's audience rule, by reason.
    pub excluded: ExclusionCounts,
    /// Follows in the window whose followeeId is not a usable id (not a string or an
    /// ObjectId, empty, an array): no user is found through them (each logged, up to 20, with
    /// its document id). First segment only.
    pub follows_skipped: u64,
    /// Follows in the window whose followerId is not a usable id (a number, null, missing,
    /// empty, an array): counted for nobody. First segment only.
    pub followers_skipped: u64,
    pub entries_retried: usize,
    pub duration_ms: u128,
    /// False when this invocation stopped early and left a checkpoint to continue from.
    pub complete: bool,
    /// The campaign is cancelled (`mailctl cancel`): this run enqueued no more and left no
    /// checkpoint.
    pub cancelled: bool,
    /// The campaign is paused: this run stopped its fan-out and parked its checkpoint on the
    /// continuation queue, whose consumer the pause disabled; the resume picks it up.
    pub paused: bool,
    pub continued_after: Option<String>,
    /// A local-time campaign: what this segment decided (zones, passed times, slots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_time: Option<local_time::LocalTimeCounts>,
    /// The run's last segment: users it held (for their local time, quiet hours or an
    /// experiment's decision) that would go after the campaign's deadline at the stack's
    /// rate, each slot sent from its instant (logged as a warning: they will be expired).
    #[serde(skip_serializing_if = "is_zero")]
    pub users_past_deadline: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Generic over the user directory (MongoDB on Lambda), its queues (SQS) and the campaigns
/// table (DynamoDB).
pub struct GetUsers<D, Q, S, W> {
    directory: D,
    users: Q,
    continuation: Q,
    campaigns: CampaignStateCache<S>,
    waiting: W,
    /// Read when an experiment is decided (the sends table).
    results: Arc<dyn ExperimentResults>,
    clock: Arc<dyn Clock>,
    /// The pushed definitions (the campaigns table), for campaigns that run one.
    definitions: Arc<dyn DefinitionLoader>,
    /// A slot's shards released at once (`release::RELEASE_LANES`).
    release_lanes: usize,
    config: GetUsersConfig,
}

/// When a failed continuation record comes back, by how often SQS has delivered it: 30 s,
/// then 2, 8 and 30 minutes. A fault of the moment is retried soon, and an outage has about
/// 40 minutes before the queue's fifth receive (its maxReceiveCount) sends the record to the
/// DLQ.
pub fn continuation_backoff(receives: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(30);
    const LONGEST: Duration = Duration::from_secs(30 * 60);
    let factor = 4u32.saturating_pow(receives.saturating_sub(1));
    FIRST.saturating_mul(factor).min(LONGEST)
}

/// The schedule target when the invocation has no ARN (the local simulator, which fires
/// the group's schedules itself).
pub const LOCAL_FUNCTION_ARN: &str = "arn:aws:lambda:local:000000000000:function:GetUsersFunction";

/// GetUsers' queues: it puts users and checkpoints on them, and consumes the continuation
/// queue.
pub trait Queue: OutgoingQueue + ConsumedQueue {}
impl<T: OutgoingQueue + ConsumedQueue> Queue for T {}

impl<D: UserDirectory, Q: Queue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// `users`, `continuation`, `campaigns` and `waiting` are the queues, the table and the
    /// waiting room `config` names; `results` the sends table's records by campaign.
    pub fn new(
        directory: D,
        users: Q,
        continuation: Q,
        campaigns: S,
        waiting: W,
        results: Arc<dyn ExperimentResults>,
        config: GetUsersConfig,
    ) -> Self {
        Self {
            directory,
            users,
            continuation,
            campaigns: CampaignStateCache::new(campaigns),
            waiting,
            results,
            clock: Arc::new(SystemClock),
            definitions: Arc::new(crate::ports::definitions::NoDefinitionStore),
            release_lanes: release::RELEASE_LANES,
            config,
        }
    }

    /// At most `lanes` shards of a slot released at once (the lab's one-at-a-time release
    /// of before is 1).
    pub fn with_release_lanes(mut self, lanes: usize) -> Self {
        self.release_lanes = lanes.max(1);
        self
    }

    /// Where pushed definitions are read (a stack without one runs only the digest).
    pub fn with_definitions(mut self, definitions: Arc<dyn DefinitionLoader>) -> Self {
        self.definitions = definitions;
        self
    }

    /// The clock local-time decisions read (the simulator gives one it controls).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Cold-start check: the index the audience query relies on exists.
    pub async fn prepare(&self) -> Result<(), StoreError> {
        self.directory.check_indexes().await
    }

    /// The Lambda entry point: a run summary, or a partial batch response for checkpoints.
    pub async fn handle(
        &self,
        event: Value,
        invocation: &Invocation,
    ) -> Result<Response, GetUsersError> {
        let event = self.complete_definition_start(event).await?;
        match parse_request(event, &self.config.local_time, self.clock.now_ms())? {
            Request::Run(run) => Ok(Response::Run(self.run(run, invocation).await?)),
            Request::Release(release) => {
                Ok(Response::Release(self.release(release, invocation).await?))
            }
            Request::Continuations(records) => {
                let mut failed = Vec::new();
                let mut done = Vec::new();
                for record in records {
                    let id = record.message_id.clone();
                    let result = match parse_body::<Continuation>(record.body.as_deref()) {
                        Ok(Continuation::Checkpoint(cp)) => {
                            match self.run(cp.into(), invocation).await {
                                Ok(run) => Ok(Some(Response::Run(run))),
                                // The same checkpoint would fail the same way again (a query
                                // the definition got wrong, late in the audience): the run
                                // ends here, said once, rather than retried into the DLQ.
                                Err(err) if err.repeats() => {
                                    tracing::error!(message_id = %id, reason = %err, "a run's segment would fail the same way again: the run ends here; fix the cause and re-run the campaign");
                                    Ok(None)
                                }
                                Err(err) => Err(err.to_string()),
                            }
                        }
                        Ok(Continuation::Release(r)) => self
                            .release(r.release_waiting, invocation)
                            .await
                            .map(|release| Some(Response::Release(release)))
                            .map_err(|e| e.to_string()),
                        Ok(Continuation::FailedInvocation(failed)) => {
                            self.retry_failed(&id, failed.request_payload, invocation)
                                .await
                        }
                        Err(reason) => Err(reason.to_string()),
                    };
                    match result {
                        Ok(response) => done.extend(response),
                        Err(reason) => {
                            let backoff = continuation_backoff(record.receives);
                            tracing::error!(message_id = %id, %reason, receives = record.receives, backoff_s = backoff.as_secs(), "checkpoint failed; it will be retried");
                            self.come_back_after(&record, backoff).await;
                            failed.push(id);
                        }
                    }
                }
                Ok(Response::Checkpoints(Checkpoints {
                    response: batch_response(failed),
                    done,
                }))
            }
        }
    }

    /// Sets a failed continuation record to come back after `backoff`, not after the queue's
    /// visibility timeout (90 minutes: six times GetUsers' timeout, as Lambda asks).
    async fn come_back_after(&self, record: &ContinuationRecord, backoff: Duration) {
        let Some(receipt) = record.receipt_handle.as_deref() else {
            return;
        };
        if let Err(err) = self.continuation.change_visibility(receipt, backoff).await {
            // Not fatal: the record still comes back, after the visibility timeout.
            tracing::warn!(message_id = %record.message_id, reason = %err, "could not set the checkpoint's retry delay");
        }
    }

    /// Tries again a run or release whose asynchronous invocation Lambda gave up on. One
    /// that fails for its own sake (not an event GetUsers accepts, a campaign it may not
    /// start) would fail the same way on every try: refused here with its reason, not
    /// retried into the DLQ.
    async fn retry_failed(
        &self,
        message_id: &str,
        event: Value,
        invocation: &Invocation,
    ) -> Result<Option<Response>, String> {
        let event = self.complete_definition_start(event).await;
        let request =
            event.and_then(|e| parse_request(e, &self.config.local_time, self.clock.now_ms()));
        let outcome = match request {
            Ok(Request::Run(run)) => self.run(run, invocation).await.map(Response::Run),
            Ok(Request::Release(release)) => self
                .release(release, invocation)
                .await
                .map(Response::Release),
            Ok(Request::Continuations(_)) => Err(GetUsersError::BadRequest(
                "an SQS batch, which Lambda never invokes asynchronously".into(),
            )),
            Err(err) => Err(err),
        };
        match outcome {
            Ok(response) => {
                tracing::info!(%message_id, "a failed asynchronous invocation succeeded from the continuation queue");
                Ok(Some(response))
            }
            Err(err) if err.repeats() => {
                tracing::error!(%message_id, reason = %err, "a failed asynchronous invocation would fail the same way again: dropped");
                Ok(None)
            }
            Err(err) => Err(err.to_string()),
        }
    }

    /// Enqueues the audience after `run.after` until it ends or the deadline nears: the first
    /// segment starts the campaign (`start.rs`), every segment fans its audience out
    /// (`fan_out.rs`) and ends with its counts, checkpoint and summary (`finish.rs`).
    pub async fn run(
        &self,
        mut run: Run,
        invocation: &Invocation,
    ) -> Result<Summary, GetUsersError> {
        let started = Instant::now();
        let after = match run.after.as_deref().map(UserId::parse).transpose() {
            Ok(after) => after,
            Err(reason) => return Err(GetUsersError::BadRequest(format!("checkpoint: {reason}"))),
        };
        // Follows no user can be found through are reported once per run, by its first segment.
        let odd_follows = match run.segment {
            0 => self.first_start(&mut run).await?,
            _ => OddFollows::default(),
        };
        let definition = self.definition_campaign(&run).await?;
        let segment = self.fan_out(&run, &definition, after, invocation).await?;
        self.finish(&run, segment, odd_follows, started).await
    }
}

impl From<StoreError> for GetUsersError {
    fn from(err: StoreError) -> Self {
        Self::Mongo(err.0)
    }
}

/// What an invocation answers: a run's summary, or the partial batch response for a batch
/// of checkpoints (the Lambda runtime serialises either as it is).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Response {
    Run(Summary),
    Release(ReleaseSummary),
    Checkpoints(Checkpoints),
}

/// A batch of checkpoints: the partial batch response Lambda reads, and what the runs and
/// releases in it did (for the invocation's metrics, not part of the answer).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Checkpoints {
    #[serde(flatten)]
    pub response: aws_lambda_events::event::sqs::SqsBatchResponse,
    #[serde(skip)]
    pub done: Vec<Response>,
}

/// A batch on its way: enqueued (a `SendReport`) or held in the waiting room (nothing sent).
pub(super) type Pending<'a> = BoxFuture<'a, Result<SendReport, GetUsersError>>;

// The event: the schedule's, a manual run, or a batch of checkpoints from the continuation
// queue. A run's summary travels in its `Response`; its counts are the invocation's metrics.
crate::runtime::serve::stage! {
    impl<D: UserDirectory, Q: Queue, S: CampaignStates, W: WaitingRoom> for GetUsers<D, Q, S, W> {
        Value => Result<(Response, Vec<crate::runtime::emf::Metric>), GetUsersError>,
        |stage, event, invocation| {
            let response = stage.handle(event, invocation).await?;
            let metrics = response.metrics();
            Ok((response, metrics))
        }
    }
}

#[cfg(test)]
mod tests;
