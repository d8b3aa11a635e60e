//! SendEmail: exactly once per (user, campaign) through SES v2, guarded by the sends ledger
//! (docs/exactly-once.md): claim with one conditional write, send, mark SENT under the
//! claim. A record's path reads here (`send_job`); the campaign's state and the claim are
//! in `claim`, the slot, SES's call and its answer in `deliver`, the ledger writes after
//! the claim in `ledger_writes`, how a record goes back to the queue in `returns`, what a
//! record came to in `outcome`, the shared send rate in `pacing`, and the decision table's
//! tests in `decision_table`.

mod claim;
mod daily_quota;
mod deliver;
mod guard;
mod ledger_writes;
mod outcome;
pub mod pacing;
mod returns;
pub mod standing;

use super::CampaignStateCache;
use crate::config::SendEmailConfig;
use crate::domain::address;
use crate::domain::campaign_state::StateChange;
use crate::domain::guardrails::{CampaignGuardrails, Skip};
use crate::domain::ledger::{epoch_ms, Claim, LostClaim};
use crate::domain::messages::{parse_body, EmailJob};
use crate::ports::{
    CampaignStates, Clock, Mailer, Marked, OutgoingEmail, RateBucket, RetryQueue, SendLedger,
    SystemClock, WaitingRoom,
};
use crate::runtime::batch::{batch_response, each_record};
use crate::runtime::Invocation;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use daily_quota::{Halt, Halted};
pub use outcome::Summary;
use outcome::{Done, Retry, Tally};
use pacing::{Pacer, Ticket};
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

        let throttles = (self.pacer.throttles() - throttles_before) as usize;
        let Tally {
            summary,
            failed,
            handed_back,
        } = Tally::of(results, throttles);
        self.count_quiet_holds(handed_back).await;
        summary.log(started.elapsed());
        (batch_response(failed), summary)
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

    /// A record's path: the campaign's state, the claim, the guardrails, a send slot, the
    /// deadline again, then SES; each step may end it (`Done`) or return it (`Retry`).
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
        let state = match self.campaign_state(&job, record).await {
            Ok(state) => state,
            Err(outcome) => return outcome,
        };
        let (mut claim, send_errors) = match self.claim(&job, message_id, invocation).await {
            Ok(claimed) => claimed,
            Err(outcome) => return outcome,
        };
        claim.deadline_ms = state.guardrails.deadline_ms;
        let last_receive = self.last_receive(record);

        // Exactly one mailbox, encoded as SES takes it; anything else never reaches SES (nor
        // counts towards a frequency cap: the guard does not count it).
        let recipient = address::parse(&job.to);
        if let Err(outcome) = self
            .guarded(&job, &claim, &state.guardrails, record, recipient.is_ok())
            .await
        {
            return outcome;
        }
        let recipient = match recipient {
            Ok(recipient) => recipient,
            Err(err) => return self.fail(&claim, &err.to_string()).await,
        };
        if let Err(outcome) = self
            .slot_under_claim(&claim, ticket, record, invocation, stop)
            .await
        {
            return outcome;
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

    /// The guardrails under the claim; Err: what they decided instead of a send (skipped,
    /// deferred to the end of quiet hours, or back for a read that failed).
    async fn guarded(
        &self,
        job: &EmailJob,
        claim: &Claim,
        guardrails: &CampaignGuardrails,
        record: &SqsMessage,
        deliverable: bool,
    ) -> Result<(), Result<Done, Retry>> {
        let attempt_ms = claim.started_at_ms as i64;
        match self.guard(job, guardrails, deliverable, attempt_ms).await {
            Ok(guard::Verdict::Send) => Ok(()),
            Ok(guard::Verdict::Skip(skip)) => Err(self.skip(claim, skip).await),
            Ok(guard::Verdict::Defer { until_ms }) => Err(self
                .defer(claim, record, job.user_message(), until_ms)
                .await),
            // Every attempt would fail the same way: decided now, with the reason.
            Err(err @ guard::GuardError::Unreadable(_)) => {
                tracing::error!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "the standing of an email that waited cannot be read again; not sent");
                Err(self.fail(claim, &err.to_string()).await)
            }
            Err(err) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "guardrails not read; will retry");
                self.give_back(claim, &err.to_string(), false, self.last_receive(record))
                    .await;
                Err(Err(Retry::error(None)))
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
#[cfg(test)]
mod tests;
