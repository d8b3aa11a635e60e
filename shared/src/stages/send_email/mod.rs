//! Over 450 lines because a record's whole path (claim, slot, send, mark, each failure's
//! decision) reads in one place; its decision table's tests are in `decision_table`.
//!
//! SendEmail: exactly once per (user, campaign) through SES v2, guarded by the sends ledger
//! (docs/exactly-once.md): claim with one conditional write, send, mark SENT under the
//! claim.
//! The ledger writes after the claim are in `ledger_writes`, what a record came to in
//! `outcome`, the shared send rate in `pacing`, and the decision table's tests in
//! `decision_table`.

mod daily_quota;
mod guard;
mod ledger_writes;
mod outcome;
pub mod pacing;
pub mod standing;

use super::CampaignStateCache;
use crate::config::SendEmailConfig;
use crate::domain::address;
use crate::domain::campaign::CampaignId;
use crate::domain::campaign_state::{Hold, StateChange};
use crate::domain::guardrails::Skip;
use crate::domain::ledger::{self, epoch_ms, Claim, ClaimOutcome, LostClaim, Refusal};
use crate::domain::messages::{parse_body, EmailJob, UserMessage};
use crate::domain::send_rate::SendRate;
use crate::ports::{
    CampaignStates, Clock, Mailer, Marked, OutgoingEmail, RateBucket, RetryQueue, SendError,
    SendLedger, SystemClock, WaitingRoom,
};
use crate::runtime::batch::{batch_response, each_record};
use crate::runtime::Invocation;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use daily_quota::{Halt, Halted};
pub use outcome::Summary;
use outcome::{Again, Done, Retry};
use pacing::{NoSlot, Pacer, Ticket};
pub use standing::{Standings, Wanted};
use std::sync::Arc;
use std::time::Duration;

/// Do not start a send with less time left than this: claim, send and mark must fit.
const MIN_TIME_TO_SEND: Duration = Duration::from_secs(3);
const MARK_ATTEMPTS: u32 = 3;
/// SENT is retried until this long before the deadline: SES has the email, so every write
/// that lands saves a resend after the lease (a DynamoDB outage of seconds, for instance).
const MARK_SENT_MARGIN: Duration = Duration::from_secs(1);

