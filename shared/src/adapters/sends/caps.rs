//! The frequency caps' items of the sends table: one per user, its history as JSON,
//! versioned for the conditional write.

use super::SendsLedger;
use crate::adapters::describe;
use crate::adapters::item::{expires_after, n, number, s, text};
use crate::domain::guardrails::{CapEntry, CapHistory};
use crate::domain::ledger::LedgerError;
use crate::ports::CapLedger;
use aws_sdk_dynamodb::error::SdkError;
use std::time::Duration;

/// The sort key of a user's frequency-cap item: not a campaign id (`#` is not allowed in
/// one), and without `campaignShard`, so no campaign's index or status counts it.
const CAPS_KEY: &str = "#caps";

/// Each user's emails that count towards the caps, as JSON in one item (a few entries: the
/// rules reach at most 90 days), versioned for the conditional write.
impl CapLedger for SendsLedger {
    async fn cap_history(&self, user_id: &str) -> Result<CapHistory, LedgerError> {
        let records = &self.records;
        let out = records
            .client
            .get_item()
            .table_name(&records.table)
            .key("userId", s(user_id))
            .key("campaignId", s(CAPS_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| records.failed("read frequency caps", describe(&e)))?;
        let Some(item) = out.item else {
            return Ok(CapHistory::default());
        };
        Ok(CapHistory {
            version: number::<u64>(&item, "capVersion").unwrap_or(0),
            entries: text(&item, "capSends")
                .and_then(|json| serde_json::from_str::<Vec<CapEntry>>(&json).ok())
                .unwrap_or_default(),
        })
    }

    async fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> Result<bool, LedgerError> {
        let records = &self.records;
        // A day past the longest rule's reach: TTL deletes late, never early.
        let expires = expires_after(
            Duration::from_millis(keep_ms.max(0) as u64) + Duration::from_secs(86_400),
        );
        let request = records
            .client
            .put_item()
            .table_name(&records.table)
            .item("userId", s(user_id))
            .item("campaignId", s(CAPS_KEY))
            .item("capVersion", n(history.version + 1))
            .item(
                "capSends",
                s(serde_json::to_string(&history.entries).unwrap_or_default()),
            )
            .item("expiresAt", n(expires));
        let request = match history.version {
            0 => request.condition_expression("attribute_not_exists(capVersion)"),
            v => request
                .condition_expression("capVersion = :v")
                .expression_attribute_values(":v", n(v)),
        };
        match request.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(records.failed("write frequency caps", describe(&e))),
        }
    }
}
