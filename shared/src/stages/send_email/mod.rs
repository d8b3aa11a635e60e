//! SendEmail: exactly once per (user, campaign) through SES v2, guarded by the sends ledger
//! (README, "Exactly once"): claim with one conditional write, send, mark SENT under the
//! claim.
//!
//! Over 400 lines on purpose: the claim, send and mark steps and their error paths read
//! best in one file (the decision table's tests are beside it, in `decision_table.rs`).

use super::summary::summary;
use super::CampaignStateCache;
use crate::config::SendEmailConfig;
use crate::domain::address;
use crate::domain::campaign::{Hold, StateChange};
use crate::domain::ledger::{self, epoch_ms, Claim, ClaimOutcome, LostClaim, Refusal};
use crate::domain::messages::{parse_body, EmailJob};
use crate::domain::send_rate::{Pacer, SendRate};
use crate::ports::{
    CampaignStates, Mailer, Marked, OutgoingEmail, RetryQueue, SendError, SendLedger,
};
use crate::runtime::batch::{batch_response, each_record};
use crate::runtime::Invocation;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// Do not start a send with less time left than this: claim, send and mark must fit.
const MIN_TIME_TO_SEND: Duration = Duration::from_secs(3);
const MARK_ATTEMPTS: u32 = 3;
/// SENT is retried until this long before the deadline: SES has the email, so every write
/// that lands saves a resend after the lease (a DynamoDB outage of seconds, for instance).
const MARK_SENT_MARGIN: Duration = Duration::from_secs(1);

summary! {
    /// Per-batch counts, logged and returned to callers such as the local runner.
    pub struct Summary {
        pub sent: usize,
        /// Already SENT: acknowledged without sending (a duplicate delivery or a re-run).
        pub duplicates: usize,
        /// Rejected permanently now (recorded FAILED) or earlier (left FAILED).
        pub failed: usize,
        pub previously_failed: usize,
        /// Held by another attempt's live lease: returned to come back later.
        pub busy: usize,
        pub throttled: usize,
        /// Returned because sending is paused or the account suspended.
        pub stopped: usize,
        /// The campaign is paused: handed back unclaimed, sent after the resume.
        pub paused: usize,
        /// Returned because of an error (bad body, ledger or service error, deadline).
        pub retried: usize,
        /// SES accepted but the ledger could not be updated under the claim.
        pub unrecorded: usize,
        /// The campaign was cancelled: recorded CANCELLED (or left to a live attempt) and
        /// acknowledged.
        pub cancelled: usize,
    }
}

enum Done {
    Sent,
    Duplicate,
    Failed,
    PreviouslyFailed,
    Unrecorded,
    Cancelled,
}

enum Again {
    Busy,
    /// The campaign is paused: the record goes back untouched, to be sent after the resume.
    Paused,
    Throttled,
    Stopped,
    Error,
}

/// A record to return, and when it should come back (None: after the queue's visibility).
struct Retry {
    why: Again,
    delay: Option<Duration>,
}

impl Retry {
    fn error(delay: Option<Duration>) -> Self {
        Self {
            why: Again::Error,
            delay,
        }
    }
}

/// Generic over its ports: on Lambda the DynamoDB ledger, SES, SQS and the campaigns table;
/// in unit tests their in-memory stand-ins (`ports::memory`).
pub struct SendEmail<M, L, Q, S> {
    ledger: L,
    mailer: M,
    queue: Q,
    campaigns: CampaignStateCache<S>,
    pacer: Pacer,
    config: SendEmailConfig,
}

/// How often SQS has delivered this record (1 on the first receive).
fn receive_count(record: &SqsMessage) -> usize {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}

impl<M: Mailer, L: SendLedger, Q: RetryQueue, S: CampaignStates> SendEmail<M, L, Q, S> {
    /// `queue` is the emails queue (`config.emails_queue_url`), `campaigns` the campaigns
    /// table (`config.campaigns_table_name`).
    pub fn new(ledger: L, mailer: M, queue: Q, campaigns: S, config: SendEmailConfig) -> Self {
        let rate = SendRate::configured(config.send_rate_per_second, config.max_concurrency);
        Self::with_send_rate(
            ledger,
            mailer,
            queue,
            campaigns,
            config,
            async move { rate },
        )
    }

    /// `new`, with the send rate still to come (`assemble::send_email`: SES's quota): records
    /// are parsed and claimed meanwhile; the first send waits for it. This environment sends
    /// at its share of the rate (`SendRate::per_environment`).
    pub fn with_send_rate(
        ledger: L,
        mailer: M,
        queue: Q,
        campaigns: S,
        config: SendEmailConfig,
        send_rate: impl Future<Output = SendRate> + Send + 'static,
    ) -> Self {
        Self {
            ledger,
            mailer,
            queue,
            campaigns: CampaignStateCache::new(campaigns),
            pacer: Pacer::when_known(async move { send_rate.await.per_environment() }),
            config,
        }
    }

