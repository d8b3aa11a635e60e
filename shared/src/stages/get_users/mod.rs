//! GetUsers: streams the campaign's audience out of MongoDB onto the users queue.
//!
//! Started by the weekly EventBridge schedule, by hand with `{"campaignId": "..."}`, or by a
//! checkpoint message on the continuation queue: when the audience does not fit in one
//! invocation it stops before the deadline, waits for every in-flight batch, and enqueues a
//! checkpoint (the last user id enqueued) that starts the next invocation where it left off.

use super::CampaignStateCache;
use crate::config::GetUsersConfig;
use crate::domain::campaign::{Campaign, CampaignError, CampaignId, Hold, Window};
use crate::domain::digest::OddFollows;
use crate::domain::ledger::epoch_ms;
use crate::domain::messages::{parse_body, UserMessage};
use crate::domain::user_id::{check_travels, UserId};
use crate::ports::MAX_BATCH_ENTRIES;
use crate::ports::{
    AudienceScan, CampaignStates, OutgoingQueue, QueueError, SendReport, StoreError, UserDirectory,
};
use crate::runtime::batch::batch_response;
use crate::runtime::Invocation;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Instant, SystemTime};
use time::OffsetDateTime;

#[derive(Debug, thiserror::Error)]
pub enum GetUsersError {
    #[error("unrecognised event: {0}. Expected an EventBridge \"Scheduled Event\", {{\"campaignId\": \"weekly-2026-W47\"}} (optionally with since, until, includeFailed, includeCancelled), or an SQS batch of checkpoints")]
    BadRequest(String),
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    /// The driver's error, as text: no driver type in the stage's signature.
    #[error("reading the audience from MongoDB failed: {0}")]
    Mongo(String),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("recording the campaign in the campaigns table failed: {0}")]
    Campaigns(String),
}

/// A manual invocation.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManualRequest {
    campaign_id: String,
    #[serde(default, with = "time::serde::rfc3339::option")]
    since: Option<OffsetDateTime>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    until: Option<OffsetDateTime>,
    #[serde(default)]
    include_failed: bool,
    #[serde(default)]
    include_cancelled: bool,
}

/// Where a run continues: the body of a continuation queue message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub campaign_id: CampaignId,
    #[serde(flatten)]
    pub window: Window,
    #[serde(default)]
    pub include_failed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_cancelled: bool,
    /// The last user id already enqueued; the run continues after it.
    pub after: Option<String>,
    /// How many invocations came before this one.
    pub segment: u32,
}

/// One run (or one segment of a run) of a campaign.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub campaign: Campaign,
    pub include_failed: bool,
    /// A resend of a reopened campaign: users recorded CANCELLED get their email too.
    pub include_cancelled: bool,
    pub after: Option<String>,
    pub segment: u32,
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
}

pub enum Request {
    Run(Run),
    /// SQS records of the continuation queue: (message id, body).
    Continuations(Vec<(String, Option<String>)>),
}

/// Recognises the three ways GetUsers is started.
pub fn parse_request(event: Value) -> Result<Request, GetUsersError> {
    if let Some(records) = event.get("Records").and_then(Value::as_array) {
        let records = records
            .iter()
            .map(|r| {
                let id = r
                    .get("messageId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let body = r.get("body").and_then(Value::as_str).map(str::to_owned);
                (id.to_owned(), body)
            })
            .collect();
        return Ok(Request::Continuations(records));
    }
    if event.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
        let at = event
            .get("time")
            .and_then(Value::as_str)
            .and_then(|t| {
                OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
            })
            .ok_or_else(|| {
                GetUsersError::BadRequest("scheduled event without a valid \"time\"".into())
            })?;
        return Ok(Request::Run(Run {
            campaign: Campaign::for_schedule(at),
            include_failed: false,
            include_cancelled: false,
            after: None,
            segment: 0,
        }));
    }
    let manual: ManualRequest =
        serde_json::from_value(event).map_err(|e| GetUsersError::BadRequest(e.to_string()))?;
    let window = match (manual.since, manual.until) {
        (Some(since), Some(until)) => Some(Window::new(since, until)?),
        (None, None) => None,
        _ => {
            return Err(GetUsersError::BadRequest(
                "give both since and until, or neither".into(),
            ))
        }
    };
    Ok(Request::Run(Run {
        campaign: Campaign::from_id(&manual.campaign_id, window)?,
        include_failed: manual.include_failed,
        include_cancelled: manual.include_cancelled,
        after: None,
        segment: 0,
    }))
}

