//! The release of a send slot: at its instant (or the experiment's decision it waits for),
//! its waiting users onto the users queue with the winner, a page at a time; a sweep a
//! quarter of an hour later for whoever the release did not find; a paused campaign's
//! release put back until the resume, a cancelled one's users dropped.

use super::experiment::ReleaseWinner;
use super::hold::let_go;
use super::{GetUsers, GetUsersError};
use crate::domain::campaign::CampaignId;
use crate::domain::campaign_state::{CampaignState, Hold};
use crate::domain::local_time::{self, Due};
use crate::ports::{
    CampaignStates, OutgoingQueue, ReleasePosition, SlotSchedule, UserDirectory, WaitingRoom,
    MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS,
};
use crate::runtime::Invocation;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};

/// The release of one send slot (`{"releaseWaiting": {...}}`, as its one-time schedule
/// invokes GetUsers); one that needs another invocation continues on the continuation queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub campaign_id: CampaignId,
    pub slot_ms: i64,
    #[serde(default)]
    pub from: ReleasePosition,
    /// Users released by the invocations before this one.
    #[serde(default)]
    pub released: u64,
    /// The slot's sweep (`SWEEP_AFTER_MS` after it), not its release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sweep: bool,
    /// An experiment's decision waits for the test group's last email: the release looks
    /// again at this instant (ms), reading nothing before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_waits_until_ms: Option<i64>,
}

impl Release {
    fn schedule(&self) -> SlotSchedule {
        SlotSchedule {
            slot_ms: self.slot_ms,
            sweep: self.sweep,
        }
    }

