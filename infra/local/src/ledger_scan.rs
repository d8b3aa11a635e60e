//! Reads the sends table back: one campaign's records, through the campaign index
//! (`CampaignShardIndex`: 16 small queries, each one partition, reading nothing of other
//! campaigns), and counts by status.

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use mailflow::adapters::dynamo::SendRecord;
use mailflow::domain::ledger::{campaign_shards, SendStatus};
use std::collections::BTreeMap;

/// The index template.yaml gives the sends table for reads by campaign.
pub const CAMPAIGN_INDEX: &str = "CampaignShardIndex";

/// Every record of one campaign.
pub async fn records(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
) -> Result<Vec<SendRecord>> {
    let queries = campaign_shards(campaign).map(|shard| async move {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = dynamo
                .query()
                .table_name(table)
                .index_name(CAMPAIGN_INDEX)
                .key_condition_expression("campaignShard = :shard")
                .expression_attribute_values(":shard", AttributeValue::S(shard.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .with_context(|| format!("querying {table} ({CAMPAIGN_INDEX}, {shard})"))?;
            out.extend(page.items().iter().map(SendRecord::from_item));
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok::<_, anyhow::Error>(out);
            }
        }
    });
    let pages = futures::future::try_join_all(queries).await?;
    Ok(pages.into_iter().flatten().collect())
}

pub fn count_by_status(records: &[SendRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for r in records {
        let key = r.status.map_or("UNKNOWN", SendStatus::as_str);
        *counts.entry(key).or_default() += 1;
    }
    counts
}
