//! In-memory stand-ins for the ports, for unit tests of the stages' decisions: a ledger
//! with the same conditions as the DynamoDB one (`adapters::dynamo`), a mailer that answers
//! from a script, a queue that records the retry delays it is asked for, an outbox that
//! keeps what is put on it, send records and subscribers for the SES events, and a user
//! directory (`directory`). The same decisions are proven against the real services by the
//! tests on the local stack.

pub mod directory;
pub mod queues;

pub use queues::{MemoryOutbox, MemoryQueue};

use super::{
    CampaignStates, Change, ControlError, Mailer, Marked, OutgoingEmail, SendError, SendLedger,
    SendRecordNotes, SendingSwitch, StoreError, SubscriberStore, SuppressionReason,
};
use crate::domain::campaign::{Hold, StateChange};
use crate::domain::ledger::{
    Claim, ClaimOutcome, Engagement, LedgerError, LostClaim, Reclaim, Refusal, SendStatus,
};
use std::collections::{HashMap, VecDeque};
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
        *self
            .failing_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = n;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unavailable(&self, operation: &'static str) -> Result<(), LedgerError> {
        let mut failing = self
            .failing_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
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
        let key = (claim.user_id.clone(), claim.campaign_id.clone());
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
        let key = (claim.user_id.clone(), claim.campaign_id.clone());
        let record = records.entry(key).or_default();
        let claimable = match record.status {
            None | Some(SendStatus::DeadLettered) => true,
            Some(SendStatus::InProgress) => {
                record.lease_until_ms.unwrap_or(0) <= claim.started_at_ms
            }
            Some(SendStatus::Failed) => reclaim.failed,
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

    async fn note_duplicate(&self, user_id: &str, campaign_id: &str) -> Result<(), LedgerError> {
        self.unavailable("note duplicate")?;
        if let Some(r) = self
            .lock()
            .get_mut(&(user_id.to_owned(), campaign_id.to_owned()))
        {
            if r.status == Some(SendStatus::Sent) {
                r.duplicates_suppressed += 1;
            }
        }
        Ok(())
    }

    async fn mark_sent(&self, claim: &Claim, ses_message_id: &str) -> Marked {
        self.finish("mark sent", claim, |r| {
            r.status = Some(SendStatus::Sent);
            r.ses_message_id = Some(ses_message_id.to_owned());
            r.lease_until_ms = None;
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

    async fn cancel_send(
        &self,
        user_id: &str,
        campaign_id: &str,
        at_ms: u64,
    ) -> Result<bool, LedgerError> {
        self.unavailable("cancel")?;
        let mut records = self.lock();
        let record = records
            .entry((user_id.to_owned(), campaign_id.to_owned()))
            .or_default();
        let cancellable = match record.status {
            None | Some(SendStatus::DeadLettered) => true,
            Some(SendStatus::InProgress) => record.lease_until_ms.unwrap_or(0) <= at_ms,
            Some(SendStatus::Sent | SendStatus::Failed | SendStatus::Cancelled) => false,
        };
        if cancellable {
            record.status = Some(SendStatus::Cancelled);
            record.lease_until_ms = None;
        }
        Ok(cancellable)
    }
}

/// Campaigns by id: registered ones (RUNNING) and held ones (paused or cancelled), and
/// whether the consumers are stopped (the reputation guard's switch).
#[derive(Default)]
pub struct MemoryCampaigns {
    pub registered: Mutex<HashMap<String, u64>>,
    pub holds: Mutex<HashMap<String, Hold>>,
    pub consumers_stopped: Mutex<bool>,
}

fn test_change() -> StateChange {
    StateChange {
        at_ms: 1,
        by: "operator".into(),
        reason: "test".into(),
    }
}

impl MemoryCampaigns {
    fn holds(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hold>> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cancel(&self, campaign_id: &str) {
        self.holds()
            .insert(campaign_id.to_owned(), Hold::Cancelled(test_change()));
    }

    pub fn pause(&self, campaign_id: &str) {
        self.holds()
            .insert(campaign_id.to_owned(), Hold::Paused(test_change()));
    }

    pub fn hold_of(&self, campaign_id: &str) -> Option<Hold> {
        self.holds().get(campaign_id).cloned()
    }
}

impl CampaignStates for MemoryCampaigns {
    async fn hold(&self, campaign_id: &str) -> Result<Option<Hold>, LedgerError> {
        Ok(self.hold_of(campaign_id))
    }

    async fn register(&self, campaign_id: &str, at_ms: u64) -> Result<(), LedgerError> {
        self.registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(campaign_id.to_owned())
            .or_insert(at_ms);
        Ok(())
    }
}

impl SendingSwitch for MemoryCampaigns {
    async fn stop_consumers(&self) -> Result<usize, ControlError> {
        *self
            .consumers_stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        Ok(3)
    }

    async fn running_campaigns(&self) -> Result<Vec<String>, ControlError> {
        let holds = self.holds();
        let mut running: Vec<String> = self
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|id| !holds.contains_key(*id))
            .cloned()
            .collect();
        running.sort();
        Ok(running)
    }

    async fn pause(&self, campaign_id: &str, change: &StateChange) -> Result<bool, ControlError> {
        let mut holds = self.holds();
        if holds.contains_key(campaign_id) {
            return Ok(false);
        }
        holds.insert(campaign_id.to_owned(), Hold::Paused(change.clone()));
        Ok(true)
    }
}

/// Answers each send with the next scripted result (then accepts), counting the calls.
#[derive(Default)]
pub struct ScriptedMailer {
    script: Mutex<VecDeque<Result<String, SendError>>>,
    pub calls: Mutex<Vec<OutgoingEmail>>,
}

impl ScriptedMailer {
    pub fn answering(results: impl IntoIterator<Item = Result<String, SendError>>) -> Self {
        Self {
            script: Mutex::new(results.into_iter().collect()),
            calls: Mutex::default(),
        }
    }

    pub fn calls(&self) -> Vec<OutgoingEmail> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Mailer for ScriptedMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(email.clone());
        let next = self
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        next.unwrap_or_else(|| Ok("ses-message-id".into()))
    }
}

/// A send record as the SES events see it: its status and the engagements noted on it.
type Noted = (SendStatus, Vec<Engagement>);

/// Send records for the SES events and unsubscribes, by (user, campaign).
#[derive(Default)]
pub struct MemoryRecords {
    pub records: Mutex<HashMap<(String, String), Noted>>,
}

impl MemoryRecords {
    pub fn with(user: &str, campaign: &str, status: SendStatus) -> Self {
        let records = Self::default();
        records
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((user.into(), campaign.into()), (status, Vec::new()));
        records
    }

    pub fn get(&self, user: &str, campaign: &str) -> Option<Noted> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(user.into(), campaign.into()))
            .cloned()
    }
}

impl SendRecordNotes for MemoryRecords {
    async fn note(
        &self,
        user_id: &str,
        campaign_id: &str,
        what: Engagement,
        _at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        Ok(records
            .get_mut(&(user_id.into(), campaign_id.into()))
            .map(|(status, noted)| {
                if !noted.contains(&what) {
                    noted.push(what);
                }
                *status
            }))
    }

    async fn status_of(
        &self,
        user_id: &str,
        campaign_id: &str,
    ) -> Result<Option<SendStatus>, LedgerError> {
        Ok(self.get(user_id, campaign_id).map(|(status, _)| status))
    }

    async fn reconcile_sent(
        &self,
        user_id: &str,
        campaign_id: &str,
        _ses_message_id: &str,
        _at_ms: u64,
    ) -> Result<bool, LedgerError> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        Ok(
            match records.get_mut(&(user_id.into(), campaign_id.into())) {
                Some((status, _))
                    if matches!(status, SendStatus::InProgress | SendStatus::DeadLettered) =>
                {
                    *status = SendStatus::Sent;
                    true
                }
                _ => false,
            },
        )
    }
}

