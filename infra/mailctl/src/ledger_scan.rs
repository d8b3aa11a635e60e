//! Reads the sends table back: per-user records and counts by status.

use anyhow::{Context, Result};
use mailflow::adapters::dynamo::SendRecord;
use mailflow::ledger::SendStatus;
use std::collections::BTreeMap;

/// Every record of one campaign (a full scan: fine locally and for operator checks).
pub async fn records(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
) -> Result<Vec<SendRecord>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = dynamo
            .scan()
            .table_name(table)
            .filter_expression("campaignId = :c")
            .expression_attribute_values(
                ":c",
                aws_sdk_dynamodb::types::AttributeValue::S(campaign.into()),
            )
            .set_exclusive_start_key(start)
            .send()
            .await
            .with_context(|| format!("scanning {table}"))?;
        out.extend(page.items().iter().map(SendRecord::from_item));
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
}

pub fn count_by_status(records: &[SendRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for r in records {
        let key = r.status.map_or("UNKNOWN", SendStatus::as_str);
        *counts.entry(key).or_default() += 1;
    }
    counts
}
