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
    Ok(pages.into_iter().flatten().collect())
}
