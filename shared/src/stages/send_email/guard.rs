//! The guardrails SendEmail applies under its claim, before it takes a send slot: the
//! campaign's deadline and holdout, the person's standing for an email that waited
//! (`standing`), the user's quiet hours (asked again right before each SES call), and the
//! frequency caps across campaigns (`domain::guardrails`), counted by the attempt that
//! sends. Decided once: the record ends SKIPPED with the reason, and no retry of it is sent
//! later; or, in quiet hours that defer, the user waits in the waiting room for their end
//! (`defer`).

use super::outcome::{Again, Done, Retry};
use super::standing::{self, Standings};
use super::SendEmail;
use crate::domain::campaign::CampaignId;
use crate::domain::delivery::{self, Quiet, Recipient, Rules, DELAY_WITHIN_MS};
use crate::domain::guardrails::{CampaignGuardrails, CapCheck, Skip};
use crate::domain::ledger::{Claim, LedgerError, SendKey};
use crate::domain::local_time::{self, ZoneField};
use crate::domain::messages::EmailJob;
use crate::domain::messages::UserMessage;
use crate::domain::topics::Topics;
use crate::ports::{
    CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger, StoreError, SubscriberError,
    WaitingRoom, MAX_DELAY_SECONDS,
};
use crate::stages::get_users::schedule_slot;
use aws_lambda_events::event::sqs::SqsMessage;
use jiff::tz::TimeZone;
use std::collections::HashMap;
use std::time::Duration;

/// Conditional writes of a user's cap history lost in a row to other campaigns' writes
/// before the record is retried later (each loss means another email was just counted).
const CAP_WRITE_ATTEMPTS: u32 = 5;

pub(super) enum Verdict {
    Send,
    Skip(Skip),
    /// Inside the user's quiet hours (policy defer), which end at `until_ms`.
    Defer {
        until_ms: i64,
    },
}

impl From<Quiet> for Verdict {
    fn from(quiet: Quiet) -> Self {
        match quiet {
            Quiet::Skipped => Verdict::Skip(Skip::QuietHours),
            Quiet::Deferred(until_ms) => Verdict::Defer { until_ms },
        }
    }
}

/// What stopped the guard from deciding: the record is retried, unless it never can be.
#[derive(Debug, thiserror::Error)]
pub(super) enum GuardError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The person's standing (read again for an email that waited) was not read.
    #[error("standing not read again: {0}")]
    Standing(#[from] StoreError),
    /// Nor ever will be (the campaign's recipients cannot be found): the email is FAILED.
    #[error("standing cannot be read again: {0}")]
    Unreadable(String),
}

impl From<SubscriberError> for GuardError {
    fn from(err: SubscriberError) -> Self {
        match err {
            SubscriberError::Store(err) => Self::Standing(err),
            SubscriberError::Lasting(why) => Self::Unreadable(why),
        }
    }
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
    /// `deliverable`: the address is one SES takes (else the email fails, and neither quiet
    /// hours nor caps are asked). `attempt_ms`: when this attempt claimed the record (a cap
    /// reservation older than that is an earlier attempt's).
    pub(super) async fn guard(
        &self,
        job: &EmailJob,
        guardrails: &CampaignGuardrails,
        deliverable: bool,
        attempt_ms: i64,
    ) -> Result<Verdict, GuardError> {
        // Deadlines, the standing's wait and the caps are on the wall clock (the claim's
        // `attempt_ms` is); quiet hours on the campaign's clock, as GetUsers reads them.
        let now_ms = self.clock.wall_ms();
        // The delivery rule at the send: the holdout, and quiet hours now in the user's zone
        // (GetUsers let the user go after them; a backlog may still carry the send into the
        // next ones).
        let zone = job.zone.clone().map_or(ZoneField::Missing, ZoneField::Text);
        let rules = Rules {
            local_time: None,
            quiet_hours: self.config.quiet_hours,
            fallback_zone: &self.config.fallback_zone,
            holdout_bp: guardrails.holdout_bp,
        };
        let user = Recipient {
            campaign_id: job.campaign_id.as_str(),
            user_id: &job.user_id,
            zone: &zone,
            rest_until_ms: None,
        };
        let decision = delivery::decide(&rules, &user, self.clock.now_ms());
        // The holdout first: a held-out user stays held_out after the deadline too (an
        // `expired` one would be sent by a resend that includes the skipped).
        if decision.held_out {
            return Ok(Verdict::Skip(Skip::HeldOut));
        }
        if !self.still_before_deadline(job, guardrails).await? {
            return Ok(Verdict::Skip(Skip::Expired));
        }
        // Read again only for an email that waited since it was rendered: the person may
        // have chosen since. A topic no longer declared has no default to read it by.
        if standing::waited(job.rendered_at_ms, now_ms) {
            if let Some(topic) = Topics::builtin().find(&job.topic) {
                if let Some(skip) = self.standings.left(&job.key(), topic).await? {
                    tracing::info!(campaign = %job.campaign_id, user = %job.user_id, reason = skip.as_str(), "standing changed since the email was rendered; not sent");
                    return Ok(Verdict::Skip(skip));
                }
            }
        }
        if !deliverable {
            return Ok(Verdict::Send);
        }
        if let Some(quiet) = decision.quiet {
            return Ok(quiet.into());
        }
        if !self.config.caps.apply_to(job.topic.as_str(), guardrails) {
            return Ok(Verdict::Send);
        }
        self.count_in_caps(job, &decision.tz, now_ms, attempt_ms)
            .await
    }

