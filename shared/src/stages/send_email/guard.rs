//! The guardrails SendEmail applies under its claim, before it takes a send slot: the
//! campaign's deadline and holdout, the user's quiet hours, and the frequency caps across
//! campaigns (`domain::guardrails`). Decided once: the record ends SKIPPED with the reason,
//! and no retry of it is sent later.

use super::outcome::{Again, Done, Retry};
use super::SendEmail;
use crate::domain::guardrails::{held_out, CampaignGuardrails, CapCheck, QuietPolicy, Skip};
use crate::domain::ledger::{epoch_ms, Claim, LedgerError, SendKey};
use crate::domain::local_time;
use crate::domain::messages::EmailJob;
use crate::ports::{CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger};
use aws_lambda_events::event::sqs::SqsMessage;
use std::time::Duration;

/// The longest a quiet-hours return hides a message: under SQS's 12 hours from its receive.
const MAX_QUIET_WAIT: Duration = Duration::from_secs(12 * 3600 - 600);

/// Conditional writes of a user's cap history lost in a row to other campaigns' writes
/// before the record is retried later (each loss means another email was just counted).
const CAP_WRITE_ATTEMPTS: u32 = 5;

pub(super) enum Verdict {
    Send,
    Skip(Skip),
    /// Inside the user's quiet hours (policy defer): hidden on the queue for this long.
    Defer(Duration),
}

impl<M: Mailer, L: SendLedger, Q: RetryQueue, S: CampaignStates, B: RateBucket>
    SendEmail<M, L, Q, S, B>
{
    /// `deliverable`: the address is one SES takes (else the email fails, and neither quiet
    /// hours nor caps are asked).
    pub(super) async fn guard(
        &self,
        job: &EmailJob,
        guardrails: &CampaignGuardrails,
        deliverable: bool,
    ) -> Result<Verdict, LedgerError> {
        let now_ms = epoch_ms(crate::runtime::clock::now()) as i64;
        if !self.still_before_deadline(job, guardrails).await? {
            return Ok(Verdict::Skip(Skip::Expired));
        }
        if held_out(
            job.campaign_id.as_str(),
            &job.user_id,
            guardrails.holdout_bp,
        ) {
            return Ok(Verdict::Skip(Skip::HeldOut));
        }
        let caps = &self.config.caps;
        let capped = caps.apply_to(job.topic.as_str(), guardrails);
        if !deliverable || (self.config.quiet_hours.is_none() && !capped) {
            return Ok(Verdict::Send);
        }
        let tz = job
            .zone
            .as_deref()
            .and_then(local_time::zone)
            .unwrap_or_else(|| self.config.fallback_zone.zone());
        // GetUsers let the user go after their quiet hours; a backlog may still carry the
        // send into the next ones.
        if let Some(quiet) = &self.config.quiet_hours {
            if let Some(until) = quiet.quiet_until(now_ms, &tz) {
                return Ok(match quiet.policy {
                    QuietPolicy::Skip => Verdict::Skip(Skip::QuietHours),
                    QuietPolicy::Defer => {
                        Verdict::Defer(Duration::from_millis((until - now_ms) as u64))
                    }
                });
            }
        }
        if !capped {
            return Ok(Verdict::Send);
        }
        let (campaign, topic) = (job.campaign_id.as_str(), job.topic.as_str());
        for _ in 0..CAP_WRITE_ATTEMPTS {
            let history = self.ledger.cap_history(&job.user_id).await?;
            match caps.check(&history, campaign, topic, now_ms, &tz) {
                CapCheck::Counted => return Ok(Verdict::Send),
                CapCheck::Capped(rule) => {
                    tracing::info!(campaign, user = %job.user_id, rule, "frequency cap reached; not sent");
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
        })
    }

    /// The claim given back and the record hidden until the user's quiet hours end: one
    /// receive, not a message every 15 minutes. SQS hides a received message for at most
    /// 12 hours from its receive, and a return must never push it to the DLQ: near the
    /// receive limit it goes back as a fresh copy (15 minutes at most) instead.
    pub(super) async fn defer(
        &self,
        claim: &Claim,
        record: &SqsMessage,
        wait: Duration,
    ) -> Result<Done, Retry> {
        // Rounded up to the next second, so it never comes back a moment early.
        let wait = Duration::from_secs(wait.as_secs() + 1).min(MAX_QUIET_WAIT);
        if self.near_receive_limit(record)
            && self
                .requeue(record, wait.min(Duration::from_secs(900)))
                .await
        {
            self.give_back(claim, "quiet hours", false, false).await;
            return Ok(Done::Requeued);
        }
        self.give_back(claim, "quiet hours", false, false).await;
        Err(Retry {
            why: Again::Quiet,
            delay: Some(wait),
        })
    }

    /// Whether the campaign's deadline is still ahead. The cached state may be up to
    /// `CAMPAIGN_STATE_TTL` old, so a passed deadline is read again from the table: a start
    /// that just moved it must count before a user is recorded expired.
    pub(super) async fn still_before_deadline(
        &self,
        job: &EmailJob,
        cached: &CampaignGuardrails,
    ) -> Result<bool, LedgerError> {
        let now_ms = epoch_ms(crate::runtime::clock::now()) as i64;
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
