//! Send records for the SES events and unsubscribes.

use crate::domain::ledger::{Engagement, LedgerError, SendKey, SendStatus};
use crate::ports::SendRecordNotes;
use std::collections::HashMap;
use std::sync::Mutex;

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

impl SendRecordNotes for MemoryRecords {
    async fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        _at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        let mut records = crate::runtime::lock(&self.records);
        Ok(records
            .get_mut(&(key.user_id.clone(), key.campaign_id().to_owned()))
            .map(|(status, noted)| {
                if !noted.contains(&what) {
                    noted.push(what);
                }
                *status
            }))
    }

    async fn status_of(&self, key: &SendKey) -> Result<Option<SendStatus>, LedgerError> {
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
        let mut records = crate::runtime::lock(&self.records);
        Ok(
            match records.get_mut(&(key.user_id.clone(), key.campaign_id().to_owned())) {
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
