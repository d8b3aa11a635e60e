//! Over 450 lines because a run reads as one loop (audience -> decide now / delay / hold ->
//! write) with its segment's checkpoint; requests are in `request.rs`, local time in
//! `release.rs`, the audience's read-ahead in `read_ahead.rs`.
//!
//! GetUsers: streams the campaign's audience out of MongoDB onto the users queue.
//!
//! Started by the weekly EventBridge schedule, by hand with `{"campaignId": "..."}`, or by a
//! checkpoint message on the continuation queue: when the audience does not fit in one
//! invocation it stops before the deadline, waits for every in-flight batch, and enqueues a
//! checkpoint (the last user id enqueued) that starts the next invocation where it left off.

mod experiment;
mod metrics;
mod read_ahead;
mod release;
mod request;

use super::CampaignStateCache;
use crate::config::GetUsersConfig;
use crate::domain::campaign::{Campaign, CampaignError, CampaignId, Hold, Window};
use crate::domain::digest::OddFollows;
use crate::domain::experiment::{Experiment, ExperimentError};
use crate::domain::ledger::epoch_ms;
use crate::domain::local_time::{self, LocalTimeError};
use crate::domain::messages::{parse_body, UserMessage};
use crate::domain::send_rate::sends_at_rate;
use crate::domain::topics::{ExclusionCounts, TopicError, Topics};
use crate::domain::user_id::{check_travels, UserId};
use crate::ports::MAX_BATCH_ENTRIES;
use crate::ports::{
    AudienceScan, CampaignStates, Clock, ConsumedQueue, ExperimentResults, OutgoingQueue,
    QueueError, SendReport, StoreError, SystemClock, UserDirectory, WaitingRoom,
};
use crate::runtime::batch::batch_response;
use crate::runtime::Invocation;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
pub use metrics::METRIC_NAMES;
pub(crate) use release::{schedule_slot, DELAY_WITHIN_MS};
pub use release::{Release, ReleaseEvent, ReleaseSummary};
use release::{When, HOLD_BATCH, PAUSED_LOOK_AGAIN_SECONDS};
use request::Continuation;
pub use request::{parse_request, Checkpoint, ContinuationRecord, Request, Run};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use time::OffsetDateTime;

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
    #[error("recording the campaign in the campaigns table failed: {0}")]
    Campaigns(String),
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

/// A partial batch of users delayed to an instant this near is sent without waiting for
/// the batch to fill.
const DELAYED_FLUSH_LEAD_MS: i64 = 5_000;

