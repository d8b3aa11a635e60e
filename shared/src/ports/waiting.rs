//! The waiting room of local-time delivery: users held until their slot, and the slot's
//! one-time schedules.

use super::StoreError;
use crate::domain::campaign::CampaignId;
use crate::domain::local_time::{LocalDelivery, LocalTimeCounts, SlotRelease, WaitingReport};
use std::future::Future;

/// Where a release of one shard of a send slot has got to: the shard, and the last user id
/// released in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePosition {
    pub shard: u8,
    pub after: Option<String>,
    /// Through the shards last to first (a sweep): a release still at work when its sweep
    /// comes (a big slot, a resume delivering both) goes first to last, so the two meet
    /// instead of enqueuing the whole slot twice. (An event from before the release took
    /// several shards at once counted `shard` from the last here.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backwards: bool,
}

/// A page of a slot's shard's waiting users (id, users-queue body), and where the shard's
/// next page starts.
pub type WaitingPage = (Vec<(String, String)>, Option<ReleasePosition>);

/// One of a slot's two one-time schedules: its release at the instant, or its sweep
/// (`SWEEP_AFTER_MS` later) that releases whoever the release did not find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlotSchedule {
    pub slot_ms: i64,
    pub sweep: bool,
}

impl SlotSchedule {
    pub fn fires_at_ms(self) -> i64 {
        if self.sweep {
            self.slot_ms + crate::domain::local_time::SWEEP_AFTER_MS
        } else {
            self.slot_ms
        }
    }
}

/// Users of local-time campaigns waiting for their send slot, and the one-time schedules
/// that release each slot (DynamoDB and EventBridge Scheduler on AWS).
pub trait WaitingRoom: Send + Sync {
    /// Keeps `users` (id, users-queue body) of `campaign` until `at_ms`. Idempotent: a user
    /// kept twice is kept once.
    fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Makes sure a one-time schedule invokes `target_arn` with `event` at `at_ms`: creating
    /// one that exists already is success.
    fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The shards the slot's users are spread over (recorded with the slot by its first
    /// holder; `LEGACY_SHARDS` for a slot from before).
    fn shards(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u8, StoreError>> + Send;
    /// Up to `limit` waiting users (id, body) of the slot's shard `from.shard`, after
    /// `from.after`, and where the shard's next page starts (`None`: the shard is done).
    fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> impl Future<Output = Result<WaitingPage, StoreError>> + Send;
    /// Takes released (or dropped) users out of the slot's `shard` they were read from: the
    /// waiting room holds exactly who is still waiting.
    fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        shard: u8,
        user_ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Users still waiting in the slot (what a completed sweep left: `usersStranded`).
    fn count(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// The campaign's local-time delivery as its run started (a later resend reuses it).
    fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A run segment's counts, under the run (its `started_at_ms`) and the segment: written
    /// again by a retried segment, never added twice, and kept apart from other runs'.
    fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Users SendEmail handed back to the slot at the end of their quiet hours, added to
    /// the slot's count (a record handed back twice, after a retry, counts twice).
    fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A slot released: how many users, and when (the clock's time).
    fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// What is recorded of the campaign's local-time delivery, with who is still waiting in
    /// each slot (`None`: not a local-time campaign).
    fn report(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<Option<WaitingReport>, StoreError>> + Send;
}

/// One waiting room shared by several stages (tests, the lab).
impl<T: WaitingRoom> WaitingRoom for std::sync::Arc<T> {
    fn hold(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).hold(campaign, at_ms, users)
    }
    fn schedule_release(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).schedule_release(campaign, schedule, target_arn, event)
    }
    fn shards(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u8, StoreError>> + Send {
        (**self).shards(campaign, at_ms)
    }
    fn waiting(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        from: &ReleasePosition,
        limit: usize,
    ) -> impl Future<Output = Result<WaitingPage, StoreError>> + Send {
        (**self).waiting(campaign, at_ms, from, limit)
    }
    fn let_go(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        shard: u8,
        user_ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).let_go(campaign, at_ms, shard, user_ids)
    }
    fn count(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).count(campaign, at_ms)
    }
    fn record_delivery(
        &self,
        campaign: &CampaignId,
        delivery: &LocalDelivery,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_delivery(campaign, delivery)
    }
    fn record_segment(
        &self,
        campaign: &CampaignId,
        run_started_ms: i64,
        segment: u32,
        counts: &LocalTimeCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_segment(campaign, run_started_ms, segment, counts)
    }
    fn record_quiet_holds(
        &self,
        campaign: &CampaignId,
        at_ms: i64,
        users: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_quiet_holds(campaign, at_ms, users)
    }
    fn record_release(
        &self,
        campaign: &CampaignId,
        release: &SlotRelease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).record_release(campaign, release)
    }
    fn report(
        &self,
        campaign: &CampaignId,
    ) -> impl Future<Output = Result<Option<WaitingReport>, StoreError>> + Send {
        (**self).report(campaign)
    }
}
