//! The waiting room on AWS: the waiting table (`WAITING_TABLE_NAME`) keeps the users of a
//! local-time campaign until their slot, and one EventBridge Scheduler one-time schedule per
//! slot (group `RELEASE_SCHEDULE_GROUP`) invokes GetUsers to release it.
//!
//! Items: `slot` = `<campaign>#<slot ms>#<shard>` (`shards::new_slot_shards`, so that a slot
//! filled at GetUsers' peak keeps each partition within its write units; the count is
//! recorded with the slot by its first holder, and a slot without one has the eight of
//! before), `userId` and the users-queue `body`. An item is deleted once its user
//! is on the users queue (or dropped by a cancellation), never by TTL: the table holds
//! exactly who is still waiting, however long a pause lasts. A campaign's report item
//! (`<campaign>#report`, `userId` "-") holds each run segment's counts
//! (`segment<run started ms>.<N>`, written whole, so a retried segment is never added twice
//! and a second run's never overwrite the first's), each slot's release and sweep
//! (`release<slot ms>`, `sweep<slot ms>`), each slot's shards (`shards<slot ms>`, a number)
//! and the delivery the latest run started with
//! (`delivery`, which `mailctl resend` reuses), and the users SendEmail handed back to a slot
//! at the end of their quiet hours (`quiet<slot ms>`, a number).

mod report;
mod schedules;

pub use report::read_report;

use super::describe;
use super::item::{n, s, text};
use crate::domain::campaign::CampaignId;
use crate::domain::local_time::shards::{new_slot_shards, shard_of, LEGACY_SHARDS};
use crate::domain::local_time::{LocalDelivery, LocalTimeCounts, SlotRelease, WaitingReport};
use crate::ports::{ReleasePosition, SlotSchedule, StoreError, WaitingPage, WaitingRoom};
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, PutRequest, ReturnValue, Select, WriteRequest,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// BatchWriteItem's items per call, and how unprocessed items (throttling) are written
/// again: attempts in all, each after a growing pause.
pub const BATCH_WRITE_MAX: usize = 25;
pub const UNPROCESSED_ATTEMPTS: u32 = 6;
pub fn unprocessed_backoff(attempt: u32) -> Duration {
    Duration::from_millis(50 << attempt)
}

/// The shards of the slots this instance has met ((campaign, slot ms) -> shards): a slot's
/// count never changes once recorded.
pub type KnownShards = Arc<Mutex<HashMap<(String, i64), u8>>>;

#[derive(Clone)]
pub struct WaitingTable {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub scheduler: aws_sdk_scheduler::Client,
    pub table: String,
    pub schedule_group: String,
    /// The role EventBridge Scheduler assumes to invoke GetUsers.
    pub scheduler_role_arn: String,
    /// Where a release EventBridge Scheduler could not deliver goes (the schedule DLQ).
    pub dead_letter_arn: String,
    pub known_shards: KnownShards,
}

pub fn slot_key(campaign: &CampaignId, at_ms: i64, shard: u8) -> String {
    format!("{campaign}#{at_ms}#{shard}", campaign = campaign.as_str())
}

fn report_key(campaign: &CampaignId) -> String {
    format!("{}#report", campaign.as_str())
}

fn shards_attribute(at_ms: i64) -> String {
    format!("shards{at_ms}")
}

pub fn store_error(what: &str, detail: String) -> StoreError {
    StoreError(format!("DynamoDB waiting table: {what} failed: {detail}"))
}

impl WaitingRoom for WaitingTable {
    async fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> Result<(), StoreError> {
        let shards = self.hold_shards(campaign, at_ms).await?;
        let mut requests: Vec<WriteRequest> = Vec::with_capacity(users.len());
        for (user_id, body) in users {
            let put = PutRequest::builder()
                .item(
                    "slot",
                    s(slot_key(campaign, at_ms, shard_of(user_id, shards))),
                )
                .item("userId", s(user_id.clone()))
                .item("body", s(body.clone()))
                .build()
                .map_err(|e| store_error("BatchWriteItem", e.to_string()))?;
            requests.push(WriteRequest::builder().put_request(put).build());
        }
        self.write_all(requests).await
    }

