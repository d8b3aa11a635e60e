//! The guardrails SendEmail applies under its claim, before it takes a send slot: the
//! campaign's deadline and holdout, the user's quiet hours, and the frequency caps across
//! campaigns (`domain::guardrails`). Decided once: the record ends SKIPPED with the reason,
//! and no retry of it is sent later.

use super::SendEmail;
use crate::domain::guardrails::{held_out, CampaignGuardrails, CapCheck, QuietPolicy, Skip};
use crate::domain::ledger::{epoch_ms, LedgerError};
use crate::domain::local_time;
use crate::domain::messages::EmailJob;
use crate::ports::{CampaignStates, Mailer, RateBucket, RetryQueue, SendLedger};
use std::time::Duration;

/// Conditional writes of a user's cap history lost in a row to other campaigns' writes
/// before the record is retried later (each loss means another email was just counted).
const CAP_WRITE_ATTEMPTS: u32 = 5;

pub(super) enum Verdict {
    Send,
    Skip(Skip),
    /// Inside the user's quiet hours (policy defer): back on the queue for this long.
    Defer(Duration),
}

impl<M: Mailer, L: SendLedger, Q: RetryQueue, S: CampaignStates, B: RateBucket>
    SendEmail<M, L, Q, S, B>
{
    pub(super) async fn guard(
        &self,
        job: &EmailJob,
        guardrails: &CampaignGuardrails,
    ) -> Result<Verdict, LedgerError> {
        let now_ms = epoch_ms(crate::runtime::clock::now()) as i64;
        if guardrails.expired(now_ms) {
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
        if self.config.quiet_hours.is_none() && !capped {
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
}

#[cfg(test)]
mod tests {
    use crate::domain::guardrails::{CapCheck, FrequencyCaps};
    use crate::ports::memory::MemoryLedger;
    use crate::ports::CapLedger;

    /// Two campaigns read the same history for one user under a cap of one: the first write
    /// wins, the second is refused by the version, reads again and finds the cap reached.
    #[tokio::test]
    async fn two_campaigns_racing_for_one_user_pass_a_cap_of_one_once() {
        let ledger = MemoryLedger::default();
        let caps = FrequencyCaps::parse("1/16h", "").unwrap();
        let utc = jiff::tz::TimeZone::UTC;
        let now = 1_795_000_000_000;
        let a_read = ledger.cap_history("u1").await.unwrap();
        let b_read = ledger.cap_history("u1").await.unwrap();
        let CapCheck::Allowed(a_next) = caps.check(&a_read, "a", "digest", now, &utc) else {
            panic!("a is allowed on an empty history")
        };
        let CapCheck::Allowed(b_next) = caps.check(&b_read, "b", "digest", now, &utc) else {
            panic!("b read the same empty history")
        };
        assert!(ledger.write_cap_history("u1", &a_next, 0).await.unwrap());
        assert!(!ledger.write_cap_history("u1", &b_next, 0).await.unwrap());
        let b_again = ledger.cap_history("u1").await.unwrap();
        assert_eq!(
            caps.check(&b_again, "b", "digest", now + 1, &utc),
            CapCheck::Capped("1/16h".into())
        );
        // a's retry finds its own email counted, and goes on.
        assert_eq!(
            caps.check(&b_again, "a", "digest", now + 1, &utc),
            CapCheck::Counted
        );
    }
}