    /// Counts the email in the user's cap history before the send, or skips it capped.
    async fn count_in_caps(
        &self,
        job: &EmailJob,
        tz: &TimeZone,
        now_ms: i64,
        attempt_ms: i64,
    ) -> Result<Verdict, GuardError> {
        let caps = &self.config.caps;
        let (campaign, topic) = (job.campaign_id.as_str(), job.topic.as_str());
        for _ in 0..CAP_WRITE_ATTEMPTS {
            let mut history = self.ledger.cap_history(&job.user_id).await?;
            // A reservation an earlier attempt made did not send (throttled, paced,
            // deferred): it is no count of a sent email, so the rules are asked again without
            // it, and the email is counted at this attempt's instant.
            let stale = history
                .entries
                .iter()
                .any(|e| e.campaign == campaign && e.at_ms < attempt_ms);
            history
                .entries
                .retain(|e| e.campaign != campaign || e.at_ms >= attempt_ms);
            match caps.check(&history, campaign, topic, now_ms, tz) {
                CapCheck::Counted => return Ok(Verdict::Send),
                CapCheck::Capped(rule) => {
                    tracing::info!(campaign, user = %job.user_id, rule, "frequency cap reached; not sent");
                    if stale {
                        self.uncount(&job.key()).await;
                    }
                    return Ok(Verdict::Skip(Skip::FrequencyCap));
                }
                // Counted before the send: two campaigns that read the same history cannot
                // both write it, so the second reads again and finds the first's email.
                CapCheck::Allowed(next) => {
                    if self
                        .ledger
                        .write_cap_history(&job.user_id, &next, caps.reach_ms())
                        .await?
                    {
                        return Ok(Verdict::Send);
                    }
                }
            }
        }
        Err(LedgerError {
            table: self.config.sends_table_name.clone(),
            operation: "write frequency caps",
            detail: format!("{CAP_WRITE_ATTEMPTS} writes in a row lost to other campaigns'"),
        }
        .into())
    }

    /// The user's zone (`EmailJob::zone`): theirs, or the stack's fallback (quiet hours and
    /// calendar days).
    pub(super) fn zone_of(&self, zone: Option<&str>) -> TimeZone {
        zone.and_then(local_time::zone)
            .unwrap_or_else(|| self.config.fallback_zone.zone())
    }

    /// What quiet hours say now in `tz` (None: not quiet there, or none set): the delivery
    /// rule's (`delivery::quiet_at`), asked by the guard and again right before each SES call.
    pub(super) fn quiet(&self, tz: &TimeZone) -> Option<Quiet> {
        delivery::quiet_at(self.config.quiet_hours, tz, self.clock.now_ms())
    }

