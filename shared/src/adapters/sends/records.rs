//! The sends table's records read back whole, as operators and tests read them: one item,
//! or every record of a campaign through its index.

use crate::adapters::describe;
use crate::adapters::item::{number, text, Item};
use crate::domain::ledger::{campaign_shards, Engagement, LedgerError, SendStatus};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

/// A record of the sends table, as operators and tests read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRecord {
    pub user_id: String,
    pub campaign_id: String,
    pub status: Option<SendStatus>,
    pub attempt: u64,
    pub ses_message_id: Option<String>,
    pub last_error: Option<String>,
    /// Why a record is SKIPPED (`Skip::as_str`: a guardrail, or the person's standing read
    /// again at the send).
    pub skip_reason: Option<String>,
    pub lease_until_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub completed_at_ms: Option<u64>,
    /// A local-time email: how long after its user's local send time it was sent (ms).
    pub late_ms: Option<i64>,
    pub duplicates_suppressed: u64,
    /// Attempts that ended in an error the service answered with (see `sendErrors`).
    pub send_errors: u64,
    /// When each engagement was first noted (epoch ms).
    pub engagement: std::collections::BTreeMap<Engagement, u64>,
    /// When an SES event turned it SENT (its attempt died before it could).
    pub reconciled_at_ms: Option<u64>,
    /// The experiment's variant it was sent (or is being sent).
    pub variant: Option<String>,
    /// The user's zone as the email was claimed (their own, or the campaign's fallback).
    pub zone: Option<String>,
    /// The last write to it (epoch ms).
    pub updated_at_ms: Option<u64>,
}

impl SendRecord {
    pub fn from_item(item: &Item) -> Self {
        Self {
            user_id: text(item, "userId").unwrap_or_default(),
            campaign_id: text(item, "campaignId").unwrap_or_default(),
            status: text(item, "status").as_deref().and_then(SendStatus::parse),
            attempt: number::<u64>(item, "attempt").unwrap_or(0),
            ses_message_id: text(item, "sesMessageId"),
            last_error: text(item, "lastError"),
            skip_reason: text(item, "skipReason"),
            lease_until_ms: number::<u64>(item, "leaseUntil"),
            started_at_ms: number::<u64>(item, "startedAt"),
            completed_at_ms: number::<u64>(item, "completedAt"),
            late_ms: item
                .get("lateMs")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
            duplicates_suppressed: number::<u64>(item, "duplicatesSuppressed").unwrap_or(0),
            send_errors: number::<u64>(item, "sendErrors").unwrap_or(0),
            engagement: Engagement::ALL
                .iter()
                .filter_map(|e| Some((*e, number::<u64>(item, e.attribute())?)))
                .collect(),
            reconciled_at_ms: number::<u64>(item, "reconciled"),
            variant: text(item, "variant"),
            zone: text(item, "userZone"),
            updated_at_ms: number::<u64>(item, "updatedAt"),
        }
    }
}

/// The index template.yaml gives the sends table for reads by campaign.
pub const CAMPAIGN_INDEX: &str = "CampaignShardIndex";

/// Every record of one campaign that has had an outcome (the index is sparse: a record
/// enters it with the first write `LedgerWrite::indexes` names; one whose first attempt is
/// in flight is not there yet), through the campaign index (`CampaignShardIndex`: 128 queries
/// at once, each one partition, reading nothing of other campaigns).
pub async fn campaign_records(
    client: &Client,
    table: &str,
    campaign: &str,
) -> Result<Vec<SendRecord>, LedgerError> {
    let queries = campaign_shards(campaign).map(|shard| async move {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = client
                .query()
                .table_name(table)
                .index_name(CAMPAIGN_INDEX)
                .key_condition_expression("campaignShard = :shard")
                .expression_attribute_values(":shard", AttributeValue::S(shard.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| LedgerError {
                    table: table.to_owned(),
                    operation: "query a campaign's records",
                    detail: format!("{CAMPAIGN_INDEX} {shard}: {}", describe(&e)),
                })?;
            out.extend(page.items().iter().map(SendRecord::from_item));
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok::<_, LedgerError>(out);
            }
        }
    });
    let pages = futures::future::try_join_all(queries).await?;
    Ok(latest_per_user(pages.into_iter().flatten()))
}

/// One record per user, by user id. A record written under fewer shards moves to its key over more
/// when it is written again (a retry's outcome, a reconcile); a read across that write can
/// see it under both keys, and the later write is the record.
fn latest_per_user(records: impl Iterator<Item = SendRecord>) -> Vec<SendRecord> {
    let mut by_user: std::collections::HashMap<String, SendRecord> =
        std::collections::HashMap::new();
    for record in records {
        match by_user.entry(record.user_id.clone()) {
            std::collections::hash_map::Entry::Occupied(mut seen) => {
                if record.updated_at_ms > seen.get().updated_at_ms {
                    seen.insert(record);
                }
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(record);
            }
        }
    }
    let mut records: Vec<SendRecord> = by_user.into_values().collect();
    records.sort_by(|a, b| a.user_id.cmp(&b.user_id));
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_seen_under_two_shard_keys_counts_once_as_its_later_write() {
        let record = |user: &str, status, updated| SendRecord {
            user_id: user.into(),
            campaign_id: "c".into(),
            status: Some(status),
            attempt: 1,
            ses_message_id: None,
            last_error: None,
            skip_reason: None,
            lease_until_ms: None,
            started_at_ms: None,
            completed_at_ms: None,
            late_ms: None,
            duplicates_suppressed: 0,
            send_errors: 0,
            engagement: Default::default(),
            reconciled_at_ms: None,
            variant: None,
            zone: None,
            updated_at_ms: Some(updated),
        };
        let read = latest_per_user(
            [
                record("a", SendStatus::DeadLettered, 1),
                record("b", SendStatus::Sent, 5),
                record("a", SendStatus::Sent, 9),
            ]
            .into_iter(),
        );
        assert_eq!(read.len(), 2);
        let a = read.iter().find(|r| r.user_id == "a").unwrap();
        assert_eq!(a.status, Some(SendStatus::Sent));
    }
}
