//! A campaign's report item in the waiting table: each run segment's counts, each slot's
//! release and sweep, the delivery and the quiet-hours holds, written attribute by
//! attribute and read back with who is still waiting in each slot.

use super::{count_waiting, recorded_shards, report_key, store_error, WaitingTable};
use crate::adapters::describe;
use crate::adapters::item::{s, Item};
use crate::domain::campaign::CampaignId;
use crate::domain::local_time::shards::LEGACY_SHARDS;
use crate::domain::local_time::{LocalTimeCounts, SlotRelease, WaitingReport};
use crate::ports::StoreError;
use aws_sdk_dynamodb::types::AttributeValue;

/// What the waiting table records of a campaign's local-time delivery (`mailctl status`),
/// with the users still waiting in each slot.
pub async fn read_report(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &CampaignId,
) -> Result<Option<WaitingReport>, StoreError> {
    let out = dynamodb
        .get_item()
        .table_name(table)
        .key("slot", s(report_key(campaign)))
        .key("userId", s("-"))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| store_error("GetItem", describe(&e)))?;
    let Some(item) = out.item else {
        return Ok(None);
    };
    let mut report = report_of(&item);
    let shards = |slot: i64| {
        (item.get(&super::shards_attribute(slot)))
            .and_then(recorded_shards)
            .unwrap_or(LEGACY_SHARDS)
    };
    // Counted a few at once: every slot but those swept and reconciled (a slot whose
    // release looks complete may still hold a hold that landed late).
    use futures::stream::{self, StreamExt, TryStreamExt};
    let counted: Vec<(i64, u64)> = stream::iter(report.slots_to_count())
        .map(|slot| async move {
            let waiting = count_waiting(dynamodb, table, campaign, slot, shards(slot)).await?;
            Ok::<_, StoreError>((slot, waiting))
        })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    report
        .waiting_now
        .extend(counted.into_iter().filter(|(_, n)| *n > 0));
    Ok(Some(report))
}

/// The report item's attributes read back (the users waiting now not yet counted).
fn report_of(item: &Item) -> WaitingReport {
    let mut report = WaitingReport::default();
    for (name, value) in item {
        if let (Some(slot), AttributeValue::N(n)) = (name.strip_prefix("quiet"), value) {
            if let (Ok(slot), Ok(n)) = (slot.parse::<i64>(), n.parse::<u64>()) {
                *report.quiet_held.entry(slot).or_default() += n;
            }
            continue;
        }
        let AttributeValue::S(json) = value else {
            continue;
        };
        if name == "delivery" {
            report.delivery = serde_json::from_str(json).ok();
        } else if let Some(key) = name.strip_prefix("segment") {
            if let Ok(counts) = serde_json::from_str::<LocalTimeCounts>(json) {
                // `segment<run started ms>.<N>`; `segment<N>` from before runs were
                // kept apart counts as a run of its own (0).
                let run = key
                    .split_once('.')
                    .and_then(|(run, _)| run.parse().ok())
                    .unwrap_or(0);
                report.add_segment(run, &counts);
            }
        } else if name.starts_with("release") || name.starts_with("sweep") {
            if let Ok(release) = serde_json::from_str::<SlotRelease>(json) {
                report.releases.push(release);
            }
        }
    }
    report.releases.sort_by_key(|r| (r.slot_ms, r.sweep));
    report
}

impl WaitingTable {
    pub(super) async fn set_report(
        &self,
        campaign: &CampaignId,
        attribute: &str,
        json: String,
    ) -> Result<(), StoreError> {
        self.dynamodb
            .update_item()
            .table_name(&self.table)
            .key("slot", s(report_key(campaign)))
            .key("userId", s("-"))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attribute)
            .expression_attribute_values(":v", s(json))
            .send()
            .await
            .map_err(|e| store_error("UpdateItem", describe(&e)))?;
        Ok(())
    }
}