    async fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        shard: u8,
        user_ids: &[String],
    ) -> Result<(), StoreError> {
        let mut requests: Vec<WriteRequest> = Vec::with_capacity(user_ids.len());
        for user_id in user_ids {
            let delete = DeleteRequest::builder()
                .key("slot", s(slot_key(campaign, at_ms, shard)))
                .key("userId", s(user_id.clone()))
                .build()
                .map_err(|e| store_error("BatchWriteItem", e.to_string()))?;
            requests.push(WriteRequest::builder().delete_request(delete).build());
        }
        self.write_all(requests).await
    }

    async fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &Value,
    ) -> Result<(), StoreError> {
        self.create_schedule(campaign, schedule, target_arn, event)
            .await
    }
    async fn shards(&self, campaign: &CampaignId, at_ms: i64) -> Result<u8, StoreError> {
        if let Some(known) = self.known(campaign, at_ms) {
            return Ok(known);
        }
        let out = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .key("slot", s(report_key(campaign)))
            .key("userId", s("-"))
            .projection_expression("#a")
            .expression_attribute_names("#a", shards_attribute(at_ms))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", describe(&e)))?;
        let recorded = out
            .item
            .as_ref()
            .and_then(|item| recorded_shards(item.get(&shards_attribute(at_ms))?));
        // A slot without a count is from before it was recorded (not remembered: a first
        // hold may still record one).
        Ok(match recorded {
            Some(shards) => self.remember(campaign, at_ms, shards),
            None => LEGACY_SHARDS,
        })
    }

    async fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> Result<WaitingPage, StoreError> {
        let mut query = self
            .dynamodb
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .limit(limit.clamp(1, 1000) as i32)
            .projection_expression("userId, body")
            .expression_attribute_values(":slot", s(slot_key(campaign, at_ms, from.shard)));
        query = match &from.after {
            Some(after) => query
                .key_condition_expression("slot = :slot AND userId > :after")
                .expression_attribute_values(":after", s(after.clone())),
            None => query.key_condition_expression("slot = :slot"),
        };
        let out = query
            .send()
            .await
            .map_err(|e| store_error("Query", describe(&e)))?;
        let items = out.items.unwrap_or_default();
        let users: Vec<(String, String)> = items
            .iter()
            .filter_map(|i| Some((text(i, "userId")?, text(i, "body")?)))
            .collect();
        let next = out.last_evaluated_key.is_some().then(|| ReleasePosition {
            after: items.last().and_then(|i| text(i, "userId")),
            ..from.clone()
        });
        Ok((users, next))
    }

    async fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(delivery).unwrap_or_default();
        self.set_report(campaign, "delivery", json).await
    }

    async fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(counts).unwrap_or_default();
        let attribute = format!("segment{run_started_ms}.{segment}");
        self.set_report(campaign, &attribute, json).await
    }

    async fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> Result<(), StoreError> {
        self.dynamodb
            .update_item()
            .table_name(&self.table)
            .key("slot", s(report_key(campaign)))
            .key("userId", s("-"))
            .update_expression("ADD #a :n")
            .expression_attribute_names("#a", format!("quiet{at_ms}"))
            .expression_attribute_values(":n", n(users))
            .send()
            .await
            .map_err(|e| store_error("UpdateItem", describe(&e)))?;
        Ok(())
    }

    async fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(release).unwrap_or_default();
        let kind = if release.sweep { "sweep" } else { "release" };
        self.set_report(campaign, &format!("{kind}{}", release.slot_ms), json)
            .await
    }

    async fn count(&self, campaign: &CampaignId, at_ms: i64) -> Result<u64, StoreError> {
        let shards = self.shards(campaign, at_ms).await?;
        count_waiting(&self.dynamodb, &self.table, campaign, at_ms, shards).await
    }

    async fn report(&self, campaign: &CampaignId) -> Result<Option<WaitingReport>, StoreError> {
        read_report(&self.dynamodb, &self.table, campaign).await
    }
}

