//! The release of a send slot: at its instant (or the experiment's decision it waits for),
//! its waiting users onto the users queue with the winner, a page at a time; a sweep a
//! quarter of an hour later for whoever the release did not find; a paused campaign's
//! release put back until the resume, a cancelled one's users dropped.

use super::experiment::ReleaseWinner;
use super::hold::let_go;
use super::{GetUsers, GetUsersError};
use crate::domain::campaign::CampaignId;
use crate::domain::campaign_state::{CampaignState, Hold};
use crate::domain::local_time::shards::RELEASE_LANE_PER_SECOND;
use crate::domain::local_time::{self, Due};
use crate::ports::{
    CampaignStates, OutgoingQueue, ReleasePosition, SlotSchedule, UserDirectory, WaitingRoom,
    MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS,
};
use crate::runtime::Invocation;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// The release of one send slot (`{"releaseWaiting": {...}}`, as its one-time schedule
/// invokes GetUsers); one that needs another invocation continues on the continuation queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub campaign_id: CampaignId,
    pub slot_ms: i64,
    /// Where the release starts: the whole slot for a schedule's event (a sweep's
    /// backwards); an event from before the release took several shards at once names the
    /// shard it had got to.
    #[serde(default)]
    pub from: ReleasePosition,
    /// The shards still to release, each where it had got to, in the order they are taken
    /// (a release that went on from an invocation that ran short). Empty: from `from`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<ReleasePosition>,
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

/// A slot's shards released at once, each lane paced to `RELEASE_LANE_PER_SECOND` (a
/// delete each user, on its shard's partition): every shard of a new slot (36) at once is
/// 25,200 users a second; 48 lanes at most keep a release within the table's 40,000 write
/// units (`aws_limits::DYNAMODB_TABLE_WRITE_UNITS`).
pub const RELEASE_LANES: usize = 48;

/// The shards still to release from `from` (a schedule's event: all of them), in the order
/// they are taken: first to last, or last to first for a sweep.
fn lanes_from(from: &ReleasePosition, shards: u8) -> VecDeque<ReleasePosition> {
    let order: Vec<u8> = match from.backwards {
        true => (0..shards).rev().collect(),
        false => (0..shards).collect(),
    };
    (order.into_iter().skip(usize::from(from.shard)).enumerate())
        .map(|(i, shard)| ReleasePosition {
            shard,
            after: if i == 0 { from.after.clone() } else { None },
            backwards: false,
        })
        .collect()
}

/// What one lane did in an invocation: users released (or dropped), and where it stopped
/// when the invocation's time ran short.
struct LaneDone {
    users: u64,
    stopped_at: Option<ReleasePosition>,
}

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
        let summary = ReleaseSummary {
            campaign_id: release.campaign_id.to_string(),
            slot: local_time::rfc3339_ms(release.slot_ms),
            sweep: release.sweep,
            ..Default::default()
        };
        SlotReleaser {
            stage: self,
            release,
            summary,
        }
        .run(invocation)
        .await
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

