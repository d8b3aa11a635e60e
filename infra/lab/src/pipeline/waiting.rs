//! The waiting table in front of the in-memory waiting room (`LabWaitingTable`): each hold,
//! read and delete of a user charged to its slot's shard key (a partition) and to the table,
//! in units of its item's size, behind DynamoDB's round trip. Holds and deletes go as the
//! adapter sends them (`adapters::waiting`): BatchWriteItem calls of 25 one after another,
//! the items a partition refuses coming back unprocessed and written again after a pause,
//! up to its attempts; a call whose every item is refused is throttled whole, and fails
//! after the SDK's retries. A hold also costs GetUsers the CPU each user takes it. Each
//! slot's release and sweep schedules are charged to EventBridge Scheduler's `CreateSchedule`
//! rate for the region, and fail as the SDK does after its retries.

use crate::limits::{Charge, Limit, Throughput};
use crate::rate::latency::{Cpu, Slow};
use mailflow::adapters::waiting::{
    slot_key, store_error, unprocessed_backoff, unprocessed_error, BATCH_WRITE_MAX,
    UNPROCESSED_ATTEMPTS,
};
use mailflow::domain::aws_limits::{
    scheduler_creates_per_second, DYNAMODB_PARTITION_READ_UNITS, DYNAMODB_PARTITION_WRITE_UNITS,
    DYNAMODB_TABLE_READ_UNITS, DYNAMODB_TABLE_WRITE_UNITS, DYNAMODB_WRITE_UNIT_BYTES,
};
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::local_time::shards::shard_of;
use mailflow::domain::local_time::{LocalDelivery, LocalTimeCounts, SlotRelease, WaitingReport};
use mailflow::ports::memory::MemoryWaitingRoom;
use mailflow::ports::{ReleasePosition, SlotSchedule, StoreError, WaitingPage, WaitingRoom};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const PARTITION_WRITES: Limit = Limit {
    name: "waiting partition writes",
    per_second: DYNAMODB_PARTITION_WRITE_UNITS,
};
const PARTITION_READS: Limit = Limit {
    name: "waiting partition reads",
    per_second: DYNAMODB_PARTITION_READ_UNITS,
};
const TABLE_WRITES: Limit = Limit {
    name: "waiting table writes",
    per_second: DYNAMODB_TABLE_WRITE_UNITS,
};
const TABLE_READS: Limit = Limit {
    name: "waiting table reads",
    per_second: DYNAMODB_TABLE_READ_UNITS,
};
/// A strongly consistent read unit: up to 4 KB, summed over a Query's items.
const READ_UNIT_BYTES: usize = 4_096;

pub struct LabWaitingTable {
    room: Slow<MemoryWaitingRoom>,
    pub limits: Throughput,
    /// EventBridge Scheduler's `CreateSchedule` rate in the run's region.
    pub scheduler: Limit,
    /// The shards a new slot is spread over (the adapter records `new_slot_shards`).
    shards: u8,
    /// GetUsers' CPU, and what each held user takes of it.
    cpu: Arc<Cpu>,
    per_user: Duration,
}

impl LabWaitingTable {
    pub fn new(
        shards: u8,
        latency: (Duration, Duration),
        cpu: Arc<Cpu>,
        per_user: Duration,
        region: &str,
        seed: u64,
    ) -> Self {
        Self {
            room: Slow::new(Arc::new(MemoryWaitingRoom::sharded(shards)), latency),
            limits: Throughput::new(seed),
            scheduler: Limit {
                name: "Scheduler CreateSchedule",
                per_second: scheduler_creates_per_second(region),
            },
            shards,
            cpu,
            per_user,
        }
    }

    pub fn room(&self) -> &MemoryWaitingRoom {
        &self.room.inner
    }

    /// An item's write units: its key, user id and body, by the kilobyte.
    fn write_units(key: &str, user_id: &str, body_len: usize) -> f64 {
        let bytes = "slot".len() + key.len() + "userId".len() + user_id.len() + "body".len();
        (bytes + body_len).div_ceil(DYNAMODB_WRITE_UNIT_BYTES) as f64
    }