impl WaitingTable {
    fn known(&self, campaign: &CampaignId, at_ms: i64) -> Option<u8> {
        crate::runtime::lock(&self.known_shards)
            .get(&(campaign.to_string(), at_ms))
            .copied()
    }

    fn remember(&self, campaign: &CampaignId, at_ms: i64, shards: u8) -> u8 {
        crate::runtime::lock(&self.known_shards).insert((campaign.to_string(), at_ms), shards);
        shards
    }

    /// The shards a holder spreads the slot over: recorded by the slot's first holder (a
    /// conditional set, so every holder, this run's or another's, agrees), then remembered.
    async fn hold_shards(&self, campaign: &CampaignId, at_ms: i64) -> Result<u8, StoreError> {
        if let Some(known) = self.known(campaign, at_ms) {
            return Ok(known);
        }
        let attribute = shards_attribute(at_ms);
        let out = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("slot", s(report_key(campaign)))
            .key("userId", s("-"))
            .update_expression("SET #a = if_not_exists(#a, :n)")
            .expression_attribute_names("#a", &attribute)
            .expression_attribute_values(":n", n(u64::from(new_slot_shards())))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| store_error("UpdateItem", describe(&e)))?;
        let shards = (out.attributes.as_ref())
            .and_then(|a| recorded_shards(a.get(&attribute)?))
            .unwrap_or(new_slot_shards());
        Ok(self.remember(campaign, at_ms, shards))
    }

    /// BatchWriteItem in rounds of 25; unprocessed items (throttling) are written again,
    /// with a growing pause.
    async fn write_all(&self, requests: Vec<WriteRequest>) -> Result<(), StoreError> {
        let mut rest = requests;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(BATCH_WRITE_MAX));
            let mut requests = std::mem::replace(&mut rest, tail);
            for attempt in 0u32.. {
                let out = self
                    .dynamodb
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(|e| store_error("BatchWriteItem", describe(&e)))?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&self.table))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                if attempt + 1 == UNPROCESSED_ATTEMPTS {
                    return Err(unprocessed_error(requests.len()));
                }
                tokio::time::sleep(unprocessed_backoff(attempt)).await;
            }
        }
        Ok(())
    }
}

/// Items BatchWriteItem still left unprocessed after its last attempt.
pub fn unprocessed_error(items: usize) -> StoreError {
    store_error(
        "BatchWriteItem",
        format!("{items} items still unprocessed after {UNPROCESSED_ATTEMPTS} attempts"),
    )
}

/// A slot's recorded shard count.
fn recorded_shards(value: &AttributeValue) -> Option<u8> {
    value.as_n().ok()?.parse().ok().filter(|n| *n > 0)
}

/// Users still waiting in one slot of `shards` (a COUNT query per shard).
pub async fn count_waiting(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &CampaignId,
    at_ms: i64,
    shards: u8,
) -> Result<u64, StoreError> {
    let mut total = 0u64;
    for shard in 0..shards {
        let mut start = None;
        loop {
            let out = dynamodb
                .query()
                .table_name(table)
                .consistent_read(true)
                .select(Select::Count)
                .key_condition_expression("slot = :slot")
                .expression_attribute_values(":slot", s(slot_key(campaign, at_ms, shard)))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| store_error("Query", describe(&e)))?;
            total += out.count.max(0) as u64;
            start = out.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_count_is_a_positive_number() {
        assert_eq!(recorded_shards(&AttributeValue::N("36".into())), Some(36));
        assert_eq!(recorded_shards(&AttributeValue::N("0".into())), None);
        assert_eq!(recorded_shards(&AttributeValue::S("36".into())), None);
    }

    #[test]
    fn a_waiting_table_failure_names_dynamodb_not_mongodb() {
        let said = store_error("Query", "ThrottlingException".into()).to_string();
        assert_eq!(
            said,
            "DynamoDB waiting table: Query failed: ThrottlingException"
        );
        let mongo = StoreError::mongo("no primary").to_string();
        assert_eq!(mongo, "MongoDB: no primary");
    }
}
