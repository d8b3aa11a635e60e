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

/// Emails per second over the steady state: the SENT records' completion times between the
/// 10th and the 90th percentile (the fan-out before and the tail after left out). None with
/// fewer than 20 sent.
pub fn steady_send_rate(records: &[SendRecord]) -> Option<f64> {
    let mut times: Vec<u64> = (records.iter())
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter_map(|r| r.completed_at_ms)
        .collect();
    if times.len() < 20 {
        return None;
    }
    times.sort_unstable();
    let at = |share: f64| ((times.len() - 1) as f64 * share).round() as usize;
    let (from, to) = (at(0.1), at(0.9));
    let seconds = times[to].saturating_sub(times[from]) as f64 / 1000.0;
    (seconds > 0.0).then(|| (to - from) as f64 / seconds)
}

pub fn count_by_status(records: &[SendRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for r in records {
        let key = r.status.map_or("UNKNOWN", SendStatus::as_str);
        *counts.entry(key).or_default() += 1;
    }
    counts
}