    /// The claim given back and the user handed back to the waiting room, held for the slot
    /// at the end of their quiet hours and rendered again then (the slot's schedules, as
    /// GetUsers makes them, release it). Not hidden on the queue until then: a hidden
    /// message is in flight, and past SQS's 120,000 in flight per queue no receive returns
    /// anything, for every campaign on it. An end within 15 minutes (SQS's longest delay)
    /// waits on the queue instead, as a fresh copy delayed until then (a delayed message is
    /// not in flight); so does a job rendered before jobs carried their window, 15 minutes at
    /// a time. Acknowledged only once held or copied: a failure returns the record.
    /// `message`: the user's users-queue message (`EmailJob::user_message`).
    pub(super) async fn defer(
        &self,
        claim: &Claim,
        record: &SqsMessage,
        message: Option<UserMessage>,
        until_ms: i64,
    ) -> Result<Done, Retry> {
        // Not sent until they end: a reservation this or an earlier attempt made would cap
        // the person's other emails meanwhile; the return counts it again at its own send.
        self.uncount(&claim.key).await;
        // By the clock that found them quiet.
        let now_ms = self.clock.now_ms();
        if let Some(message) = message.filter(|_| until_ms - now_ms > DELAY_WITHIN_MS) {
            let held = self.hand_back(&message, until_ms).await;
            self.give_back(claim, "quiet hours", false, false).await;
            return match held {
                Ok(()) => Ok(Done::HandedBack {
                    campaign: message.campaign_id,
                    slot_ms: until_ms,
                }),
                Err(err) => {
                    tracing::warn!(campaign = %claim.key.campaign_id(), user = %claim.key.user_id, reason = %err, "could not hand a user in their quiet hours back to the waiting room; will retry");
                    Err(Retry::error(Some(self.backoff(record))))
                }
            };
        }
        // Rounded up to the next second, so it never comes back a moment early.
        let wait = Duration::from_millis((until_ms - now_ms).max(0) as u64 + 1000)
            .min(Duration::from_secs(u64::from(MAX_DELAY_SECONDS)));
        let requeued = self.requeue(record, wait).await;
        self.give_back(claim, "quiet hours", false, false).await;
        if requeued {
            return Ok(Done::Requeued);
        }
        Err(Retry {
            why: Again::Quiet,
            delay: Some(wait),
        })
    }

    /// Holds the user for `slot_ms`, after making sure of the slot's release and sweep
    /// schedules (once per slot and environment): a hold is never left without them.
    async fn hand_back(
        &self,
        message: &UserMessage,
        slot_ms: i64,
    ) -> Result<(), crate::ports::StoreError> {
        let campaign = &message.campaign_id;
        let slot = (campaign.to_string(), slot_ms);
        if !crate::runtime::lock(&self.scheduled).contains(&slot) {
            schedule_slot(
                &self.waiting,
                campaign,
                slot_ms,
                &self.config.release_function_arn,
            )
            .await?;
            crate::runtime::lock(&self.scheduled).insert(slot);
        }
        let body = serde_json::to_string(message).unwrap_or_default();
        self.waiting
            .hold(campaign, slot_ms, &[(message.user_id.clone(), body)])
            .await
    }

    /// Adds a batch's hand-backs to their slots' counts (`mailctl status` shows them held,
    /// and finds them stranded if no release comes). Best effort: the users are held
    /// whatever the count says.
    pub(super) async fn count_quiet_holds(&self, handed_back: HashMap<(CampaignId, i64), u64>) {
        for ((campaign, slot_ms), users) in handed_back {
            if let Err(err) = self
                .waiting
                .record_quiet_holds(&campaign, slot_ms, users)
                .await
            {
                tracing::warn!(%campaign, slot_ms, users, reason = %err, "could not count the users handed back to the waiting room for their quiet hours");
            }
        }
    }

    /// Whether the campaign's deadline is still ahead. The cached state may be up to
    /// `CAMPAIGN_STATE_TTL` old, so a passed deadline is read again from the table: a start
    /// that just moved it must count before a user is recorded expired.
    pub(super) async fn still_before_deadline(
        &self,
        job: &EmailJob,
        cached: &CampaignGuardrails,
    ) -> Result<bool, LedgerError> {
        let now_ms = self.clock.wall_ms();
        if !cached.expired(now_ms) {
            return Ok(true);
        }
        let fresh = self
            .campaigns
            .states()
            .state(job.campaign_id.as_str())
            .await?;
        Ok(!fresh.guardrails.expired(now_ms))
    }

    /// Takes this campaign's email out of the user's cap history: it was counted, and then
    /// not sent (FAILED, or expired while it waited for a slot). Best effort: a history the
    /// write cannot change keeps it, which only holds the user back, never sends twice.
    pub(super) async fn uncount(&self, key: &SendKey) {
        if self.config.caps.rules.is_empty() {
            return;
        }
        for _ in 0..CAP_WRITE_ATTEMPTS {
            let mut history = match self.ledger.cap_history(&key.user_id).await {
                Ok(history) => history,
                Err(err) => {
                    tracing::warn!(campaign = %key.campaign_id, user = %key.user_id, reason = %err, "could not take an unsent email out of the frequency caps");
                    return;
                }
            };
            let before = history.entries.len();
            history.entries.retain(|e| e.campaign != key.campaign_id());
            if history.entries.len() == before {
                return;
            }
            let keep = self.config.caps.reach_ms();
            match self
                .ledger
                .write_cap_history(&key.user_id, &history, keep)
                .await
            {
                Ok(true) => return,
                Ok(false) => continue,
                Err(err) => {
                    tracing::warn!(campaign = %key.campaign_id, user = %key.user_id, reason = %err, "could not take an unsent email out of the frequency caps");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
