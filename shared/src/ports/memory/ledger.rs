//! A ledger with the same conditions as the DynamoDB one (`adapters::sends`).

use crate::domain::guardrails::{CapHistory, Skip};
use crate::domain::ledger::Engagement;
use crate::domain::ledger::{
    Claim, ClaimOutcome, LedgerError, LostClaim, Reclaim, Refusal, SendKey, SendStatus,
};
use crate::ports::{CapLedger, Marked, SendLedger, SendRecordNotes};
use std::collections::HashMap;
use std::sync::Mutex;

/// One send record, as the DynamoDB item holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub status: Option<SendStatus>,
    pub lease_until_ms: Option<u64>,
    pub token: Option<String>,
    pub attempt: u64,
    pub send_errors: u64,
    pub last_error: Option<String>,
    pub ses_message_id: Option<String>,
    pub duplicates_suppressed: u64,
}

#[derive(Default)]
pub struct MemoryLedger {
    records: Mutex<HashMap<(String, String), Record>>,
    /// Each user's frequency-cap history.
    caps: Mutex<HashMap<String, CapHistory>>,
    /// How many of the next writes fail as if the store did not answer.
    failing_writes: Mutex<u32>,
}

impl MemoryLedger {
    pub fn with(user: &str, campaign: &str, record: Record) -> Self {
        let ledger = Self::default();
        ledger.put(user, campaign, record);
        ledger
    }

    pub fn put(&self, user: &str, campaign: &str, record: Record) {
        self.lock()
            .insert((user.to_owned(), campaign.to_owned()), record);
    }

    pub fn get(&self, user: &str, campaign: &str) -> Option<Record> {
        self.lock()
            .get(&(user.to_owned(), campaign.to_owned()))
            .cloned()
    }

    /// The next `n` writes fail (the store does not answer).
    pub fn fail_writes(&self, n: u32) {
        *crate::runtime::lock(&self.failing_writes) = n;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Record>> {
        crate::runtime::lock(&self.records)
    }

    fn unavailable(&self, operation: &'static str) -> Result<(), LedgerError> {
        let mut failing = crate::runtime::lock(&self.failing_writes);
        if *failing == 0 {
            return Ok(());
        }
        *failing -= 1;
        Err(LedgerError {
            table: "memory".into(),
            operation,
            detail: "no answer (injected)".into(),
        })
    }

    /// A write conditioned on holding the claim (status IN_PROGRESS, this token).
    fn finish(
        &self,
        operation: &'static str,
        claim: &Claim,
        change: impl FnOnce(&mut Record),
    ) -> Marked {
        self.unavailable(operation)?;
        let mut records = self.lock();
        let key = (
            claim.key.user_id.clone(),
            claim.key.campaign_id().to_owned(),
        );
        let record = records.entry(key).or_default();
        if record.status != Some(SendStatus::InProgress)
            || record.token.as_deref() != Some(claim.token.as_str())
        {
            return Ok(Err(LostClaim {
                status: record.status,
                token: record.token.clone(),
                ses_message_id: record.ses_message_id.clone(),
            }));
        }
        change(record);
        Ok(Ok(()))
    }
}

impl SendLedger for MemoryLedger {
    async fn claim(&self, claim: &Claim, reclaim: Reclaim) -> Result<ClaimOutcome, LedgerError> {
        self.unavailable("claim")?;
        let mut records = self.lock();
        let key = (
            claim.key.user_id.clone(),
            claim.key.campaign_id().to_owned(),
        );
        let record = records.entry(key).or_default();
        let claimable = match record.status {
            None | Some(SendStatus::DeadLettered) => true,
            Some(SendStatus::InProgress) => {
                record.lease_until_ms.unwrap_or(0) <= claim.started_at_ms
            }
            Some(SendStatus::Failed) => reclaim.failed,
            // The held-out stay out.
            Some(SendStatus::Skipped) => {
                reclaim.failed && record.last_error.as_deref() != Some(Skip::HeldOut.as_str())
            }
            Some(SendStatus::Cancelled) => reclaim.cancelled,
            Some(SendStatus::Sent) => false,
        };
        if !claimable {
            return Ok(ClaimOutcome::Refused(match record.status {
                Some(SendStatus::Sent) => Refusal::AlreadySent,
                Some(SendStatus::Failed) => Refusal::Failed {
                    reason: record.last_error.clone().unwrap_or_default(),
                },
                Some(SendStatus::Cancelled) => Refusal::Cancelled,
                Some(SendStatus::Skipped) => Refusal::Skipped {
                    reason: record.last_error.clone().unwrap_or_default(),
                },
                _ => Refusal::Busy {
                    lease_until_ms: record.lease_until_ms.unwrap_or(claim.started_at_ms),
                },
            }));
        }
        record.status = Some(SendStatus::InProgress);
        record.lease_until_ms = Some(claim.lease_until_ms);
        record.token = Some(claim.token.clone());
        record.attempt += 1;
        Ok(ClaimOutcome::Claimed {
            attempt: record.attempt,
            send_errors: record.send_errors,
        })
    }

