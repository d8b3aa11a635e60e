//! Send records for the SES events and unsubscribes.

use crate::domain::ledger::{Engagement, LedgerError, SendKey, SendStatus};
use crate::domain::topics::TopicId;
use crate::ports::{PendingLeaves, SendRecordNotes};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// A send record as the SES events see it: its status and the engagements noted on it.
type Noted = (SendStatus, Vec<Engagement>);

/// A pending leave: when left, and when the topic was chosen again.
type Leave = (u64, Option<u64>);

/// Send records for the SES events and unsubscribes, by (user, campaign).
#[derive(Default)]
pub struct MemoryRecords {
    pub records: Mutex<HashMap<(String, String), Noted>>,
    /// Every call of the port (each a DynamoDB request on AWS).
    pub calls: AtomicU64,
    /// Pending leaves by (user, topic): when left, when chosen again.
    pub leaves: Mutex<HashMap<(String, String), Leave>>,
    /// Every call fails (DynamoDB away).
    pub failing: AtomicBool,
}

impl MemoryRecords {
    pub fn with(user: &str, campaign: &str, status: SendStatus) -> Self {
        let records = Self::default();
        crate::runtime::lock(&records.records)
            .insert((user.into(), campaign.into()), (status, Vec::new()));
        records
    }

    pub fn get(&self, user: &str, campaign: &str) -> Option<Noted> {
        crate::runtime::lock(&self.records)
            .get(&(user.into(), campaign.into()))
            .cloned()
    }
}

impl MemoryRecords {
    /// Counts a call; fails it while `failing`.
    fn called(&self, operation: &'static str) -> Result<(), LedgerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.failing.load(Ordering::SeqCst) {
            true => Err(LedgerError {
                table: "sends".into(),
                operation,
                detail: "unavailable".into(),
            }),
            false => Ok(()),
        }
    }
}

impl PendingLeaves for MemoryRecords {
    async fn record_leave(
        &self,
        key: &SendKey,
        topic: &TopicId,
        at_ms: u64,
    ) -> Result<(), LedgerError> {
        self.called("record leave")?;
        let mut leaves = crate::runtime::lock(&self.leaves);
        let left = leaves
            .entry((key.user_id.clone(), topic.to_string()))
            .or_insert((at_ms, None));
        left.0 = left.0.max(at_ms);
        Ok(())
    }

    async fn rejoined(
        &self,
        user_id: &str,
        topic: &TopicId,
        at_ms: u64,
    ) -> Result<(), LedgerError> {
        self.called("rejoined")?;
        if let Some(left) =
            crate::runtime::lock(&self.leaves).get_mut(&(user_id.to_owned(), topic.to_string()))
        {
            left.1 = Some(at_ms);
        }
        Ok(())
    }

    async fn standing_leaves(
        &self,
        users: &[String],
        topic: &TopicId,
    ) -> Result<HashSet<String>, LedgerError> {
        self.called("standing leaves")?;
        let leaves = crate::runtime::lock(&self.leaves);
        Ok(users
            .iter()
            .filter(|u| {
                leaves
                    .get(&((*u).clone(), topic.to_string()))
                    .is_some_and(|(left, rejoined)| rejoined.is_none_or(|r| r < *left))
            })
            .cloned()
            .collect())
    }
}

impl SendRecordNotes for MemoryRecords {
    async fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        _at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        self.called("note")?;
        let mut records = crate::runtime::lock(&self.records);
        Ok(records
            .get_mut(&(key.user_id.clone(), key.campaign_id().to_owned()))
            .map(|(status, noted)| {
                for what in std::iter::once(what).chain(what.implies()) {
                    if !noted.contains(&what) {
                        noted.push(what);
                    }
                }
                *status
            }))
    }

    async fn status_of(&self, key: &SendKey) -> Result<Option<SendStatus>, LedgerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .get(&key.user_id, key.campaign_id())
            .map(|(status, _)| status))
    }

    async fn reconcile_sent(
        &self,
        key: &SendKey,
        _ses_message_id: &str,
        _at_ms: u64,
    ) -> Result<bool, LedgerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut records = crate::runtime::lock(&self.records);
        Ok(
            match records.get_mut(&(key.user_id.clone(), key.campaign_id().to_owned())) {
                Some((status, _))
                    if matches!(
                        status,
                        SendStatus::InProgress | SendStatus::DeadLettered | SendStatus::Skipped
                    ) =>
                {
                    *status = SendStatus::Sent;
                    true
                }
                _ => false,
            },
        )
    }
}