    pub async fn handle(
        &self,
        event: SqsEvent,
        invocation: &Invocation,
    ) -> (SqsBatchResponse, Summary) {
        let started = std::time::Instant::now();
        let stop = AtomicBool::new(false);
        let stop = &stop;
        let results = each_record(
            event.records,
            self.config.record_concurrency,
            |record| async move {
                let result = self.process(&record, invocation, stop).await;
                if let Err(Retry {
                    delay: Some(delay), ..
                }) = &result
                {
                    self.delay(&record, *delay).await;
                }
                result
            },
        )
        .await;

        let mut summary = Summary::default();
        let mut failed = Vec::new();
        for (id, result) in results {
            match result {
                Ok(Done::Sent) => summary.sent += 1,
                Ok(Done::Duplicate) => summary.duplicates += 1,
                Ok(Done::Failed) => summary.failed += 1,
                Ok(Done::PreviouslyFailed) => summary.previously_failed += 1,
                Ok(Done::Unrecorded) => summary.unrecorded += 1,
                Ok(Done::Cancelled) => summary.cancelled += 1,
                Err(retry) => {
                    match retry.why {
                        Again::Busy => summary.busy += 1,
                        Again::Paused => summary.paused += 1,
                        Again::Throttled => summary.throttled += 1,
                        Again::Stopped => summary.stopped += 1,
                        Again::Error => summary.retried += 1,
                    }
                    failed.push(id);
                }
            }
        }
        tracing::info!(
            sent = summary.sent,
            duplicates = summary.duplicates,
            failed = summary.failed,
            busy = summary.busy,
            throttled = summary.throttled,
            stopped = summary.stopped,
            paused = summary.paused,
            retried = summary.retried,
            previously_failed = summary.previously_failed,
            unrecorded = summary.unrecorded,
            cancelled = summary.cancelled,
            duration_ms = started.elapsed().as_millis() as u64,
            "SendEmail batch done"
        );
        (batch_response(failed), summary)
    }

    /// Backoff for a throttled record: by how often SQS has delivered it.
    fn backoff(&self, record: &SqsMessage) -> Duration {
        let delays = &self.config.retry_delays;
        delays[receive_count(record)
            .saturating_sub(1)
            .min(delays.len() - 1)]
    }

    async fn delay(&self, record: &SqsMessage, delay: Duration) {
        let Some(receipt) = record.receipt_handle.as_deref() else {
            return;
        };
        if let Err(err) = self.queue.change_visibility(receipt, delay).await {
            // Not fatal: the record still comes back, after the queue's visibility timeout.
            tracing::warn!(reason = %err, "could not set the retry delay");
        }
    }

    async fn process(
        &self,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &AtomicBool,
    ) -> Result<Done, Retry> {
        let message_id = record.message_id.as_deref().unwrap_or_default();
        let job: EmailJob = parse_body(record.body.as_deref()).map_err(|reason| {
            tracing::warn!(message_id, %reason, "unparseable email job; it will reach the DLQ after maxReceiveCount");
            Retry::error(None)
        })?;
        // No span per record (the fmt layer formats its fields for every one, a tenth of our
        // own CPU per email): the lines that need the user name them.
        self.send_job(job, record, invocation, stop).await
    }