    async fn note_duplicate(&self, key: &SendKey) -> Result<(), LedgerError> {
        self.unavailable("note duplicate")?;
        if let Some(r) = self
            .lock()
            .get_mut(&(key.user_id.clone(), key.campaign_id().to_owned()))
        {
            if r.status == Some(SendStatus::Sent) {
                r.duplicates_suppressed += 1;
            }
        }
        Ok(())
    }

    async fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
        _late_ms: Option<i64>,
    ) -> Marked {
        self.finish("mark sent", claim, |r| {
            r.status = Some(SendStatus::Sent);
            r.ses_message_id = Some(ses_message_id.to_owned());
            r.lease_until_ms = None;
            // An earlier attempt's error is no longer the record's story.
            r.last_error = None;
        })
    }

    async fn mark_failed(&self, claim: &Claim, reason: &str) -> Marked {
        self.finish("mark failed", claim, |r| {
            r.status = Some(SendStatus::Failed);
            r.last_error = Some(reason.to_owned());
            r.lease_until_ms = None;
        })
    }

    async fn release(&self, claim: &Claim, reason: &str, send_error: bool) -> Marked {
        self.finish("release", claim, |r| {
            r.lease_until_ms = Some(0);
            r.last_error = Some(reason.to_owned());
            r.send_errors += u64::from(send_error);
        })
    }

    async fn mark_dead_lettered(&self, claim: &Claim, reason: &str) -> Marked {
        self.finish("mark dead-lettered", claim, |r| {
            r.status = Some(SendStatus::DeadLettered);
            r.last_error = Some(reason.to_owned());
            r.lease_until_ms = None;
        })
    }

    /// The reason is kept in `last_error`, as the DynamoDB item keeps it in `skipReason`.
    async fn mark_skipped(&self, claim: &Claim, skip: Skip) -> Marked {
        self.finish("mark skipped", claim, |r| {
            r.status = Some(SendStatus::Skipped);
            r.last_error = Some(skip.as_str().to_owned());
            r.lease_until_ms = None;
        })
    }

    async fn cancel_send(&self, key: &SendKey, at_ms: u64) -> Result<bool, LedgerError> {
        self.unavailable("cancel")?;
        let mut records = self.lock();
        let record = records
            .entry((key.user_id.clone(), key.campaign_id().to_owned()))
            .or_default();
        let cancellable = match record.status {
            None | Some(SendStatus::DeadLettered) => true,
            Some(SendStatus::InProgress) => record.lease_until_ms.unwrap_or(0) <= at_ms,
            Some(
                SendStatus::Sent | SendStatus::Failed | SendStatus::Cancelled | SendStatus::Skipped,
            ) => false,
        };
        if cancellable {
            record.status = Some(SendStatus::Cancelled);
            record.lease_until_ms = None;
        }
        Ok(cancellable)
    }
}

impl CapLedger for MemoryLedger {
    async fn cap_history(&self, user_id: &str) -> Result<CapHistory, LedgerError> {
        self.unavailable("read frequency caps")?;
        Ok(crate::runtime::lock(&self.caps)
            .get(user_id)
            .cloned()
            .unwrap_or_default())
    }

    async fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        _: i64,
    ) -> Result<bool, LedgerError> {
        self.unavailable("write frequency caps")?;
        let mut caps = crate::runtime::lock(&self.caps);
        let stored = caps.entry(user_id.to_owned()).or_default();
        if stored.version != history.version {
            return Ok(false);
        }
        *stored = CapHistory {
            version: history.version + 1,
            entries: history.entries.clone(),
        };
        Ok(true)
    }
}

/// The SES events' side of the same records: the status a note finds (the engagements
/// themselves are not kept), and the reconcile of an attempt SES took.
impl SendRecordNotes for MemoryLedger {
    async fn note(
        &self,
        key: &SendKey,
        _what: Engagement,
        _at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        self.unavailable("note")?;
        self.status_of(key).await
    }

    async fn status_of(&self, key: &SendKey) -> Result<Option<SendStatus>, LedgerError> {
        Ok(self
            .get(&key.user_id, key.campaign_id())
            .and_then(|record| record.status))
    }

    async fn reconcile_sent(
        &self,
        key: &SendKey,
        ses_message_id: &str,
        _at_ms: u64,
    ) -> Result<bool, LedgerError> {
        self.unavailable("reconcile")?;
        let mut records = self.lock();
        let record = records.get_mut(&(key.user_id.clone(), key.campaign_id().to_owned()));
        Ok(match record {
            Some(record)
                if matches!(
                    record.status,
                    Some(SendStatus::InProgress | SendStatus::DeadLettered | SendStatus::Skipped)
                ) =>
            {
                record.status = Some(SendStatus::Sent);
                record.ses_message_id = Some(ses_message_id.to_owned());
                record.lease_until_ms = None;
                record.last_error = None;
                true
            }
            _ => false,
        })
    }
}
