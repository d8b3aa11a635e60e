//! The ledger's writes, each one conditional `UpdateItem` whose refusal is explained by
//! the record as it was (ALL_OLD from the same call): the claim, the marks under it, the
//! cancellation and the duplicate count.

use super::{Conditional, SendsLedger};
use crate::adapters::item::{expires_after, n, number, s, text, Item};
use crate::domain::guardrails::Skip;
use crate::domain::ledger::{
    epoch_ms, Claim, ClaimOutcome, LedgerError, LedgerWrite, LostClaim, Reclaim, Refusal, SendKey,
    SendStatus,
};
use crate::ports::{Marked, SendLedger};
use aws_sdk_dynamodb::types::ReturnValue;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

impl SendLedger for SendsLedger {
    /// Claims (userId, campaignId) for one attempt with ONE conditional write: it succeeds on
    /// no record, an IN_PROGRESS record whose lease has ended, a DEAD_LETTERED one (its
    /// message came back by a redrive or a resend), and on FAILED when the operator asked to
    /// include failed sends; never on SENT.
    async fn claim(&self, claim: &Claim, reclaim: Reclaim) -> Result<ClaimOutcome, LedgerError> {
        let (update, condition, values) = claim_write(claim, reclaim, self.retention);
        let outcome = self
            .records
            .update(
                LedgerWrite::Claim,
                &claim.key,
                &update,
                &condition,
                values,
                // The attempt number and the send errors so far are read from it.
                ReturnValue::AllNew,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(item) => ClaimOutcome::Claimed {
                attempt: item
                    .as_ref()
                    .and_then(|i| number::<u64>(i, "attempt"))
                    .unwrap_or(1),
                send_errors: item
                    .as_ref()
                    .and_then(|i| number::<u64>(i, "sendErrors"))
                    .unwrap_or(0),
            },
            Conditional::Refused(old) => ClaimOutcome::Refused(refusal(&old, claim.started_at_ms)),
        })
    }

    /// SENT with the SES message id, only while this attempt still holds the claim.
    async fn mark_sent(&self, claim: &Claim, ses_message_id: &str, late_ms: Option<i64>) -> Marked {
        let mut values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":id".into(), s(ses_message_id)),
        ]);
        let mut set = String::from(
            "#status = :sent, sesMessageId = :id, completedAt = :now, updatedAt = :now",
        );
        // A local-time email: how long after its user's local send time it went.
        if let Some(late) = late_ms {
            values.insert(":late".into(), n(late));
            set.push_str(", lateMs = :late");
        }
        self.finish(
            LedgerWrite::MarkSent,
            claim,
            &set,
            "REMOVE leaseUntil, lastError",
            values,
        )
        .await
    }

    /// FAILED with the reason (a permanent error), only while this attempt holds the claim.
    async fn mark_failed(&self, claim: &Claim, reason: &str) -> Marked {
        let values = HashMap::from([
            (":failed".into(), s(SendStatus::Failed.as_str())),
            (":reason".into(), s(reason)),
        ]);
        let set = "#status = :failed, lastError = :reason, completedAt = :now, updatedAt = :now";
        self.finish(
            LedgerWrite::MarkFailed,
            claim,
            set,
            "REMOVE leaseUntil",
            values,
        )
        .await
    }

    /// Ends the lease now (the email was not accepted), so a retry need not wait it out.
    /// `send_error`: the service answered with an error (not throttling), counted in
    /// `sendErrors` so that one that repeats ends FAILED.
    async fn release(&self, claim: &Claim, reason: &str, send_error: bool) -> Marked {
        let mut values = HashMap::from([(":reason".into(), s(reason)), (":zero".into(), n(0))]);
        let set = "leaseUntil = :zero, lastError = :reason, updatedAt = :now";
        let mut tail = "";
        if send_error {
            values.insert(":one".into(), n(1));
            tail = "ADD sendErrors :one";
        }
        self.finish(LedgerWrite::Release, claim, set, tail, values)
            .await
    }

    /// DEAD_LETTERED with the reason: this was the message's last receive, so it goes to the
    /// DLQ now; the record says so instead of staying IN_PROGRESS.
    async fn mark_dead_lettered(&self, claim: &Claim, reason: &str) -> Marked {
        let values = HashMap::from([
            (":dead".into(), s(SendStatus::DeadLettered.as_str())),
            (":reason".into(), s(reason)),
        ]);
        let set = "#status = :dead, lastError = :reason, updatedAt = :now";
        self.finish(
            LedgerWrite::MarkDeadLettered,
            claim,
            set,
            "REMOVE leaseUntil",
            values,
        )
        .await
    }

    /// SKIPPED with the guardrail's reason, only while this attempt holds the claim.
    async fn mark_skipped(&self, claim: &Claim, skip: Skip) -> Marked {
        let values = HashMap::from([
            (":skipped".into(), s(SendStatus::Skipped.as_str())),
            (":reason".into(), s(skip.as_str())),
        ]);
        let set = "#status = :skipped, skipReason = :reason, completedAt = :now, updatedAt = :now";
        self.finish(
            LedgerWrite::MarkSkipped,
            claim,
            set,
            "REMOVE leaseUntil, lastError",
            values,
        )
        .await
    }

    /// CANCELLED, on no record, a DEAD_LETTERED one, or an IN_PROGRESS one whose lease has
    /// ended; a SENT or FAILED record is final already, and a live lease's attempt decides.
    async fn cancel_send(&self, key: &SendKey, at_ms: u64) -> Result<bool, LedgerError> {
        let expires = expires_after(self.retention);
        let mut values = HashMap::from([
            (":cancelled".into(), s(SendStatus::Cancelled.as_str())),
            (":in_progress".into(), s(SendStatus::InProgress.as_str())),
            (
                ":dead_lettered".into(),
                s(SendStatus::DeadLettered.as_str()),
            ),
            (":now".into(), n(at_ms)),
            (":expires".into(), n(expires)),
        ]);
        let condition = "attribute_not_exists(#status) OR #status = :dead_lettered \
                         OR (#status = :in_progress AND leaseUntil <= :now)";
        let update = format!(
            "SET #status = :cancelled, cancelledAt = :now, updatedAt = :now, \
             expiresAt = if_not_exists(expiresAt, :expires){} REMOVE leaseUntil",
            index_entry(LedgerWrite::Cancel, key, &mut values)
        );
        let outcome = self
            .records
            .update(
                LedgerWrite::Cancel,
                key,
                &update,
                condition,
                values,
                ReturnValue::None,
            )
            .await?;
        Ok(matches!(outcome, Conditional::Done(_)))
    }

    /// Counts a suppressed duplicate on a SENT record, so operators see how often the
    /// ledger saved a user from a second email. Only on SENT: it never creates a record.
    async fn note_duplicate(&self, key: &SendKey) -> Result<(), LedgerError> {
        let values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":one".into(), n(1)),
        ]);
        self.records
            .update(
                LedgerWrite::NoteDuplicate,
                key,
                "ADD duplicatesSuppressed :one",
                "#status = :sent",
                values,
                ReturnValue::None,
            )
            .await
            .map(|_| ())
    }
}

