//! Holding users for a send slot: the slot's release and sweep schedules made sure of
//! before its first user is held, the users written to the waiting room, and users due
//! within 15 minutes sent with an SQS delay instead. A held user's message gets when they
//! were let go (and an experiment's winner) as the release sends it (`let_go`).

use super::release::{Release, ReleaseEvent};
use super::{GetUsers, GetUsersError, Pending, LOCAL_FUNCTION_ARN};
use crate::domain::campaign::{Campaign, CampaignId};
use crate::domain::local_time::Due;
use crate::domain::messages::UserMessage;
use crate::ports::{
    CampaignStates, OutgoingQueue, ReleasePosition, SendReport, SlotSchedule, StoreError,
    UserDirectory, WaitingRoom, MAX_DELAY_SECONDS,
};
use crate::runtime::Invocation;

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    pub(super) fn hold_users<'a>(
        &'a self,
        campaign: &'a Campaign,
        at_ms: i64,
        users: Vec<(String, String)>,
    ) -> Pending<'a> {
        Box::pin(async move {
            self.waiting
                .hold(&campaign.id, at_ms, &users)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            Ok(SendReport::default())
        })
    }

    /// The slot's two one-time schedules, each invoking this function (idempotent: each
    /// segment that holds users in the slot makes sure of them once).
    pub(super) async fn schedule_slot(
        &self,
        campaign: &CampaignId,
        slot_ms: i64,
        invocation: &Invocation,
    ) -> Result<(), GetUsersError> {
        let target = invocation
            .function_arn
            .as_deref()
            .unwrap_or(LOCAL_FUNCTION_ARN);
        schedule_slot(&self.waiting, campaign, slot_ms, target)
            .await
            .map_err(|e| GetUsersError::Waiting(e.to_string()))
    }

    /// Users due at `at_ms`, within 15 minutes, onto the users queue invisible until then:
    /// the delay is worked out as the batch goes (rounded up: never before the instant), so a
    /// batch that waited for company is not late by its wait.
    pub(super) fn send_delayed(&self, at_ms: i64, bodies: Vec<String>) -> Pending<'_> {
        Box::pin(async move {
            // Past its instant (a slow audience read): no delay, late by that much.
            let wait_ms = at_ms - self.clock.now_ms();
            let seconds = ((wait_ms.max(0) + 999) / 1000).min(i64::from(MAX_DELAY_SECONDS));
            let due = Due {
                slot_late_ms: seconds * 1000 - wait_ms,
                released_at_ms: self.clock.wall_ms() + seconds * 1000,
            };
            let bodies: Vec<String> = bodies.into_iter().map(|b| let_go(b, due, None)).collect();
            Ok(self
                .users
                .send_batch_delayed(&bodies, seconds as u32)
                .await?)
        })
    }
}

/// A slot's two one-time schedules, each invoking GetUsers (`target`): the release at its
/// instant and the sweep after it. Creating one that exists is success, so every holder
/// (GetUsers' run segments, SendEmail handing users back after their quiet hours) makes
/// sure of them.
pub(crate) async fn schedule_slot<W: WaitingRoom>(
    waiting: &W,
    campaign: &CampaignId,
    slot_ms: i64,
    target: &str,
) -> Result<(), StoreError> {
    for sweep in [false, true] {
        let event = serde_json::to_value(ReleaseEvent {
            release_waiting: Release {
                campaign_id: campaign.clone(),
                slot_ms,
                from: ReleasePosition {
                    backwards: sweep,
                    ..Default::default()
                },
                lanes: Vec::new(),
                released: 0,
                sweep,
                decision_waits_until_ms: None,
            },
        })
        .unwrap_or_default();
        waiting
            .schedule_release(campaign, SlotSchedule { slot_ms, sweep }, target, &event)
            .await?;
    }
    Ok(())
}

/// A held user's body with when they were let go, and the experiment's winner if they wait
/// for it (a body that does not parse, which GetUsers never writes, goes as it is:
/// CreateEmails refuses it alone).
pub(super) fn let_go(body: String, due: Due, winner: Option<&str>) -> String {
    match serde_json::from_str::<UserMessage>(&body) {
        Ok(mut message) => {
            message.due = Some(due);
            if message.variant.is_none() {
                message.variant = winner.map(str::to_owned);
            }
            serde_json::to_string(&message).unwrap_or(body)
        }
        Err(_) => body,
    }
}
