//! Reads the sends table back: one campaign's records, through the campaign index
//! (`CampaignShardIndex`: 128 small queries, each one partition, reading nothing of other
//! campaigns), and counts by status.

use anyhow::Result;
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::ledger::SendStatus;
use std::collections::BTreeMap;

pub use mailflow::adapters::sends::CAMPAIGN_INDEX;

/// Every record of one campaign.
pub async fn records(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
) -> Result<Vec<SendRecord>> {
    Ok(mailflow::adapters::sends::campaign_records(dynamo, table, campaign).await?)
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