    /// Users (id, body size) written to the slot, or taken out of it, as the adapter's
    /// BatchWriteItem rounds do; `done` takes each round's processed users.
    async fn write_all(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, usize)],
        mut done: impl FnMut(&[usize]),
    ) -> Result<(), StoreError> {
        let indexed: Vec<usize> = (0..users.len()).collect();
        for chunk in indexed.chunks(BATCH_WRITE_MAX) {
            let mut rest = chunk.to_vec();
            for attempt in 0..UNPROCESSED_ATTEMPTS {
                self.room.wait().await;
                let charges: Vec<Vec<Charge>> = (rest.iter())
                    .map(|&i| {
                        let (user_id, body_len) = &users[i];
                        let key = slot_key(campaign, at_ms, shard_of(user_id, self.shards));
                        let units = Self::write_units(&key, user_id, *body_len);
                        vec![
                            Charge::new(PARTITION_WRITES, key, units),
                            Charge::new(TABLE_WRITES, "", units),
                        ]
                    })
                    .collect();
                let taken = (self.limits.admit_each(&charges).await)
                    .map_err(|e| store_error("BatchWriteItem", e.to_string()))?;
                let processed: Vec<usize> = (rest.iter().zip(&taken))
                    .filter_map(|(i, t)| t.then_some(*i))
                    .collect();
                done(&processed);
                rest = (rest.iter().zip(&taken))
                    .filter_map(|(i, t)| (!t).then_some(*i))
                    .collect();
                if rest.is_empty() {
                    break;
                }
                if attempt + 1 == UNPROCESSED_ATTEMPTS {
                    return Err(unprocessed_error(rest.len()));
                }
                tokio::time::sleep(unprocessed_backoff(attempt)).await;
            }
        }
        Ok(())
    }
}

impl WaitingRoom for LabWaitingTable {
    async fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> Result<(), StoreError> {
        self.cpu.spend(self.per_user * users.len() as u32).await;
        let sized: Vec<(String, usize)> = (users.iter())
            .map(|(id, body)| (id.clone(), body.len()))
            .collect();
        let mut written = Vec::new();
        let result = self
            .write_all(campaign, at_ms, &sized, |done| {
                written.extend(done.iter().map(|&i| users[i].clone()))
            })
            .await;
        self.room.inner.hold(campaign, at_ms, &written).await?;
        result
    }

    async fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &Value,
    ) -> Result<(), StoreError> {
        self.room.wait().await;
        (self.limits)
            .admit(&[Charge::new(self.scheduler, "", 1.0)])
            .await
            .map_err(|throttled| StoreError(format!("EventBridge Scheduler: {throttled}")))?;
        (self.room.inner)
            .schedule_release(campaign, schedule, target_arn, event)
            .await
    }

    async fn shards(&self, campaign: &CampaignId, at_ms: i64) -> Result<u8, StoreError> {
        self.room.inner.shards(campaign, at_ms).await
    }

    async fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> Result<WaitingPage, StoreError> {
        self.room.wait().await;
        let page = self
            .room
            .inner
            .waiting(campaign, at_ms, from, limit)
            .await?;
        let bytes: usize = (page.0.iter())
            .map(|(id, body)| id.len() + body.len() + 64)
            .sum();
        let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64;
        let key = slot_key(campaign, at_ms, from.shard);
        self.limits
            .admit(&[
                Charge::new(PARTITION_READS, key, units),
                Charge::new(TABLE_READS, "", units),
            ])
            .await
            .map_err(|e| store_error("Query", e.to_string()))?;
        Ok(page)
    }

    async fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        shard: u8,
        user_ids: &[String],
    ) -> Result<(), StoreError> {
        let sized: Vec<(String, usize)> = {
            let held = mailflow::runtime::lock(&self.room.inner.held);
            let slot = held.get(&(campaign.to_string(), at_ms));
            (user_ids.iter())
                .map(|id| {
                    let body = slot.and_then(|s| s.get(id)).map_or(0, String::len);
                    (id.clone(), body)
                })
                .collect()
        };
        let mut deleted = Vec::new();
        let result = self
            .write_all(campaign, at_ms, &sized, |done| {
                deleted.extend(done.iter().map(|&i| user_ids[i].clone()))
            })
            .await;
        self.room
            .inner
            .let_go(campaign, at_ms, shard, &deleted)
            .await?;
        result
    }

    async fn count(&self, campaign: &CampaignId, at_ms: i64) -> Result<u64, StoreError> {
        self.room.wait().await;
        self.room.inner.count(campaign, at_ms).await
    }

    async fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> Result<(), StoreError> {
        self.room.inner.record_delivery(campaign, delivery).await
    }

    async fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> Result<(), StoreError> {
        (self.room.inner)
            .record_segment(campaign, run_started_ms, segment, counts)
            .await
    }

    async fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> Result<(), StoreError> {
        self.room
            .inner
            .record_quiet_holds(campaign, at_ms, users)
            .await
    }

    async fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> Result<(), StoreError> {
        self.room.inner.record_release(campaign, release).await
    }

    async fn report(&self, campaign: &CampaignId) -> Result<Option<WaitingReport>, StoreError> {
        self.room.inner.report(campaign).await
    }
}