/// One slot's release under way: the release asked for and what it has done so far.
struct SlotReleaser<'a, D, Q, S, W> {
    stage: &'a GetUsers<D, Q, S, W>,
    release: Release,
    summary: ReleaseSummary,
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom>
    SlotReleaser<'_, D, Q, S, W>
{
    async fn run(mut self, invocation: &Invocation) -> Result<ReleaseSummary, GetUsersError> {
        // Read afresh, not from the cache: a slot is released once, and a pause just made
        // must hold it.
        let state = self
            .stage
            .campaigns
            .states()
            .state(self.release.campaign_id.as_str())
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        if self.not_yet(&state).await? {
            return Ok(self.summary);
        }
        let cancelled = matches!(state.hold, Some(Hold::Cancelled(_)));
        // The rest of an experiment's audience goes with the winner (decided now if no one
        // has yet); a cancelled campaign decides nothing.
        let winner = match cancelled {
            true => None,
            false => match self.winner_for(&state).await? {
                Some(winner) => winner,
                None => return Ok(self.summary),
            },
        };
        let Some(released) = self
            .let_go_pages(cancelled, winner.as_deref(), invocation)
            .await?
        else {
            return Ok(self.summary);
        };
        if cancelled {
            self.summary.cancelled = true;
            tracing::info!(campaign = %self.release.campaign_id, slot = %self.summary.slot, users_dropped = self.summary.users_dropped, "campaign cancelled: the slot's waiting users are dropped, not released");
            return Ok(self.summary);
        }
        self.record_slot_release(released).await?;
        Ok(self.summary)
    }

    /// Whether the release must wait: before its instant (unless an experiment's decision
    /// slot whose winner was picked by hand), or while the campaign is paused. Either way it
    /// is put back on the continuation queue.
    async fn not_yet(&mut self, state: &CampaignState) -> Result<bool, GetUsersError> {
        // An experiment's decision slot goes as soon as the winner is picked by hand (with
        // local time, it is some zone's local time too: it waits for it).
        let picked = state.decision.is_some()
            && (state.experiment.as_ref())
                .is_some_and(|e| !e.local_time && e.decide_at_ms == Some(self.release.slot_ms));
        let early_ms = self.release.not_before_ms() - self.stage.clock.now_ms();
        if early_ms > 0 && !picked {
            self.summary.early = true;
            let seconds = ((early_ms + 999) / 1000).min(i64::from(MAX_DELAY_SECONDS)) as u32;
            self.stage.continue_release(&self.release, seconds).await?;
            return Ok(true);
        }
        if matches!(state.hold, Some(Hold::Paused(_))) {
            self.summary.paused = true;
            // The pause stopped this queue's consumer; should it still run (a disable not
            // yet applied, or failed), the release looks again in a minute, not at once.
            self.stage
                .continue_release(&self.release, PAUSED_LOOK_AGAIN_SECONDS)
                .await?;
            tracing::info!(campaign = %self.release.campaign_id, slot = %self.summary.slot, sweep = self.release.sweep, "campaign paused: the slot's release waits for the resume");
            return Ok(true);
        }
        Ok(false)
    }

    /// The winner the slot's users go with (Some(None): no experiment's); None: the decision
    /// waits for the test group's last email, and the release is put back until then.
    async fn winner_for(
        &mut self,
        state: &CampaignState,
    ) -> Result<Option<Option<String>>, GetUsersError> {
        match self
            .stage
            .release_winner(&self.release.campaign_id, state, self.release.slot_ms)
            .await?
        {
            ReleaseWinner::NoExperiment => Ok(Some(None)),
            ReleaseWinner::Winner(winner) => Ok(Some(Some(winner))),
            ReleaseWinner::WaitsUntil(at) => {
                let later = Release {
                    decision_waits_until_ms: Some(at),
                    ..self.release.clone()
                };
                let wait_ms = at - self.stage.clock.now_ms();
                let seconds = ((wait_ms + 999) / 1000).clamp(0, i64::from(MAX_DELAY_SECONDS));
                self.stage.continue_release(&later, seconds as u32).await?;
                self.summary.early = true;
                self.summary.decision_waits_until = Some(local_time::rfc3339_ms(at));
                Ok(None)
            }
        }
    }

    /// Lets the slot's waiting users go (a cancelled campaign's are dropped), its shards in
    /// lanes, `release_lanes` at once, each a page at a time: the users released in all, or
    /// None when the invocation's time ran short and the release goes on from the
    /// continuation queue with every shard where it had got to.
    async fn let_go_pages(
        &mut self,
        cancelled: bool,
        winner: Option<&str>,
        invocation: &Invocation,
    ) -> Result<Option<u64>, GetUsersError> {
        let mut queue: VecDeque<ReleasePosition> = match self.release.lanes.is_empty() {
            true => {
                let shards = self
                    .stage
                    .waiting
                    .shards(&self.release.campaign_id, self.release.slot_ms)
                    .await
                    .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
                lanes_from(&self.release.from, shards)
            }
            false => self.release.lanes.iter().cloned().collect(),
        };
        let (mut users, mut stopped) = (0u64, Vec::new());
        {
            let this = &*self;
            let mut running = FuturesUnordered::new();
            let mut started_any = false;
            loop {
                // Every lane goes at least one page an invocation (the release always moves
                // on); no new one starts once the time runs short.
                while running.len() < this.stage.release_lanes
                    && (!started_any || !this.short(invocation))
                {
                    let Some(lane) = queue.pop_front() else { break };
                    started_any = true;
                    running.push(this.lane(lane, cancelled, winner, invocation));
                }
                let Some(done) = running.next().await else {
                    break;
                };
                let done: LaneDone = done?;
                users += done.users;
                stopped.extend(done.stopped_at);
                if !stopped.is_empty() && running.is_empty() {
                    break;
                }
            }
        }
        if cancelled {
            self.summary.users_dropped += users;
        }
        let released = self.release.released + if cancelled { 0 } else { users };
        if !stopped.is_empty() || !queue.is_empty() {
            stopped.extend(queue);
            let rest = Release {
                lanes: stopped,
                released,
                ..self.release.clone()
            };
            self.stage.continue_release(&rest, 0).await?;
            self.summary.users_released = released - self.release.released;
            return Ok(None);
        }
        Ok(Some(released))
    }

    /// The invocation's time is short: what is left goes on from the continuation queue.
    fn short(&self, invocation: &Invocation) -> bool {
        invocation.remaining() <= self.stage.config.deadline_margin
    }

    /// One shard, a page at a time from `position`, no faster than its partition's share:
    /// each page onto the users queue (or dropped), then out of the waiting room.
    async fn lane(
        &self,
        mut position: ReleasePosition,
        cancelled: bool,
        winner: Option<&str>,
        invocation: &Invocation,
    ) -> Result<LaneDone, GetUsersError> {
        let mut users = 0u64;
        let mut pages = 0usize;
        loop {
            if pages > 0 && self.short(invocation) {
                return Ok(LaneDone {
                    users,
                    stopped_at: Some(position),
                });
            }
            let page_started = tokio::time::Instant::now();
            let (page, next) = self
                .stage
                .waiting
                .waiting(
                    &self.release.campaign_id,
                    self.release.slot_ms,
                    &position,
                    RELEASE_PAGE,
                )
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            let (ids, bodies): (Vec<String>, Vec<String>) = page.into_iter().unzip();
            users += match cancelled {
                true => ids.len() as u64,
                false => self.send_page(bodies, winner).await?,
            };
            // Only once they are on the queue: a release that fails before this finds them
            // again on its retry (and the ledger sends once).
            self.stage
                .waiting
                .let_go(
                    &self.release.campaign_id,
                    self.release.slot_ms,
                    position.shard,
                    &ids,
                )
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
            pages += 1;
            let Some(next) = next else {
                return Ok(LaneDone {
                    users,
                    stopped_at: None,
                });
            };
            position = next;
            let paced = Duration::from_secs_f64(ids.len() as f64 / RELEASE_LANE_PER_SECOND);
            tokio::time::sleep_until(page_started + paced).await;
        }
    }

    /// One page of the slot's users onto the users queue, each with when it was let go.
    async fn send_page(
        &self,
        bodies: Vec<String>,
        winner: Option<&str>,
    ) -> Result<u64, GetUsersError> {
        // An experiment's rest let go by a pick before the decision's slot: on time, not
        // early.
        let due = Due {
            slot_late_ms: (self.stage.clock.now_ms() - self.release.slot_ms).max(0),
            released_at_ms: self.stage.clock.wall_ms(),
        };
        let bodies: Vec<String> = bodies.into_iter().map(|b| let_go(b, due, winner)).collect();
        let mut in_flight: FuturesUnordered<_> = bodies
            .chunks(MAX_BATCH_ENTRIES)
            .map(|chunk| self.stage.users.send_batch(chunk))
            .collect();
        let mut released = 0;
        while let Some(sent) = in_flight.next().await {
            released += sent?.sent as u64;
        }
        Ok(released)
    }

    /// The slot's release recorded (`status` reads it), and for a sweep, whoever is still
    /// waiting counted as stranded.
    async fn record_slot_release(&mut self, released: u64) -> Result<(), GetUsersError> {
        self.stage
            .waiting
            .record_release(
                &self.release.campaign_id,
                &local_time::SlotRelease {
                    slot_ms: self.release.slot_ms,
                    users: released,
                    released_at_ms: self.stage.clock.now_ms(),
                    sweep: self.release.sweep,
                },
            )
            .await
            .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        self.summary.users_released = released - self.release.released;
        self.summary.complete = true;
        if self.release.sweep {
            self.summary.users_stranded = self
                .stage
                .waiting
                .count(&self.release.campaign_id, self.release.slot_ms)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        }
        if self.summary.users_stranded > 0 {
            tracing::error!(
                campaign = %self.summary.campaign_id,
                slot = %self.summary.slot,
                users_stranded = self.summary.users_stranded,
                "users are still waiting after the slot's sweep: nothing will release them; run mailctl release"
            );
        }
        if self.release.sweep && released > 0 {
            tracing::warn!(
                campaign = %self.summary.campaign_id,
                slot = %self.summary.slot,
                users_released = released,
                "the sweep released users the slot's release did not find"
            );
        } else {
            tracing::info!(
                campaign = %self.summary.campaign_id,
                slot = %self.summary.slot,
                users_released = self.summary.users_released,
                sweep = self.release.sweep,
                "send slot released"
            );
        }
        Ok(())
    }
}

/// How often a paused campaign's release or checkpoint looks again should the continuation
/// queue's consumer still run.
pub(super) const PAUSED_LOOK_AGAIN_SECONDS: u32 = 60;

#[cfg(test)]
mod tests;
