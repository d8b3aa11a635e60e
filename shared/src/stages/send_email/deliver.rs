//! The send under the claim: a slot of the shared rate (`pacing`), SES's call (again at
//! the lower rate after a throttle, never in the user's quiet hours), and what its answer
//! decides for the record.

use super::daily_quota::{Halt, Halted};
use super::outcome::{Again, Done, Retry};
use super::pacing::{NoSlot, Ticket};
use super::standing::Standings;
use super::{SendEmail, MIN_TIME_TO_SEND};
use crate::domain::delivery::Quiet;
use crate::domain::guardrails::Skip;
use crate::domain::ledger::{epoch_ms, Claim};
use crate::domain::messages::UserMessage;
use crate::domain::send_rate::SendRate;
use crate::ports::{
    CampaignStates, Mailer, OutgoingEmail, RateBucket, RetryQueue, SendError, SendLedger,
    WaitingRoom,
};
use crate::runtime::Invocation;
use aws_lambda_events::event::sqs::SqsMessage;
use std::time::Duration;

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
    /// The configured rate: SES's quota is RateControl's to read, and the ceiling it gives is
    /// in the rate item, which the pacer honours (`send_rate::trusted`).
    fn ceiling(&self) -> SendRate {
        SendRate::configured(self.config.send_rate_per_second)
    }

    /// Waits for this environment's next slot of the shared rate.
    async fn take_slot(&self, ticket: Ticket<'_>, invocation: &Invocation) -> Result<(), NoSlot> {
        let ceiling = self.ceiling();
        let latest = invocation.deadline - MIN_TIME_TO_SEND;
        self.pacer.acquire(ticket, &ceiling, latest).await
    }

    /// Waits under the claim for a send slot; Err: what the record comes to when none came
    /// in time, sending stopped meanwhile, or the invocation's time ran short.
    pub(super) async fn slot_under_claim(
        &self,
        claim: &Claim,
        ticket: Ticket<'_>,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
    ) -> Result<(), Result<Done, Retry>> {
        let last_receive = self.last_receive(record);
        match self.take_slot(ticket, invocation).await {
            Ok(()) => {}
            Err(NoSlot::Full(wait)) => {
                // Not an error: the stack is sending as fast as it may; back when it has room,
                // as a new message, so that waiting for the rate never counts a receive
                // towards the DLQ (at a rate of one or two a second it would, constantly).
                let reason = "no send slot before the deadline";
                let requeued = self.requeue(record, wait).await;
                self.give_back(claim, reason, false, last_receive && !requeued)
                    .await;
                if requeued {
                    return Err(Ok(Done::Paced));
                }
                return Err(Err(Retry {
                    why: Again::Paced,
                    delay: Some(wait),
                }));
            }
            Err(NoSlot::Failed(err)) => {
                tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "no send slot; will retry");
                self.give_back(claim, &err.to_string(), false, last_receive)
                    .await;
                return Err(Err(Retry::error(None)));
            }
        }
        match stop.get() {
            Some(Halted::Stopped) => {
                self.give_back(claim, "sending stopped", false, last_receive)
                    .await;
                return Err(Err(self.stopped()));
            }
            Some(Halted::DailyQuota) => return Err(self.hold_for_quota(Some(claim), record).await),
            None => {}
        }
        if invocation.remaining() < MIN_TIME_TO_SEND {
            self.give_back(claim, "deadline too near to send", false, last_receive)
                .await;
            return Err(Err(Retry::error(Some(Duration::ZERO))));
        }
        Ok(())
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
    ) -> Result<Result<String, SendError>, Quiet> {
        loop {
            if let Some(quiet) = zone.and_then(|zone| self.quiet(zone)) {
                return Err(quiet);
            }
            let answer = self.mailer.send(email).await;
            if !matches!(answer, Err(SendError::Throttled(_))) {
                return Ok(answer);
            }
            // Not again after the campaign's deadline: the next attempt records it expired.
            let now = self.clock.wall_ms();
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

    /// Hands the claimed email to SES and decides by its answer (`answered`); or, if the
    /// user's quiet hours began before SES had it, skipped or `again` handed back to the
    /// waiting room.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn deliver(
        &self,
        claim: &Claim,
        email: &OutgoingEmail,
        again: Option<UserMessage>,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
        send_errors: u64,
    ) -> Result<Done, Retry> {
        // Quiet hours are asked again right before each SES call, in the user's zone.
        let zone = self
            .config
            .quiet_hours
            .is_some()
            .then(|| self.zone_of(claim.zone.as_deref()));
        match self
            .send_paced(email, zone.as_ref(), invocation, stop, claim.deadline_ms)
            .await
        {
            Ok(answer) => {
                self.answered(claim, answer, record, invocation, stop, send_errors)
                    .await
            }
            Err(Quiet::Skipped) => self.skip(claim, Skip::QuietHours).await,
            Err(Quiet::Deferred(until_ms)) => self.defer(claim, record, again, until_ms).await,
        }
    }

    /// What SES's answer decides: SENT, FAILED, or back to the queue (throttled, stopped,
    /// not accepted, outcome unknown).
    async fn answered(
        &self,
        claim: &Claim,
        answer: Result<String, SendError>,
        record: &SqsMessage,
        invocation: &Invocation,
        stop: &Halt,
        send_errors: u64,
    ) -> Result<Done, Retry> {
        let last_receive = self.last_receive(record);
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
                self.not_accepted(claim, &reason, record, send_errors).await
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

    /// An error that repeats on every attempt is as good as permanent: after a few, FAILED
    /// with the reason, rather than retries until the DLQ.
    async fn not_accepted(
        &self,
        claim: &Claim,
        reason: &str,
        record: &SqsMessage,
        send_errors: u64,
    ) -> Result<Done, Retry> {
        let errors = send_errors + 1;
        if errors >= u64::from(self.config.max_send_errors) {
            self.uncount(&claim.key).await;
            let reason = format!("{reason} (refused on {errors} attempts)");
            return self.fail(claim, &reason).await;
        }
        tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, %reason, errors, "SES did not accept the email; will retry");
        self.give_back(claim, reason, true, self.last_receive(record))
            .await;
        Err(Retry::error(Some(self.backoff(record))))
    }
}