/// Users with their suppression (the first reason kept) and subscription.
#[derive(Default)]
pub struct MemorySubscribers {
    /// user id -> (subscribed, suppression reason)
    pub users: Mutex<HashMap<String, (bool, Option<SuppressionReason>)>>,
}

impl MemorySubscribers {
    pub fn with(users: &[&str]) -> Self {
        let store = Self::default();
        store
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(users.iter().map(|u| (u.to_string(), (true, None))));
        store
    }

    pub fn get(&self, user: &str) -> Option<(bool, Option<SuppressionReason>)> {
        self.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(user)
            .copied()
    }
}

impl SubscriberStore for MemorySubscribers {
    async fn unsubscribe(
        &self,
        user_id: &str,
        _list: &str,
        _campaign_id: &str,
        _at_ms: i64,
    ) -> Result<Change, StoreError> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match users.get_mut(user_id) {
            None => Change::NoSuchUser,
            Some((subscribed, _)) if !*subscribed => Change::AlreadyDone,
            Some((subscribed, _)) => {
                *subscribed = false;
                Change::Made
            }
        })
    }

    async fn suppress(
        &self,
        user_id: &str,
        reason: SuppressionReason,
        _detail: &str,
        _campaign_id: &str,
        _at_ms: i64,
    ) -> Result<Change, StoreError> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match users.get_mut(user_id) {
            None => Change::NoSuchUser,
            Some((_, Some(_))) => Change::AlreadyDone,
            Some((_, suppression)) => {
                *suppression = Some(reason);
                Change::Made
            }
        })
    }
}