/// Batches enqueued between two looks at the campaign's state (a pause or a cancellation
/// stops the fan-out within about this many batches).
const STATE_CHECK_EVERY: usize = 50;

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
            config,
        }
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
                        Ok(Continuation::Checkpoint(cp)) => self
                            .run(cp.into(), invocation)
                            .await
                            .map(|run| Some(Response::Run(run)))
                            .map_err(|e| e.to_string()),
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
        let outcome = match parse_request(event, &self.config.local_time, self.clock.now_ms()) {
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

    /// Enqueues the audience after `run.after` until it ends or the deadline nears.
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
        let odd_follows = if run.segment == 0 {
            run.campaign
                .may_start(OffsetDateTime::now_utc(), self.config.max_window)?;
            if run.experiment.is_some() && !self.config.track_opens_and_clicks {
                return Err(ExperimentError::NoConsent(run.campaign.id.clone()).into());
            }
            // Known to `mailctl` and the reputation guard from now on.
            let now_ms = epoch_ms(SystemTime::now());
            let states = self.campaigns.states();
            let mut defaults = self.config.guardrails;
            if defaults != Default::default() {
                // A campaign started before guardrails were recorded takes none of today's
                // defaults: its resend owes everyone not yet sent an email.
                let state = states
                    .state(run.campaign.id.as_str())
                    .await
                    .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
                if state.started_without_guardrails {
                    defaults = Default::default();
                }
            }
            let initial = run.guardrails.initial(defaults, now_ms as i64);
            // The wait starts when the whole test group has had its email: with local time,
            // once the last zone's local time has come; after quiet hours that defer it.
            let clock_now = self.clock.now_ms();
            let quiet_ms = (self.config.quiet_hours)
                .filter(|q| q.policy == crate::domain::guardrails::QuietPolicy::Defer)
                .map_or(0, |q| q.length_ms());
            let test_sent_by = Experiment::test_group_let_go_by(
                run.delivery.as_ref().and_then(|d| d.latest_slot()),
                quiet_ms,
                clock_now,
            );
            let experiment = (run.experiment.as_deref()).map(|e| {
                Experiment {
                    local_time: run.delivery.is_some(),
                    ..e.clone()
                }
                .starting_at(test_sent_by)
            });
            // Refused before anything is written: a corrected start begins afresh.
            if let Some(e) = &experiment {
                e.check_deadline(&run.campaign.id, initial.deadline_ms, quiet_ms)?;
            }
            let recorded = states
                .register(&run.campaign, &initial, experiment.as_ref(), now_ms)
                .await
                .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
            // An experiment is fixed when the campaign first starts.
            if let Some(given) = &run.experiment {
                match &recorded.experiment {
                    Some(recorded) => recorded.settle(given, &run.campaign.id)?,
                    None => return Err(ExperimentError::Late(run.campaign.id.clone()).into()),
                }
            }
            // Its window and topic are fixed when it first starts: nothing is enqueued
            // under others.
            run.campaign.settle(&recorded, run.topic_named)?;
            // So are its holdout and cap exemption; a deadline given moves it (recorded),
            // and once it has passed nothing more of the campaign starts.
            let guardrails = recorded.guardrails.unwrap_or(initial);
            let moved = run
                .guardrails
                .settle(&run.campaign.id, guardrails, now_ms as i64)?;
            // The rest of an experiment is sent after its decision: a deadline before it would
            // expire them all.
            if let Some(e) = &recorded.experiment {
                let deadline = moved.unwrap_or(guardrails).deadline_ms;
                e.check_deadline(&run.campaign.id, deadline, quiet_ms)?;
            }
            if let Some(moved) = moved {
                states
                    .move_deadline(&run.campaign.id, &moved, guardrails.deadline_ms, now_ms)
                    .await
                    .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
                tracing::warn!(campaign = %run.campaign.id, from = ?guardrails.deadline_ms, to = ?moved.deadline_ms, "the campaign's deadline is moved by this start");
            }
            let campaign = &run.campaign;
            if let Some(delivery) = &mut run.delivery {
                // The window as settled (a campaign already started keeps its own).
                delivery.window_until_ms = Some(campaign.window.until.unix_timestamp() * 1000);
                self.waiting
                    .record_delivery(&campaign.id, delivery)
                    .await
                    .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            }
            self.report_odd_follows(&campaign.window).await?
        } else {
            OddFollows::default()
        };
        let campaign = &run.campaign;
        let mut experiment = self.experiment_run(&campaign.id).await?;
        // A topic a deploy removed while a run was under way: nothing is sent under it.
        let topic = Topics::builtin().get(campaign.topic.as_str())?;
        let mut audience =
            read_ahead::ReadAhead::new(self.directory.audience(&campaign.window, topic, after));
        let send = |bodies: Vec<String>| -> Pending<'_> {
            Box::pin(async move { Ok(self.users.send_batch(&bodies).await?) })
        };
        let mut in_flight: FuturesUnordered<Pending<'_>> = FuturesUnordered::new();
        // Local-time delivery: who waits for which slot, and who goes with a short delay.
        let mut counts = local_time::LocalTimeCounts::default();
        let mut holding: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
        let mut delayed: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let mut chunk: Vec<String> = Vec::with_capacity(MAX_BATCH_ENTRIES);
        let mut last = run.after.clone();
        let mut report = SendReport::default();
        let mut complete = true;
        let mut hold = self.hold(campaign).await;
        let mut batches = 0usize;
        let mut checked = 0usize;
        let mut refused = 0usize;
        while hold.is_none() {
            // At least one user per invocation, so a slow start can never checkpoint the
            // same place forever.
            let progressed = last != run.after;
            if progressed && invocation.remaining() <= self.config.deadline_margin {
                complete = false;
                break;
            }
            // The decision's instant came during this segment: decided now, so that the rest
            // goes with the winner from here on.
            let now_ms = self.clock.now_ms();
            if experiment
                .as_ref()
                .is_some_and(|e| e.awaits_decision(now_ms))
            {
                experiment = self.experiment_run(&campaign.id).await?;
                if experiment
                    .as_ref()
                    .is_some_and(|e| e.awaits_decision(now_ms))
                {
                    // Paused or cancelled meanwhile (no decision then): the segment stops
                    // here, its checkpoint parked for the resume, which decides first.
                    hold = self.hold(campaign).await;
                    complete = false;
                    break;
                }
            }
            // The batches in flight are driven while the next member is awaited: a future
            // is only driven when polled, and a SendMessageBatch not yet started when the
            // read-ahead runs dry would wait for it (with MongoDB and SQS 10-20 ms away,
            // 13,800 users/s instead of 16,300 before the read-ahead: `mailctl pipeline`).
            let next = audience.next();
            tokio::pin!(next);
            let member = loop {
                tokio::select! {
                    biased;
                    member = &mut next => break member?,
                    done = in_flight.next(), if !in_flight.is_empty() => add(&mut report, done)?,
                }
            };
            let Some(member) = member else {
                break;
            };
            let user_id = member.id.to_string();
            if let Err(reason) = check_travels(&user_id) {
                tracing::warn!(bytes = user_id.len(), %reason, "user refused: their id cannot travel in a queue message");
                refused += 1;
                // Not a checkpoint either (one is parsed as a user id): a continuation
                // starts after the last id that travelled.
                continue;
            }
            last = Some(user_id.clone());
            let (variant, held_until) = match &experiment {
                Some(e) => e.group(&campaign.id, &user_id),
                None => (None, None),
            };
            let (when, zone) =
                self.when(run.delivery.as_ref(), &member.zone, held_until, &mut counts);
            let message = UserMessage {
                campaign_id: campaign.id.clone(),
                user_id: user_id.clone(),
                window: campaign.window,
                topic: campaign.topic.clone(),
                include_failed: run.include_failed,
                include_cancelled: run.include_cancelled,
                due: match when {
                    When::Now(due) => due,
                    When::Delayed(_) | When::Slot(_) | When::Never => None,
                },
                zone,
                variant,
            };
            let body = serde_json::to_string(&message).unwrap_or_default();
            match when {
                When::Now(_) => chunk.push(body),
                When::Never => {}
                When::Delayed(at_ms) => {
                    let bodies = delayed.entry(at_ms).or_default();
                    bodies.push(body);
                    if bodies.len() == MAX_BATCH_ENTRIES {
                        in_flight.push(self.send_delayed(at_ms, std::mem::take(bodies)));
                        batches += 1;
                    }
                }
                When::Slot(at_ms) => {
                    // The slot's schedule exists before its first user is held: a segment
                    // that dies part-way leaves no user without a release.
                    if !holding.contains_key(&at_ms) {
                        self.schedule_slot(&campaign.id, at_ms, invocation).await?;
                    }
                    let users = holding.entry(at_ms).or_default();
                    users.push((user_id, body));
                    if users.len() == HOLD_BATCH {
                        in_flight.push(self.hold_users(campaign, at_ms, std::mem::take(users)));
                        batches += 1;
                    }
                }
            }
            if chunk.len() == MAX_BATCH_ENTRIES {
                in_flight.push(send(std::mem::take(&mut chunk)));
                batches += 1;
            }
            // A partial batch whose instant is near goes now rather than wait for company.
            while let Some(entry) = delayed.first_entry() {
                if *entry.key() - self.clock.now_ms() > DELAYED_FLUSH_LEAD_MS {
                    break;
                }
                let (at_ms, bodies) = entry.remove_entry();
                if !bodies.is_empty() {
                    in_flight.push(self.send_delayed(at_ms, bodies));
                    batches += 1;
                }
            }
            // Every batch on its way (enqueued or held) counts towards the next look.
            if batches >= checked + STATE_CHECK_EVERY {
                checked = batches;
                hold = self.hold(campaign).await;
            }
            while in_flight.len() >= self.config.enqueue_concurrency {
                add(&mut report, in_flight.next().await)?;
            }
        }
        // What was taken is decided: the read-ahead stops reading now, not after the drain.
        let excluded = audience.excluded().clone();
        drop(audience);
        if !chunk.is_empty() {
            in_flight.push(send(std::mem::take(&mut chunk)));
        }
        for (at_ms, bodies) in delayed {
            if !bodies.is_empty() {
                in_flight.push(self.send_delayed(at_ms, bodies));
            }
        }
        for (at_ms, users) in holding {
            if !users.is_empty() {
                in_flight.push(self.hold_users(campaign, at_ms, users));
            }
        }
        while !in_flight.is_empty() {
            add(&mut report, in_flight.next().await)?;
        }
        // Every held user is stored: now the segment's counts (written whole, so a retried
        // segment repeats them harmlessly).
        // A segment that decided nobody (a paused campaign's checkpoint looking again) is not
        // a segment: it records nothing and its checkpoint keeps the number, so that a long
        // pause does not grow the report item by one entry a minute.
        let idle = last == run.after && refused == 0 && run.segment > 0;
        // A campaign without local time holds users for their quiet hours or an
        // experiment's decision: recorded too, so that `status` and `mailctl release` see them.
        let held = run.delivery.is_some() || counts.quiet_deferred + counts.experiment_held > 0;
        let run_started = run
            .delivery
            .as_ref()
            .map_or(run.started_at_ms, |d| d.started_at_ms);
        if held && !idle {
            self.waiting
                .record_segment(&campaign.id, run_started, run.segment, &counts)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        }
        self.campaigns
            .states()
            .record_exclusions(&campaign.id, run.segment, &excluded)
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let cancelled = matches!(hold, Some(Hold::Cancelled(_)));
        let paused = matches!(hold, Some(Hold::Paused(_)));
        complete &= hold.is_none();
        // The whole audience is decided: its held users weighed against the deadline.
        let users_past_deadline = match complete {
            true => self.held_past_deadline(&campaign.id, run_started).await,
            false => 0,
        };
        // Everything up to `last` is on the queue now: only then is it a safe checkpoint.
        if !complete && !cancelled {
            let checkpoint = Checkpoint {
                campaign_id: campaign.id.clone(),
                window: campaign.window,
                topic: campaign.topic.clone(),
                include_failed: run.include_failed,
                include_cancelled: run.include_cancelled,
                after: last.clone(),
                segment: if idle { run.segment } else { run.segment + 1 },
                delivery: run.delivery.clone(),
                started_at_ms: Some(run.started_at_ms),
            };
            let body = serde_json::to_string(&checkpoint).unwrap_or_default();
            // Paused: the pause stopped this queue's consumer; should it still run, the
            // checkpoint looks again in a minute rather than at once.
            let delay = if paused { PAUSED_LOOK_AGAIN_SECONDS } else { 0 };
            self.continuation.send_batch_delayed(&[body], delay).await?;
        }
        let summary = Summary {
            campaign_id: campaign.id.to_string(),
            segment: run.segment,
            users_enqueued: report.sent,
            users_refused: refused,
            excluded,
            follows_skipped: odd_follows.followees,
            followers_skipped: odd_follows.followers,
            entries_retried: report.retried,
            duration_ms: started.elapsed().as_millis(),
            complete,
            cancelled,
            paused,
            continued_after: if complete || cancelled { None } else { last },
            local_time: held.then_some(counts),
            users_past_deadline,
        };
        tracing::info!(
            campaign = %summary.campaign_id,
            segment = summary.segment,
            users_enqueued = summary.users_enqueued,
            users_refused = summary.users_refused,
            excluded = %summary.excluded.describe(),
            follows_skipped = summary.follows_skipped,
            followers_skipped = summary.followers_skipped,
            entries_retried = summary.entries_retried,
            duration_ms = summary.duration_ms as u64,
            complete = summary.complete,
            cancelled = summary.cancelled,
            paused = summary.paused,
            "{FINISHED_LOG_MESSAGE}"
        );
        Ok(summary)
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

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Whether the campaign is paused or cancelled (then nothing more is enqueued).
    async fn hold(&self, campaign: &Campaign) -> Option<Hold> {
        let hold = self.campaigns.hold(campaign.id.as_str()).await;
        match &hold {
            Some(Hold::Cancelled(c)) => {
                tracing::info!(campaign = %campaign.id, cancelled_at_ms = c.at_ms, "campaign cancelled: no further fan-out")
            }
            Some(Hold::Paused(c)) => {
                tracing::info!(campaign = %campaign.id, paused_at_ms = c.at_ms, "campaign paused: fan-out stopped, checkpoint parked until the resume")
            }
            None => {}
        }
        hold
    }

    /// Users the run (started at `run_started_ms`) held that would go after the campaign's
    /// deadline at the stack's rate, each slot from its instant; a warning names them. Only
    /// now is the audience's size known, so the start could not refuse it. 0 when there is
    /// no deadline, nobody held, or the records could not be read (logged: the run itself
    /// is done).
    async fn held_past_deadline(&self, campaign: &CampaignId, run_started_ms: i64) -> u64 {
        let state = match self.campaigns.state(campaign.as_str()).await {
            Ok(state) => state,
            Err(err) => {
                tracing::warn!(%campaign, reason = %err, "the deadline was not weighed against the held users: the campaign's state was not read");
                return 0;
            }
        };
        let Some(deadline_ms) = state.guardrails.deadline_ms else {
            return 0;
        };
        let report = match self.waiting.report(campaign).await {
            Ok(report) => report,
            Err(err) => {
                tracing::warn!(%campaign, reason = %err, "the deadline was not weighed against the held users: the waiting room was not read");
                return 0;
            }
        };
        let Some(counts) = report.as_ref().and_then(|r| r.runs.get(&run_started_ms)) else {
            return 0;
        };
        let rate = self.config.send_rate_per_second;
        let sends = sends_at_rate(&counts.waiting, rate, Some(deadline_ms));
        if sends.past_deadline > 0 {
            tracing::warn!(
                %campaign,
                users_past_deadline = sends.past_deadline,
                deadline = %local_time::rfc3339_ms(deadline_ms),
                last_send = %local_time::rfc3339_ms(sends.last_ms.unwrap_or_default()),
                rate,
                "held users would go after the campaign's deadline at the send rate: they will be recorded expired; give a later --deadline with a resend, or raise the rate"
            );
        }
        sends.past_deadline
    }

    /// Logs the window's follows whose followeeId or followerId no user can have, and counts
    /// them.
    async fn report_odd_follows(&self, window: &Window) -> Result<OddFollows, GetUsersError> {
        let odd = self.directory.odd_follows(window, 20).await?;
        for follow in &odd.described {
            tracing::warn!(detail = %follow.reason, "follow skipped: no user can be found through it");
        }
        if odd.followees > odd.described.len() as u64 {
            tracing::warn!(
                count = odd.followees,
                "follows skipped in all: their followeeId is not a usable user id"
            );
        }
        if odd.followers > 0 {
            tracing::warn!(
                count = odd.followers,
                "follows skipped: their followerId is not a usable user id, so they make nobody a new follower"
            );
        }
        Ok(odd)
    }
}

/// A batch on its way: enqueued (a `SendReport`) or held in the waiting room (nothing sent).
pub(super) type Pending<'a> = BoxFuture<'a, Result<SendReport, GetUsersError>>;

fn add(
    report: &mut SendReport,
    next: Option<Result<SendReport, GetUsersError>>,
) -> Result<(), GetUsersError> {
    if let Some(result) = next {
        let r = result?;
        report.sent += r.sent;
        report.retried += r.retried;
    }
    Ok(())
}

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