impl SendsLedger {
    /// A write under the claim: `SET set` (and the index key when `write` sets it), then
    /// `tail` (REMOVE, ADD).
    async fn finish(
        &self,
        write: LedgerWrite,
        claim: &Claim,
        set: &str,
        tail: &str,
        mut values: Item,
    ) -> Marked {
        values.insert(":in_progress".into(), s(SendStatus::InProgress.as_str()));
        values.insert(":token".into(), s(&claim.token));
        values.insert(":now".into(), n(epoch_ms(SystemTime::now())));
        let update = format!(
            "SET {set}{} {tail}",
            index_entry(write, &claim.key, &mut values)
        );
        let condition = "#status = :in_progress AND claimToken = :token";
        let outcome = self
            .records
            .update(
                write,
                &claim.key,
                &update,
                condition,
                values,
                // Nothing is read from the record written: do not ship it back.
                ReturnValue::None,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(_) => Ok(()),
            Conditional::Refused(old) => Err(LostClaim {
                status: text(&old, "status").as_deref().and_then(SendStatus::parse),
                token: text(&old, "claimToken"),
                ses_message_id: text(&old, "sesMessageId"),
            }),
        })
    }
}

/// The claim's one conditional write: its update, its condition (the statuses `reclaim`
/// lets it take over among them) and their values.
fn claim_write(claim: &Claim, reclaim: Reclaim, retention: Duration) -> (String, String, Item) {
    let now = claim.started_at_ms;
    let expires = expires_after(retention);
    let mut condition = String::from(
        "attribute_not_exists(#status) OR (#status = :in_progress AND leaseUntil <= :now) \
         OR #status = :dead_lettered",
    );
    let mut values: Item = HashMap::from([
        (":in_progress".into(), s(SendStatus::InProgress.as_str())),
        (
            ":dead_lettered".into(),
            s(SendStatus::DeadLettered.as_str()),
        ),
        (":now".into(), n(now)),
        (":lease".into(), n(claim.lease_until_ms)),
        (":token".into(), s(&claim.token)),
        (":expires".into(), n(expires)),
        (":zero".into(), n(0)),
        (":one".into(), n(1)),
    ]);
    if reclaim.failed {
        // The held-out stay out, whatever the campaign's record says later.
        condition
            .push_str(" OR #status = :failed OR (#status = :skipped AND skipReason <> :held_out)");
        values.insert(":failed".into(), s(SendStatus::Failed.as_str()));
        values.insert(":skipped".into(), s(SendStatus::Skipped.as_str()));
        values.insert(":held_out".into(), s(Skip::HeldOut.as_str()));
    }
    if reclaim.cancelled {
        condition.push_str(" OR #status = :cancelled");
        values.insert(":cancelled".into(), s(SendStatus::Cancelled.as_str()));
    }
    let mut update = String::from(
        "SET #status = :in_progress, startedAt = :now, leaseUntil = :lease, \
         claimToken = :token, updatedAt = :now, expiresAt = :expires, \
         attempt = if_not_exists(attempt, :zero) + :one",
    );
    update.push_str(index_entry(LedgerWrite::Claim, &claim.key, &mut values));
    // The experiment's variant this attempt sends (a retry sends the same one).
    if let Some(variant) = &claim.variant {
        update.push_str(", variant = :variant");
        values.insert(":variant".into(), s(variant));
    }
    if let Some(zone) = &claim.zone {
        update.push_str(", userZone = :zone");
        values.insert(":zone".into(), s(zone));
    }
    update.push_str(" REMOVE skipReason");
    (update, condition, values)
}