    /// Its instant: the schedule's, or the decision's it waits for.
    fn not_before_ms(&self) -> i64 {
        let fires_at = self.schedule().fires_at_ms();
        self.decision_waits_until_ms
            .map_or(fires_at, |at| at.max(fires_at))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseEvent {
    pub release_waiting: Release,
}

/// What a release invocation did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSummary {
    pub campaign_id: String,
    pub slot: String,
    pub users_released: u64,
    pub complete: bool,
    /// The slot's sweep: it released whoever the release did not find.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sweep: bool,
    /// Still to come: the slot is early (never released before its instant), or, for a
    /// sweep, the slot's release is still going.
    pub early: bool,
    /// An experiment's decision waits for the test group's last email: the slot goes then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_waits_until: Option<String>,
    pub paused: bool,
    pub cancelled: bool,
    /// A cancelled campaign's waiting users taken out of the waiting room, unsent.
    #[serde(skip_serializing_if = "is_zero")]
    pub users_dropped: u64,
    /// A completed sweep: users still in the slot after it (a hold that landed while it
    /// read). Nothing releases them but `mailctl release`: the `usersStranded` metric and
    /// its alarm.
    #[serde(skip_serializing_if = "is_zero")]
    pub users_stranded: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Waiting users read (and enqueued) per page of a release.
const RELEASE_PAGE: usize = 250;

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Releases one send slot: its waiting users onto the users queue, from where they go
    /// through CreateEmails and SendEmail like any other (the ledger keeps them exactly
    /// once), each taken out of the waiting room once it is on the queue. The sweep does the
    /// same a quarter of an hour later for whoever the release did not find. Never before
    /// the instant; a paused campaign's release waits on the continuation queue for the
    /// resume, looking again once a minute; a cancelled one's drops its waiting users.
    pub async fn release(
        &self,
        release: Release,
        invocation: &Invocation,
    ) -> Result<ReleaseSummary, GetUsersError> {
        let mut summary = ReleaseSummary {
            campaign_id: release.campaign_id.to_string(),
            slot: local_time::rfc3339_ms(release.slot_ms),
            sweep: release.sweep,
            ..Default::default()
        };
        // Read afresh, not from the cache: a slot is released once, and a pause just made
        // must hold it.
        let state = self
            .campaigns
            .states()
            .state(release.campaign_id.as_str())
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        if self.not_yet(&release, &state, &mut summary).await? {
            return Ok(summary);
        }
        let cancelled = matches!(state.hold, Some(Hold::Cancelled(_)));
        // The rest of an experiment's audience goes with the winner (decided now if no one
        // has yet); a cancelled campaign decides nothing.
        let winner = match cancelled {
            true => None,
            false => match self.winner_for(&release, &state, &mut summary).await? {
                Some(winner) => winner,
                None => return Ok(summary),
            },
        };
        let Some(released) = self
            .let_go_pages(
                &release,
                cancelled,
                winner.as_deref(),
                &mut summary,
                invocation,
            )
            .await?
        else {
            return Ok(summary);
        };
        if cancelled {
            summary.cancelled = true;
            tracing::info!(campaign = %release.campaign_id, slot = %summary.slot, users_dropped = summary.users_dropped, "campaign cancelled: the slot's waiting users are dropped, not released");
            return Ok(summary);
        }
        self.record_slot_release(&release, released, &mut summary)
            .await?;
        Ok(summary)
    }

    /// Whether the release must wait: before its instant (unless an experiment's decision
    /// slot whose winner was picked by hand), or while the campaign is paused. Either way it
    /// is put back on the continuation queue.
    async fn not_yet(
        &self,
        release: &Release,
        state: &CampaignState,
        summary: &mut ReleaseSummary,
    ) -> Result<bool, GetUsersError> {
        // An experiment's decision slot goes as soon as the winner is picked by hand (with
        // local time, it is some zone's local time too: it waits for it).
        let picked = state.decision.is_some()
            && (state.experiment.as_ref())
                .is_some_and(|e| !e.local_time && e.decide_at_ms == Some(release.slot_ms));
        let early_ms = release.not_before_ms() - self.clock.now_ms();
        if early_ms > 0 && !picked {
            summary.early = true;
            let seconds = ((early_ms + 999) / 1000).min(i64::from(MAX_DELAY_SECONDS)) as u32;
            self.continue_release(release, seconds).await?;
            return Ok(true);
        }
        if matches!(state.hold, Some(Hold::Paused(_))) {
            summary.paused = true;
            // The pause stopped this queue's consumer; should it still run (a disable not
            // yet applied, or failed), the release looks again in a minute, not at once.
            self.continue_release(release, PAUSED_LOOK_AGAIN_SECONDS)
                .await?;
            tracing::info!(campaign = %release.campaign_id, slot = %summary.slot, sweep = release.sweep, "campaign paused: the slot's release waits for the resume");
            return Ok(true);
        }
        Ok(false)
    }

    /// The winner the slot's users go with (Some(None): no experiment's); None: the decision
    /// waits for the test group's last email, and the release is put back until then.
    async fn winner_for(
        &self,
        release: &Release,
        state: &CampaignState,
        summary: &mut ReleaseSummary,
    ) -> Result<Option<Option<String>>, GetUsersError> {
        match self
            .release_winner(&release.campaign_id, state, release.slot_ms)
            .await?
        {
            ReleaseWinner::NoExperiment => Ok(Some(None)),
            ReleaseWinner::Winner(winner) => Ok(Some(Some(winner))),
            ReleaseWinner::WaitsUntil(at) => {
                let later = Release {
                    decision_waits_until_ms: Some(at),
                    ..release.clone()
                };
                let wait_ms = at - self.clock.now_ms();
                let seconds = ((wait_ms + 999) / 1000).clamp(0, i64::from(MAX_DELAY_SECONDS));
                self.continue_release(&later, seconds as u32).await?;
                summary.early = true;
                summary.decision_waits_until = Some(local_time::rfc3339_ms(at));
                Ok(None)
            }
        }
    }

    /// Lets the slot's waiting users go, a page at a time (a cancelled campaign's are
    /// dropped): the users released in all, or None when the invocation's time ran short
    /// and the release goes on from the continuation queue.
    async fn let_go_pages(
        &self,
        release: &Release,
        cancelled: bool,
        winner: Option<&str>,
        summary: &mut ReleaseSummary,
        invocation: &Invocation,
    ) -> Result<Option<u64>, GetUsersError> {
        let mut from = Some(release.from.clone());
        let mut released = release.released;
        let mut pages = 0usize;
        while let Some(position) = from.take() {
            if pages > 0 && invocation.remaining() <= self.config.deadline_margin {
                let rest = Release {
                    from: position,
                    released,
                    ..release.clone()
                };
                self.continue_release(&rest, 0).await?;
                summary.users_released = released - release.released;
                return Ok(None);
            }
            let (users, next) = self
                .waiting
                .waiting(
                    &release.campaign_id,
                    release.slot_ms,
                    &position,
                    RELEASE_PAGE,
                )
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            let (ids, bodies): (Vec<String>, Vec<String>) = users.into_iter().unzip();
            if cancelled {
                summary.users_dropped += ids.len() as u64;
            } else {
                released += self.send_page(release, bodies, winner).await?;
            }
            // Only once they are on the queue: a release that fails before this finds them
            // again on its retry (and the ledger sends once).
            self.waiting
                .let_go(&release.campaign_id, release.slot_ms, &ids)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            pages += 1;
            from = next;
        }
        Ok(Some(released))
    }

    /// One page of the slot's users onto the users queue, each with when it was let go.
    async fn send_page(
        &self,
        release: &Release,
        bodies: Vec<String>,
        winner: Option<&str>,
    ) -> Result<u64, GetUsersError> {
        // An experiment's rest let go by a pick before the decision's slot: on time, not
        // early.
        let due = Due {
            slot_late_ms: (self.clock.now_ms() - release.slot_ms).max(0),
            released_at_ms: self.clock.wall_ms(),
        };
        let bodies: Vec<String> = bodies.into_iter().map(|b| let_go(b, due, winner)).collect();
        let mut in_flight: FuturesUnordered<_> = bodies
            .chunks(MAX_BATCH_ENTRIES)
            .map(|chunk| self.users.send_batch(chunk))
            .collect();
        let mut released = 0;
        while let Some(sent) = in_flight.next().await {
            released += sent?.sent as u64;
        }
        Ok(released)
    }

    /// The slot's release recorded (`status` reads it), and for a sweep, whoever is still
    /// waiting counted as stranded.
    async fn record_slot_release(
        &self,
        release: &Release,
        released: u64,
        summary: &mut ReleaseSummary,
    ) -> Result<(), GetUsersError> {
        self.waiting
            .record_release(
                &release.campaign_id,
                &local_time::SlotRelease {
                    slot_ms: release.slot_ms,
                    users: released,
                    released_at_ms: self.clock.now_ms(),
                    sweep: release.sweep,
                },
            )
            .await
            .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        summary.users_released = released - release.released;
        summary.complete = true;
        if release.sweep {
            summary.users_stranded = self
                .waiting
                .count(&release.campaign_id, release.slot_ms)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        }
        if summary.users_stranded > 0 {
            tracing::error!(
                campaign = %summary.campaign_id,
                slot = %summary.slot,
                users_stranded = summary.users_stranded,
                "users are still waiting after the slot's sweep: nothing will release them; run mailctl release"
            );
        }
        if release.sweep && released > 0 {
            tracing::warn!(
                campaign = %summary.campaign_id,
                slot = %summary.slot,
                users_released = released,
                "the sweep released users the slot's release did not find"
            );
        } else {
            tracing::info!(
                campaign = %summary.campaign_id,
                slot = %summary.slot,
                users_released = summary.users_released,
                sweep = release.sweep,
                "send slot released"
            );
        }
        Ok(())
    }

    /// Puts a release on the continuation queue: to go on where it stopped, to wait for
    /// the resume (the pause disabled that queue's consumer), or for its instant.
    pub(super) async fn continue_release(
        &self,
        release: &Release,
        delay_seconds: u32,
    ) -> Result<(), GetUsersError> {
        let body = serde_json::to_string(&ReleaseEvent {
            release_waiting: release.clone(),
        })
        .unwrap_or_default();
        self.continuation
            .send_batch_delayed(&[body], delay_seconds)
            .await?;
        Ok(())
    }
}

/// How often a paused campaign's release or checkpoint looks again should the continuation
/// queue's consumer still run.
pub(super) const PAUSED_LOOK_AGAIN_SECONDS: u32 = 60;
