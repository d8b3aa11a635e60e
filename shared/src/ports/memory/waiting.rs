//! The waiting room in memory: the same idempotence as the DynamoDB table and the
//! scheduler (`adapters::waiting`), one shard unless `sharded` (the lab's table).

use crate::domain::campaign::CampaignId;
use crate::domain::local_time::shards::shard_of;
use crate::domain::local_time::{LocalDelivery, LocalTimeCounts, SlotRelease, WaitingReport};
use crate::ports::{ReleasePosition, SlotSchedule, StoreError, WaitingPage, WaitingRoom};
use crate::runtime::lock;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryWaitingRoom {
    /// (campaign, slot) -> user id -> body
    pub held: Mutex<BTreeMap<(String, i64), BTreeMap<String, String>>>,
    /// (campaign, schedule) -> (target, event)
    pub schedules: Mutex<BTreeMap<(String, SlotSchedule), (String, Value)>>,
    segments: Mutex<BTreeMap<(String, i64, u32), LocalTimeCounts>>,
    releases: Mutex<BTreeMap<(String, i64, bool), SlotRelease>>,
    quiet_holds: Mutex<BTreeMap<(String, i64), u64>>,
    deliveries: Mutex<BTreeMap<String, LocalDelivery>>,
    /// Holds that land while a slot is being released (a segment retried late): each
    /// (campaign, slot, user id, body) is written by the next `let_go` of its slot.
    pub landing: Mutex<Vec<(String, i64, String, String)>>,
    /// Every slot's shards, as `shard_of` spreads its users (0: one).
    shards: u8,
}

impl MemoryWaitingRoom {
    /// A waiting room whose slots are spread over `shards`, each released on its own.
    pub fn sharded(shards: u8) -> Self {
        Self {
            shards,
            ..Self::default()
        }
    }
}

impl WaitingRoom for MemoryWaitingRoom {
    async fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        let slot = held.entry((campaign.to_string(), at_ms)).or_default();
        for (id, body) in users {
            slot.insert(id.clone(), body.clone());
        }
        Ok(())
    }

    async fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &Value,
    ) -> Result<(), StoreError> {
        lock(&self.schedules)
            .entry((campaign.to_string(), schedule))
            .or_insert_with(|| (target_arn.to_owned(), event.clone()));
        Ok(())
    }

    async fn shards(&self, _campaign: &CampaignId, _at_ms: i64) -> Result<u8, StoreError> {
        Ok(self.shards.max(1))
    }

    async fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> Result<WaitingPage, StoreError> {
        let held = lock(&self.held);
        let Some(slot) = held.get(&(campaign.to_string(), at_ms)) else {
            return Ok((Vec::new(), None));
        };
        let after = match &from.after {
            Some(after) => std::ops::Bound::Excluded(after.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let shards = self.shards.max(1);
        let page: Vec<(&String, &String)> = slot
            .range((after, std::ops::Bound::Unbounded))
            .filter(|(id, _)| shards == 1 || shard_of(id, shards) == from.shard)
            .take(limit)
            .collect();
        let next = (page.len() == limit).then(|| ReleasePosition {
            shard: from.shard,
            backwards: from.backwards,
            after: page.last().map(|(id, _)| (*id).clone()),
        });
        Ok((
            page.into_iter()
                .map(|(id, b)| (id.clone(), b.clone()))
                .collect(),
            next,
        ))
    }

    async fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        _shard: u8,
        user_ids: &[String],
    ) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        if let Some(slot) = held.get_mut(&(campaign.to_string(), at_ms)) {
            for id in user_ids {
                slot.remove(id);
            }
        }
        let mut landing = lock(&self.landing);
        for (c, slot, id, body) in std::mem::take(&mut *landing) {
            if c == campaign.as_str() && slot == at_ms {
                held.entry((c, slot)).or_default().insert(id, body);
            } else {
                landing.push((c, slot, id, body));
            }
        }
        Ok(())
    }

    async fn count(&self, campaign: &CampaignId, at_ms: i64) -> Result<u64, StoreError> {
        Ok(lock(&self.held)
            .get(&(campaign.to_string(), at_ms))
            .map_or(0, |slot| slot.len() as u64))
    }

    async fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> Result<(), StoreError> {
        lock(&self.deliveries).insert(campaign.to_string(), delivery.clone());
        Ok(())
    }

    async fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> Result<(), StoreError> {
        lock(&self.segments).insert(
            (campaign.to_string(), run_started_ms, segment),
            counts.clone(),
        );
        Ok(())
    }

    async fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> Result<(), StoreError> {
        *lock(&self.quiet_holds)
            .entry((campaign.to_string(), at_ms))
            .or_default() += users;
        Ok(())
    }

    async fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> Result<(), StoreError> {
        lock(&self.releases).insert(
            (campaign.to_string(), release.slot_ms, release.sweep),
            release.clone(),
        );
        Ok(())
    }

    async fn report(&self, campaign: &CampaignId) -> Result<Option<WaitingReport>, StoreError> {
        let mut report = WaitingReport {
            delivery: lock(&self.deliveries).get(campaign.as_str()).cloned(),
            ..Default::default()
        };
        let mut any = false;
        for ((c, run, _), counts) in lock(&self.segments).iter() {
            if c == campaign.as_str() {
                report.add_segment(*run, counts);
                any = true;
            }
        }
        for ((c, slot), users) in lock(&self.quiet_holds).iter() {
            if c == campaign.as_str() {
                *report.quiet_held.entry(*slot).or_default() += users;
                any = true;
            }
        }
        for ((c, _, _), release) in lock(&self.releases).iter() {
            if c == campaign.as_str() {
                report.releases.push(release.clone());
            }
        }
        for ((c, slot), users) in lock(&self.held).iter() {
            if c == campaign.as_str() && !users.is_empty() {
                report.waiting_now.insert(*slot, users.len() as u64);
            }
        }
        Ok(any.then_some(report))
    }
}