/// Why a claim was refused, from the record as it was.
fn refusal(old: &Item, now: u64) -> Refusal {
    let status = text(old, "status").as_deref().and_then(SendStatus::parse);
    match status {
        Some(SendStatus::Sent) => Refusal::AlreadySent,
        Some(SendStatus::Failed) => Refusal::Failed {
            reason: text(old, "lastError").unwrap_or_default(),
        },
        Some(SendStatus::Cancelled) => Refusal::Cancelled,
        Some(SendStatus::Skipped) => Refusal::Skipped {
            reason: text(old, "skipReason").unwrap_or_default(),
        },
        // IN_PROGRESS (or unreadable): treat as held; it comes back later.
        _ => Refusal::Busy {
            lease_until_ms: number::<u64>(old, "leaseUntil").unwrap_or(now),
        },
    }
}

/// `, campaignShard = :shard` (its value added to `values`) when `write` puts the record in
/// the campaign index (`LedgerWrite::indexes`), else nothing: the one place every write of
/// the sends table asks.
pub(super) fn index_entry(write: LedgerWrite, key: &SendKey, values: &mut Item) -> &'static str {
    if !write.indexes() {
        return "";
    }
    values.insert(":shard".into(), s(key.campaign_shard()));
    ", campaignShard = :shard"
}