/// Generic over its ports: on Lambda the DynamoDB ledger, SES, SQS, the campaigns table and
/// the stack's rate item in it, the waiting room (users met in their quiet hours wait there
/// for their end), and the person's standing (the sends table's pending leaves and MongoDB's
/// users); in unit tests and the lab their in-memory stand-ins (`ports::memory`).
pub struct SendEmail<M, L, Q, S, B, W, P> {
    ledger: L,
    mailer: M,
    queue: Q,
    campaigns: CampaignStateCache<S>,
    pacer: Pacer<B>,
    waiting: W,
    /// The slots (campaign, instant) whose release schedules this environment made sure of.
    scheduled: std::sync::Mutex<std::collections::HashSet<(String, i64)>>,
    standings: P,
    /// The time of day quiet hours are read by (the system's; a test's own).
    clock: Arc<dyn Clock>,
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

impl<
        M: Mailer,
        L: SendLedger,
        Q: RetryQueue,
        S: CampaignStates,
        B: RateBucket,
        W: WaitingRoom,
        P: Standings,
    > SendEmail<M, L, Q, S, B, W, P>
{
    /// `queue` is the emails queue (`config.emails_queue_url`), `campaigns` the campaigns
    /// table (`config.campaigns_table_name`), `rate` the stack's rate item in it, `waiting`
    /// the waiting room (`config.waiting_table_name`), `standings` where a person's standing
    /// is read again for an email that waited (`standing`). Every environment sends at the
    /// shared rate (`pacing`); SES's quota is read through `mailer`.
    #[allow(clippy::too_many_arguments)] // one per port, and the config
    pub fn new(
        ledger: L,
        mailer: M,
        queue: Q,
        campaigns: S,
        rate: B,
        waiting: W,
        standings: P,
        config: SendEmailConfig,
    ) -> Self {
        Self {
            ledger,
            mailer,
            queue,
            campaigns: CampaignStateCache::new(campaigns),
            pacer: Pacer::new(rate, config.record_concurrency),
            waiting,
            scheduled: Default::default(),
            standings,
            clock: Arc::new(SystemClock),
            config,
        }
    }

    /// Reads the time of day for quiet hours from `clock` instead of the system's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub async fn handle(
        &self,
        event: SqsEvent,
        invocation: &Invocation,
    ) -> (SqsBatchResponse, Summary) {
        let started = std::time::Instant::now();
        let throttles_before = self.pacer.throttles();
        let stop = Halt::default();
        let stop = &stop;
        // One ticket per record from the start: the demand the first chunk of slots is for.
        self.pacer.batch(event.records.len());
        let tickets: std::sync::Mutex<Vec<Ticket<'_>>> =
            std::sync::Mutex::new(event.records.iter().map(|_| self.pacer.ticket()).collect());
        let tickets = &tickets;
        let results = each_record(
            event.records,
            self.config.record_concurrency,
            |record| async move {
                let ticket = crate::runtime::lock(tickets).pop();
                let result = self.process(&record, invocation, stop, ticket).await;
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

        let mut summary = Summary {
            throttles: (self.pacer.throttles() - throttles_before) as usize,
            ..Summary::default()
        };
        let mut failed = Vec::new();
        let mut handed_back: std::collections::HashMap<(CampaignId, i64), u64> = Default::default();
        for (id, result) in results {
            match result {
                Ok(Done::HandedBack { campaign, slot_ms }) => {
                    summary.deferred += 1;
                    *handed_back.entry((campaign, slot_ms)).or_default() += 1;
                }
                Ok(Done::Sent(late_ms)) => {
                    summary.sent += 1;
                    if let Some(ms) = late_ms {
                        summary.late_ms.push(ms);
                    }
                }
                Ok(Done::Duplicate) => summary.duplicates += 1,
                Ok(Done::Failed) => summary.failed += 1,
                Ok(Done::PreviouslyFailed) => summary.previously_failed += 1,
                Ok(Done::Unrecorded) => summary.unrecorded += 1,
                Ok(Done::Cancelled) => summary.cancelled += 1,
                Ok(Done::Paced) => summary.paced += 1,
                Ok(Done::Skipped(skip)) => *summary.skipped.entry(skip.as_str()).or_default() += 1,
                Ok(Done::PreviouslySkipped) => summary.previously_skipped += 1,
                Ok(Done::Requeued) => summary.deferred += 1,
                Ok(Done::QuotaRequeued) => summary.daily_quota_held += 1,
                Err(retry) => {
                    match retry.why {
                        Again::Busy => summary.busy += 1,
                        Again::Paused => summary.paused += 1,
                        Again::Throttled => summary.throttled += 1,
                        Again::Paced => summary.paced += 1,
                        Again::Stopped => summary.stopped += 1,
                        Again::Error => summary.retried += 1,
                        Again::Quiet => summary.deferred += 1,
                        Again::DailyQuota => summary.daily_quota_held += 1,
                    }
                    failed.push(id);
                }
            }
        }
        self.count_quiet_holds(handed_back).await;
        tracing::info!(
            sent = summary.sent,
            duplicates = summary.duplicates,
            failed = summary.failed,
            busy = summary.busy,
            throttled = summary.throttled,
            throttles = summary.throttles,
            paced = summary.paced,
            stopped = summary.stopped,
            paused = summary.paused,
            retried = summary.retried,
            previously_failed = summary.previously_failed,
            unrecorded = summary.unrecorded,
            cancelled = summary.cancelled,
            skipped = ?summary.skipped,
            previously_skipped = summary.previously_skipped,
            deferred = summary.deferred,
            daily_quota_held = summary.daily_quota_held,
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

    /// A return that hides this record again must not cost it the receive that sends it to
    /// the DLQ: it goes back as a fresh copy instead.
    fn near_receive_limit(&self, record: &SqsMessage) -> bool {
        receive_count(record) + 1 >= self.config.max_receive_count as usize
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

    /// Sends the record's body again as a new message that comes back after `wait`; false
    /// if the queue refused (then the record itself is returned with that delay).
    async fn requeue(&self, record: &SqsMessage, wait: Duration) -> bool {
        let Some(body) = record.body.as_deref() else {
            return false;
        };
        match self.queue.requeue(body, wait).await {
            Ok(()) => {
                // The original goes now: should this invocation time out, its batch comes
                // back whole, and a record already copied would be copied again each time.
                if let Some(receipt) = record.receipt_handle.as_deref() {
                    if let Err(err) = self.queue.delete(receipt).await {
                        tracing::warn!(reason = %err, "could not delete a requeued email's original; the batch response acknowledges it");
                    }
                }
                true
            }
            Err(err) => {
                tracing::warn!(reason = %err, "could not put a paced email back on the queue; returning the record instead");
                false
            }
        }
    }

    async fn process(
        &self,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
        ticket: Option<Ticket<'_>>,
    ) -> Result<Done, Retry> {
        let message_id = record.message_id.as_deref().unwrap_or_default();
        let job: EmailJob = parse_body(record.body.as_deref()).map_err(|reason| {
            tracing::warn!(message_id, %reason, "unparseable email job; it will reach the DLQ after maxReceiveCount");
            Retry::error(None)
        })?;
        // No span per record (the fmt layer formats its fields for every one, a tenth of our
        // own CPU per email): the lines that need the user name them.
        let ticket = ticket.unwrap_or_else(|| self.pacer.ticket());
        self.send_job(job, record, invocation, stop, ticket).await
    }

    async fn send_job(
        &self,
        job: EmailJob,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
        ticket: Ticket<'_>,
    ) -> Result<Done, Retry> {
        let message_id = record.message_id.as_deref().unwrap_or_default();
        match stop.get() {
            Some(Halted::Stopped) => return Err(self.stopped()),
            Some(Halted::DailyQuota) => return self.hold_for_quota(None, record).await,
            None => {}
        }
        if invocation.remaining() < MIN_TIME_TO_SEND {
            return Err(Retry::error(Some(Duration::ZERO)));
        }

        // Read, not assumed: a holdout or a deadline not known would not be applied. A read
        // that fails is tried again at once (a dropped connection), and then the record
        // comes back with the backoff by its receives (2 s first, not the queue's 180 s
        // visibility timeout; up to 5 minutes, so an outage does not use up its receives).
        let mut read = self.campaigns.state(job.campaign_id.as_str()).await;
        for attempt in 1..MARK_ATTEMPTS {
            if read.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            read = self.campaigns.state(job.campaign_id.as_str()).await;
        }
        let state = match read {
            Ok(state) => state,
            Err(err) => {
                tracing::warn!(campaign = %job.campaign_id, reason = %err, "campaign state not read; will retry");
                return Err(Retry::error(Some(self.backoff(record))));
            }
        };
        match state.hold {
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

        let (mut claim, send_errors) = match self.claim(&job, message_id, invocation).await {
            Ok(claimed) => claimed,
            Err(outcome) => return outcome,
        };
        claim.deadline_ms = state.guardrails.deadline_ms;
        let last_receive = receive_count(record) >= self.config.max_receive_count as usize;

        // Exactly one mailbox, encoded as SES takes it; anything else never reaches SES (nor
        // counts towards a frequency cap: the guard does not count it).
        let recipient = address::parse(&job.to);
        let attempt_ms = claim.started_at_ms as i64;
        match self
            .guard(&job, &state.guardrails, recipient.is_ok(), attempt_ms)
            .await
        {
            Ok(guard::Verdict::Send) => {}
            Ok(guard::Verdict::Skip(skip)) => return self.skip(&claim, skip).await,
            Ok(guard::Verdict::Defer { until_ms }) => {
                return self
                    .defer(&claim, record, job.user_message(), until_ms)
                    .await
            }
            Err(err) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "guardrails not read; will retry");
                self.give_back(&claim, &err.to_string(), false, last_receive)
                    .await;
                return Err(Retry::error(None));
            }
        }

        let recipient = match recipient {
            Ok(recipient) => recipient,
            Err(err) => return self.fail(&claim, &err.to_string()).await,
        };

        match self.take_slot(ticket, invocation).await {
            Ok(()) => {}
            Err(NoSlot::Full(wait)) => {
                // Not an error: the stack is sending as fast as it may; back when it has room,
                // as a new message, so that waiting for the rate never counts a receive
                // towards the DLQ (at a rate of one or two a second it would, constantly).
                let reason = "no send slot before the deadline";
                let requeued = self.requeue(record, wait).await;
                self.give_back(&claim, reason, false, last_receive && !requeued)
                    .await;
                if requeued {
                    return Ok(Done::Paced);
                }
                return Err(Retry {
                    why: Again::Paced,
                    delay: Some(wait),
                });
            }
            Err(NoSlot::Failed(err)) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "no send slot; will retry");
                self.give_back(&claim, &err.to_string(), false, last_receive)
                    .await;
                return Err(Retry::error(None));
            }
        }
        match stop.get() {
            Some(Halted::Stopped) => {
                self.give_back(&claim, "sending stopped", false, last_receive)
                    .await;
                return Err(self.stopped());
            }
            Some(Halted::DailyQuota) => return self.hold_for_quota(Some(&claim), record).await,
            None => {}
        }
        if invocation.remaining() < MIN_TIME_TO_SEND {
            self.give_back(&claim, "deadline too near to send", false, last_receive)
                .await;
            return Err(Retry::error(Some(Duration::ZERO)));
        }

        // The wait for a slot may have carried it past the deadline.
        match self.still_before_deadline(&job, &state.guardrails).await {
            Ok(true) => {}
            Ok(false) => return self.skip(&claim, Skip::Expired).await,
            Err(err) => {
                self.give_back(&claim, &err.to_string(), false, last_receive)
                    .await;
                return Err(Retry::error(None));
            }
        }

        // Handed back to the waiting room if quiet hours begin before SES has it.
        let again = job.user_message();
        let email = OutgoingEmail {
            to: recipient.as_str().to_owned(),
            subject: job.subject,
            html: job.html,
            text: job.text,
            key: claim.key.clone(),
            unsubscribe_url: job.unsubscribe_url,
        };
        self.deliver(&claim, &email, again, record, invocation, stop, send_errors)
            .await
    }

    /// The configured rate: SES's quota is RateControl's to read, and the ceiling it gives is
    /// in the rate item, which the pacer honours (`pacing::trusted`).
    fn ceiling(&self) -> SendRate {
        SendRate::configured(self.config.send_rate_per_second)
    }

    /// Waits for this environment's next slot of the shared rate.
    async fn take_slot(&self, ticket: Ticket<'_>, invocation: &Invocation) -> Result<(), NoSlot> {
        let ceiling = self.ceiling();
        let latest = invocation.deadline - MIN_TIME_TO_SEND;
        self.pacer.acquire(ticket, &ceiling, latest).await
    }

    /// Sending is stopped (SES refuses the account): back to the queue at the longest delay.
    fn stopped(&self) -> Retry {
        Retry {
            why: Again::Stopped,
            delay: self.config.retry_delays.last().copied(),
        }
    }

    /// Claims the job's record under this invocation's lease: the claim and the send errors
    /// noted on it so far, or what the refusal decides (a duplicate, busy, failed before...).
    async fn claim(
        &self,
        job: &EmailJob,
        message_id: &str,
        invocation: &Invocation,
    ) -> Result<(Claim, u64), Result<Done, Retry>> {
        let now = crate::runtime::clock::now();
        let claim = Claim {
            key: job.key(),
            token: format!("{}:{message_id}", invocation.request_id),
            started_at_ms: epoch_ms(now),
            lease_until_ms: epoch_ms(ledger::lease_until(
                now,
                invocation.deadline,
                self.config.lease_clock_skew,
                self.config.visibility_timeout,
            )),
            due: job.due,
            deadline_ms: None,
            variant: job.variant.clone(),
            zone: job.zone.clone(),
        };
        let send_errors = match self.ledger.claim(&claim, job.reclaim()).await {
            Ok(ClaimOutcome::Claimed {
                attempt,
                send_errors,
            }) => {
                tracing::debug!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, attempt, "claimed");
                send_errors
            }
            Ok(ClaimOutcome::Refused(Refusal::AlreadySent)) => {
                if let Err(err) = self.ledger.note_duplicate(&claim.key).await {
                    tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "could not count the suppressed duplicate");
                }
                return Err(Ok(Done::Duplicate));
            }
            Ok(ClaimOutcome::Refused(Refusal::Failed { .. })) => {
                return Err(Ok(Done::PreviouslyFailed))
            }
            Ok(ClaimOutcome::Refused(Refusal::Cancelled)) => return Err(Ok(Done::Cancelled)),
            Ok(ClaimOutcome::Refused(Refusal::Skipped { .. })) => {
                return Err(Ok(Done::PreviouslySkipped))
            }
            Ok(ClaimOutcome::Refused(Refusal::Busy { lease_until_ms })) => {
                // Never acknowledge: if the holder dies, this copy may be the only one left.
                let wait =
                    lease_until_ms.saturating_sub(epoch_ms(crate::runtime::clock::now())) + 1000;
                return Err(Err(Retry {
                    why: Again::Busy,
                    delay: Some(Duration::from_millis(wait)),
                }));
            }
            Err(err) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "claim failed; will retry");
                return Err(Err(Retry::error(None)));
            }
        };
        Ok((claim, send_errors))
    }

    /// Sends under the claim. A throttle is a signal, not an error: it lowers the shared
    /// rate, and the email waits for its next slot at the lower rate and goes again, for as
    /// long as the invocation has time (then back to the queue, still unsent). Err: not
    /// sent, for the user's quiet hours (`zone`: theirs, when quiet hours are set) had begun
    /// when a slot came.
    async fn send_paced(
        &self,
        email: &OutgoingEmail,
        zone: Option<&jiff::tz::TimeZone>,
        invocation: &Invocation,
        stop: &Halt,
        deadline_ms: Option<i64>,
    ) -> Result<Result<String, SendError>, guard::Quiet> {
        loop {
            if let Some(quiet) = zone.and_then(|zone| self.quiet(zone)) {
                return Err(quiet);
            }
            let answer = self.mailer.send(email).await;
            if !matches!(answer, Err(SendError::Throttled(_))) {
                return Ok(answer);
            }
            // Not again after the campaign's deadline: the next attempt records it expired.
            let now = epoch_ms(crate::runtime::clock::now()) as i64;
            if deadline_ms.is_some_and(|d| now >= d) {
                return Ok(answer);
            }
            self.pacer.throttled(&self.ceiling()).await;
            if stop.get().is_some() || invocation.remaining() < 2 * MIN_TIME_TO_SEND {
                return Ok(answer);
            }
            if self
                .take_slot(self.pacer.ticket(), invocation)
                .await
                .is_err()
                || invocation.remaining() < MIN_TIME_TO_SEND
            {
                return Ok(answer);
            }
        }
    }

    /// Hands the claimed email to SES and decides by its answer: SENT, FAILED, or back to
    /// the queue (throttled, stopped, not accepted, outcome unknown); or, if the user's quiet
    /// hours began before SES had it, skipped or `again` handed back to the waiting room.
    #[allow(clippy::too_many_arguments)]
    async fn deliver(
        &self,
        claim: &Claim,
        email: &OutgoingEmail,
        again: Option<UserMessage>,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
        send_errors: u64,
    ) -> Result<Done, Retry> {
        let last_receive = receive_count(record) >= self.config.max_receive_count as usize;
        // Quiet hours are asked again right before each SES call, in the user's zone.
        let zone = self
            .config
            .quiet_hours
            .is_some()
            .then(|| self.zone_of(claim.zone.as_deref()));
        let answer = match self
            .send_paced(email, zone.as_ref(), invocation, stop, claim.deadline_ms)
            .await
        {
            Ok(answer) => answer,
            Err(guard::Quiet::Skip) => return self.skip(claim, Skip::QuietHours).await,
            Err(guard::Quiet::Defer { until_ms }) => {
                return self.defer(claim, record, again, until_ms).await
            }
        };
        match answer {
            Ok(ses_message_id) => Ok(self.mark_sent(claim, &ses_message_id, invocation).await),
            Err(SendError::Permanent(reason)) => {
                self.uncount(&claim.key).await;
                self.fail(claim, &reason).await
            }
            Err(SendError::Throttled(reason)) => {
                self.give_back(claim, &reason, false, last_receive).await;
                Err(Retry {
                    why: Again::Throttled,
                    delay: Some(self.backoff(record)),
                })
            }
            Err(SendError::DailyQuota(reason)) => {
                // Not a rate: the shared rate stays as it is, and the rest of the batch is
                // held without asking SES again.
                stop.set(Halted::DailyQuota);
                tracing::error!(campaign = %claim.key.campaign_id(), %reason, "SES's 24-hour sending quota is used up: holding the batch until its window lets sends through");
                self.hold_for_quota(Some(claim), record).await
            }
            Err(SendError::Stopped(reason)) => {
                stop.set(Halted::Stopped);
                tracing::error!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, "SES refuses to send for this account: stopping the batch and returning every unsent record; resolve it in the SES console");
                // Stopped for as long as the account is: its cap reservation must not skip
                // the person's other emails meanwhile.
                self.uncount(&claim.key).await;
                self.give_back(claim, &reason, false, last_receive).await;
                Err(self.stopped())
            }
            Err(SendError::NotAccepted(reason)) => {
                // An error that repeats on every attempt is as good as permanent: after a few,
                // FAILED with the reason, rather than retries until the DLQ.
                let errors = send_errors + 1;
                if errors >= u64::from(self.config.max_send_errors) {
                    self.uncount(&claim.key).await;
                    let reason = format!("{reason} (refused on {errors} attempts)");
                    return self.fail(claim, &reason).await;
                }
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, errors, "SES did not accept the email; will retry");
                self.give_back(claim, &reason, true, last_receive).await;
                Err(Retry::error(Some(self.backoff(record))))
            }
            Err(SendError::Unknown(reason)) => {
                // SES may have accepted it: keep the claim, so no retry sends before the lease
                // ends (and the SES SEND event can reconcile the record meanwhile). On the
                // last receive the message goes to the DLQ: the record says so.
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, "SES outcome unknown; keeping the claim until its lease ends");
                if last_receive {
                    self.dead_letter(claim, &reason).await;
                }
                let wait = claim
                    .lease_until_ms
                    .saturating_sub(epoch_ms(crate::runtime::clock::now()))
                    + 1000;
                Err(Retry::error(Some(Duration::from_millis(wait))))
            }
        }
    }
}

crate::runtime::serve::stage! {
    impl<M: Mailer, L: SendLedger, Q: RetryQueue, S: CampaignStates, B: RateBucket, W: WaitingRoom, P: Standings> for SendEmail<M, L, Q, S, B, W, P> {
        SqsEvent => Result<(SqsBatchResponse, Summary), std::convert::Infallible>,
        |stage, event, invocation| Ok(stage.handle(event, invocation).await),
        gauges: |stage| stage.pacer.gauges()
    }
}

/// The exactly-once decision table over in-memory ports.
#[cfg(test)]
mod decision_table;