/// Generic over the user directory (MongoDB on Lambda), its queues (SQS) and the campaigns
/// table (DynamoDB).
pub struct GetUsers<D, Q, S> {
    directory: D,
    users: Q,
    continuation: Q,
    campaigns: CampaignStateCache<S>,
    config: GetUsersConfig,
}

/// Batches enqueued between two looks at the campaign's state (a pause or a cancellation
/// stops the fan-out within about this many batches).
const STATE_CHECK_EVERY: usize = 50;

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates> GetUsers<D, Q, S> {
    /// `users`, `continuation` and `campaigns` are the queues and the table `config` names.
    pub fn new(
        directory: D,
        users: Q,
        continuation: Q,
        campaigns: S,
        config: GetUsersConfig,
    ) -> Self {
        Self {
            directory,
            users,
            continuation,
            campaigns: CampaignStateCache::new(campaigns),
            config,
        }
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
        match parse_request(event)? {
            Request::Run(run) => Ok(Response::Run(self.run(run, invocation).await?)),
            Request::Continuations(records) => {
                let mut failed = Vec::new();
                for (id, body) in records {
                    let result = match parse_body::<Checkpoint>(body.as_deref()) {
                        Ok(cp) => self
                            .run(cp.into(), invocation)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(reason) => Err(reason.to_string()),
                    };
                    if let Err(reason) = result {
                        tracing::error!(message_id = %id, %reason, "checkpoint failed; it will be retried");
                        failed.push(id);
                    }
                }
                Ok(Response::Checkpoints(batch_response(failed)))
            }
        }
    }

    /// Enqueues the audience after `run.after` until it ends or the deadline nears.
    pub async fn run(&self, run: Run, invocation: &Invocation) -> Result<Summary, GetUsersError> {
        let started = Instant::now();
        let campaign = &run.campaign;
        let after = match run.after.as_deref().map(UserId::parse).transpose() {
            Ok(after) => after,
            Err(reason) => return Err(GetUsersError::BadRequest(format!("checkpoint: {reason}"))),
        };
        // Follows no user can be found through are reported once per run, by its first segment.
        let odd_follows = if run.segment == 0 {
            campaign.may_start(OffsetDateTime::now_utc(), self.config.max_window)?;
            // Known to `mailctl` and the reputation guard from now on.
            let registered = self
                .campaigns
                .states()
                .register(campaign, epoch_ms(SystemTime::now()))
                .await
                .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
            // Its window is fixed when it first starts: nothing is enqueued under another.
            if let Err(recorded) = registered {
                return Err(CampaignError::WindowChanged {
                    id: campaign.id.to_string(),
                    recorded,
                    given: campaign.window,
                }
                .into());
            }
            self.report_odd_follows(&campaign.window).await?
        } else {
            OddFollows::default()
        };
        let mut audience = self.directory.audience(&campaign.window, after);
        let send = |bodies: Vec<String>| async move { self.users.send_batch(&bodies).await };
        let mut in_flight = FuturesUnordered::new();
        let mut chunk: Vec<String> = Vec::with_capacity(MAX_BATCH_ENTRIES);
        let mut last = run.after.clone();
        let mut report = SendReport::default();
        let mut complete = true;
        let mut hold = self.hold(campaign).await;
        let mut batches = 0usize;
        let mut refused = 0usize;
        while hold.is_none() {
            // At least one user per invocation, so a slow start can never checkpoint the
            // same place forever.
            let progressed = last != run.after;
            if progressed && invocation.remaining() <= self.config.deadline_margin {
                complete = false;
                break;
            }
            let Some(user_id) = audience.next().await? else {
                break;
            };
            let user_id = user_id.to_string();
            if let Err(reason) = check_travels(&user_id) {
                tracing::warn!(bytes = user_id.len(), %reason, "user refused: their id cannot travel in a queue message");
                refused += 1;
                // Not a checkpoint either (one is parsed as a user id): a continuation
                // starts after the last id that travelled.
                continue;
            }
            let message = UserMessage {
                campaign_id: campaign.id.clone(),
                user_id: user_id.clone(),
                window: campaign.window,
                include_failed: run.include_failed,
                include_cancelled: run.include_cancelled,
            };
            chunk.push(serde_json::to_string(&message).unwrap_or_default());
            last = Some(user_id);
            if chunk.len() == MAX_BATCH_ENTRIES {
                in_flight.push(send(std::mem::take(&mut chunk)));
                batches += 1;
                if batches % STATE_CHECK_EVERY == 0 {
                    hold = self.hold(campaign).await;
                }
                while in_flight.len() >= self.config.enqueue_concurrency {
                    add(&mut report, in_flight.next().await)?;
                }
            }
        }
        if !chunk.is_empty() {
            in_flight.push(send(std::mem::take(&mut chunk)));
        }
        while !in_flight.is_empty() {
            add(&mut report, in_flight.next().await)?;
        }
        let cancelled = matches!(hold, Some(Hold::Cancelled(_)));
        let paused = matches!(hold, Some(Hold::Paused(_)));
        complete &= hold.is_none();
        // Everything up to `last` is on the queue now: only then is it a safe checkpoint.
        if !complete && !cancelled {
            let checkpoint = Checkpoint {
                campaign_id: campaign.id.clone(),
                window: campaign.window,
                include_failed: run.include_failed,
                include_cancelled: run.include_cancelled,
                after: last.clone(),
                segment: run.segment + 1,
            };
            self.continuation
                .send(serde_json::to_string(&checkpoint).unwrap_or_default())
                .await?;
        }
        let summary = Summary {
            campaign_id: campaign.id.to_string(),
            segment: run.segment,
            users_enqueued: report.sent,
            users_refused: refused,
            follows_skipped: odd_follows.followees,
            followers_skipped: odd_follows.followers,
            entries_retried: report.retried,
            duration_ms: started.elapsed().as_millis(),
            complete,
            cancelled,
            paused,
            continued_after: if complete || cancelled { None } else { last },
        };
        tracing::info!(
            campaign = %summary.campaign_id,
            segment = summary.segment,
            users_enqueued = summary.users_enqueued,
            users_refused = summary.users_refused,
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
    Checkpoints(aws_lambda_events::event::sqs::SqsBatchResponse),
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates> GetUsers<D, Q, S> {
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

fn add(
    report: &mut SendReport,
    next: Option<Result<SendReport, QueueError>>,
) -> Result<(), QueueError> {
    if let Some(result) = next {
        let r = result?;
        report.sent += r.sent;
        report.retried += r.retried;
    }
    Ok(())
}

impl From<Checkpoint> for Run {
    fn from(cp: Checkpoint) -> Self {
        Run {
            campaign: Campaign {
                id: cp.campaign_id,
                window: cp.window,
            },
            include_failed: cp.include_failed,
            include_cancelled: cp.include_cancelled,
            after: cp.after,
            segment: cp.segment,
        }
    }
}

// The event: the schedule's, a manual run, or a batch of checkpoints from the continuation
// queue. A run's summary travels in its `Response`.
crate::runtime::serve::stage! {
    impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates> for GetUsers<D, Q, S> {
        Value => Result<(Response, ()), GetUsersError>,
        |stage, event, invocation| Ok((stage.handle(event, invocation).await?, ()))
    }
}

#[cfg(test)]
mod tests;