    async fn send_job(
        &self,
        job: EmailJob,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &AtomicBool,
    ) -> Result<Done, Retry> {
        let stopped = || Retry {
            why: Again::Stopped,
            delay: self.config.retry_delays.last().copied(),
        };
        let message_id = record.message_id.as_deref().unwrap_or_default();
        if stop.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        if invocation.remaining() < MIN_TIME_TO_SEND {
            return Err(Retry::error(Some(Duration::ZERO)));
        }

        match self.campaigns.hold(job.campaign_id.as_str()).await {
            Some(Hold::Cancelled(cancellation)) => return self.cancel(&job, &cancellation).await,
            // Not claimed: after the resume it is sent as if the pause had not been.
            Some(Hold::Paused(_)) => {
                return Err(Retry {
                    why: Again::Paused,
                    delay: None,
                })
            }
            None => {}
        }

        let now = SystemTime::now();
        let claim = Claim {
            user_id: job.user_id.clone(),
            campaign_id: job.campaign_id.to_string(),
            token: format!("{}:{message_id}", invocation.request_id),
            started_at_ms: epoch_ms(now),
            lease_until_ms: epoch_ms(ledger::lease_until(
                now,
                invocation.deadline,
                self.config.lease_clock_skew,
                self.config.visibility_timeout,
            )),
        };
        let send_errors = match self.ledger.claim(&claim, job.reclaim()).await {
            Ok(ClaimOutcome::Claimed {
                attempt,
                send_errors,
            }) => {
                tracing::debug!(campaign = %claim.campaign_id, user = %claim.user_id, attempt, "claimed");
                send_errors
            }
            Ok(ClaimOutcome::Refused(Refusal::AlreadySent)) => {
                if let Err(err) = self
                    .ledger
                    .note_duplicate(&claim.user_id, &claim.campaign_id)
                    .await
                {
                    tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, reason = %err, "could not count the suppressed duplicate");
                }
                return Ok(Done::Duplicate);
            }
            Ok(ClaimOutcome::Refused(Refusal::Failed { .. })) => return Ok(Done::PreviouslyFailed),
            Ok(ClaimOutcome::Refused(Refusal::Cancelled)) => return Ok(Done::Cancelled),
            Ok(ClaimOutcome::Refused(Refusal::Busy { lease_until_ms })) => {
                // Never acknowledge: if the holder dies, this copy may be the only one left.
                let wait = lease_until_ms.saturating_sub(epoch_ms(SystemTime::now())) + 1000;
                return Err(Retry {
                    why: Again::Busy,
                    delay: Some(Duration::from_millis(wait)),
                });
            }
            Err(err) => {
                tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, reason = %err, "claim failed; will retry");
                return Err(Retry::error(None));
            }
        };
        let last_receive = receive_count(record) >= self.config.max_receive_count as usize;

        // Exactly one mailbox, encoded as SES takes it; anything else never reaches SES.
        let recipient = match address::parse(&job.to) {
            Ok(recipient) => recipient,
            Err(err) => return self.fail(&claim, &err.to_string()).await,
        };

        self.pacer.acquire().await;
        if stop.load(Ordering::SeqCst) {
            self.give_back(&claim, "sending stopped", false, last_receive)
                .await;
            return Err(stopped());
        }
        if invocation.remaining() < MIN_TIME_TO_SEND {
            self.give_back(&claim, "deadline too near to send", false, last_receive)
                .await;
            return Err(Retry::error(Some(Duration::ZERO)));
        }

        let email = OutgoingEmail {
            to: recipient.as_str().to_owned(),
            subject: job.subject,
            html: job.html,
            text: job.text,
            campaign_id: claim.campaign_id.clone(),
            user_id: claim.user_id.clone(),
            unsubscribe_url: job.unsubscribe_url,
        };
        match self.mailer.send(&email).await {
            Ok(ses_message_id) => Ok(self.mark_sent(&claim, &ses_message_id, invocation).await),
            Err(SendError::Permanent(reason)) => self.fail(&claim, &reason).await,
            Err(SendError::Throttled(reason)) => {
                self.give_back(&claim, &reason, false, last_receive).await;
                Err(Retry {
                    why: Again::Throttled,
                    delay: Some(self.backoff(record)),
                })
            }
            Err(SendError::Stopped(reason)) => {
                stop.store(true, Ordering::SeqCst);
                tracing::error!(campaign = %claim.campaign_id, user = %claim.user_id, %reason, "SES refuses to send for this account: stopping the batch and returning every unsent record; resolve it in the SES console");
                self.give_back(&claim, &reason, false, last_receive).await;
                Err(stopped())
            }
            Err(SendError::NotAccepted(reason)) => {
                // An error that repeats on every attempt is as good as permanent: after a few,
                // FAILED with the reason, rather than retries until the DLQ.
                let errors = send_errors + 1;
                if errors >= u64::from(self.config.max_send_errors) {
                    let reason = format!("{reason} (refused on {errors} attempts)");
                    return self.fail(&claim, &reason).await;
                }
                tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, %reason, errors, "SES did not accept the email; will retry");
                self.give_back(&claim, &reason, true, last_receive).await;
                Err(Retry::error(Some(self.backoff(record))))
            }
            Err(SendError::Unknown(reason)) => {
                // SES may have accepted it: keep the claim, so no retry sends before the lease
                // ends (and the SES SEND event can reconcile the record meanwhile). On the
                // last receive the message goes to the DLQ: the record says so.
                tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, %reason, "SES outcome unknown; keeping the claim until its lease ends");
                if last_receive {
                    self.dead_letter(&claim, &reason).await;
                }
                let wait = claim
                    .lease_until_ms
                    .saturating_sub(epoch_ms(SystemTime::now()))
                    + 1000;
                Err(Retry::error(Some(Duration::from_millis(wait))))
            }
        }
    }

    async fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
        invocation: &Invocation,
    ) -> Done {
        match self
            .retry_write(
                || self.ledger.mark_sent(claim, ses_message_id),
                |_| invocation.remaining() > MARK_SENT_MARGIN,
            )
            .await
        {
            Ok(Ok(())) => Done::Sent,
            Ok(Err(LostClaim {
                status,
                ses_message_id: recorded,
                ..
            })) => {
                if recorded.as_deref() == Some(ses_message_id) {
                    return Done::Sent;
                }
                // Another attempt took over after our lease ended (we were too slow).
                tracing::error!(
                    campaign = %claim.campaign_id, user = %claim.user_id,
                    ?status,
                    ses_message_id,
                    "sent, but the claim had passed to another attempt: possible duplicate"
                );
                Done::Unrecorded
            }
            Err(err) => {
                // Acknowledge anyway: a retry would send again. The SES event can reconcile.
                tracing::error!(campaign = %claim.campaign_id, user = %claim.user_id, reason = %err, ses_message_id, "sent, but SENT could not be recorded");
                Done::Unrecorded
            }
        }
    }

    /// The campaign was cancelled: this email is not sent; its record ends CANCELLED (unless
    /// it is SENT or a live attempt holds it) and the message is acknowledged.
    async fn cancel(&self, job: &EmailJob, cancellation: &StateChange) -> Result<Done, Retry> {
        let now = epoch_ms(SystemTime::now()).max(cancellation.at_ms);
        match self
            .ledger
            .cancel_send(&job.user_id, job.campaign_id.as_str(), now)
            .await
        {
            Ok(_) => Ok(Done::Cancelled),
            Err(err) => {
                tracing::warn!(campaign = %job.campaign_id, user = %job.user_id, reason = %err, "could not record the cancellation; will retry");
                Err(Retry::error(None))
            }
        }
    }

    /// Records FAILED with the reason (a permanent error) and acknowledges the record.
    async fn fail(&self, claim: &Claim, reason: &str) -> Result<Done, Retry> {
        tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, %reason, "rejected permanently; recorded FAILED");
        match self
            .retry_mark(|| self.ledger.mark_failed(claim, reason))
            .await
        {
            Ok(Ok(())) => Ok(Done::Failed),
            Ok(Err(lost)) => {
                tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, ?lost.status, "claim lost before FAILED could be recorded");
                Ok(Done::Failed)
            }
            // The claim stays IN_PROGRESS; the record retries after the lease.
            Err(_) => Err(Retry::error(None)),
        }
    }

    /// Hands the claim back for a retry: released, or, on the message's last receive,
    /// DEAD_LETTERED, since the message goes to the DLQ now.
    async fn give_back(&self, claim: &Claim, reason: &str, send_error: bool, last_receive: bool) {
        if last_receive {
            return self.dead_letter(claim, reason).await;
        }
        match self
            .retry_mark(|| self.ledger.release(claim, reason, send_error))
            .await
        {
            Ok(_) => {}
            // The lease still ends on its own; the retry only waits longer.
            Err(err) => {
                tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, reason = %err, "could not release the claim")
            }
        }
    }

    async fn dead_letter(&self, claim: &Claim, reason: &str) {
        tracing::error!(campaign = %claim.campaign_id, user = %claim.user_id, %reason, "last receive of this email's message: it goes to the emails DLQ; recorded DEAD_LETTERED");
        if let Err(err) = self
            .retry_mark(|| self.ledger.mark_dead_lettered(claim, reason))
            .await
        {
            tracing::warn!(campaign = %claim.campaign_id, user = %claim.user_id, reason = %err, "could not record DEAD_LETTERED");
        }
    }

    async fn retry_mark<F, Fut>(&self, write: F) -> Marked
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Marked>,
    {
        self.retry_write(write, |attempt| attempt < MARK_ATTEMPTS)
            .await
    }

    /// Retries a ledger write that failed (not one refused by its condition) with backoff
    /// while `again(attempts so far)` allows.
    async fn retry_write<F, Fut>(&self, write: F, again: impl Fn(u32) -> bool) -> Marked
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Marked>,
    {
        let mut attempt = 0;
        loop {
            match write().await {
                Err(err) if again(attempt + 1) => {
                    attempt += 1;
                    tracing::warn!(reason = %err, attempt, "ledger write failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(3))).await;
                }
                other => return other,
            }
        }
    }
}

impl<M: Mailer, L: SendLedger, Q: RetryQueue, S: CampaignStates> crate::runtime::Stage
    for SendEmail<M, L, Q, S>
{
    type Event = SqsEvent;
    type Response = SqsBatchResponse;
    type Summary = Summary;
    type Error = std::convert::Infallible;

    async fn invoke(
        &self,
        event: SqsEvent,
        invocation: &Invocation,
    ) -> Result<(SqsBatchResponse, Summary), Self::Error> {
        Ok(self.handle(event, invocation).await)
    }
}

/// The exactly-once decision table over in-memory ports.
#[cfg(test)]
mod decision_table;
