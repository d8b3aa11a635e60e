//! Over 450 lines because hold, release, sweep and the paused and cancelled releases share
//! one reading of the waiting room: apart, each would repeat it.
//!
//! The local-time half of GetUsers: when each user of a run gets their email (now, with a
//! short SQS delay, or held for their slot), holding them in the waiting room with the
//! slot's one-time release schedule, and releasing a slot onto the users queue at its
//! instant.

use super::experiment::ReleaseWinner;
use super::{GetUsers, GetUsersError, Pending, LOCAL_FUNCTION_ARN};
use crate::domain::campaign::{Campaign, CampaignId, Hold};
use crate::domain::experiment::Experiment;
use crate::domain::guardrails::QuietPolicy;
use crate::domain::local_time::{self, Delivery, Due, LocalDelivery};
use crate::domain::messages::UserMessage;
use crate::ports::{
    CampaignStates, Clock, OutgoingQueue, ReleasePosition, SendReport, SlotSchedule, StoreError,
    SystemClock, UserDirectory, WaitingRoom, MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS,
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
    /// When a user of the run gets their email, counted, and their zone's name (SendEmail
    /// reads quiet hours and calendar-day caps in it). A user whose time falls in their
    /// quiet hours waits for their end (policy defer). `held_until`: the rest of an A/B
    /// experiment waits for its decision (at their local time after it, with local time),
    /// always in the waiting room, whose release gives them the winner.
    pub(super) fn when(
        &self,
        delivery: Option<&LocalDelivery>,
        zone: &local_time::ZoneField,
        held_until: Option<i64>,
        counts: &mut local_time::LocalTimeCounts,
    ) -> (When, Option<String>) {
        let now_ms = self.clock.now_ms();
        let (mut at_ms, tz, on_a_slot) = match delivery {
            None => {
                let tz = zone.own_zone();
                let zone_name = tz.as_ref().and_then(|tz| tz.iana_name()).map(str::to_owned);
                if self.config.quiet_hours.is_none() && held_until.is_none() {
                    return (When::Now(None), zone_name);
                }
                let tz = tz.unwrap_or_else(|| self.config.local_time.fallback_zone.zone());
                (now_ms, tz, false)
            }
            Some(delivery) => {
                let (decided, source) = delivery.delivery(zone);
                counts.count_zone(source);
                let tz = delivery.zone_for(zone).0;
                match decided {
                    // The rest of an experiment goes at its local time after the decision,
                    // which has not passed: a zone passed at the start is no reason to skip
                    // it days later.
                    Delivery::Skip if held_until.is_none() => {
                        counts.passed_skipped += 1;
                        return (When::Never, None);
                    }
                    // Not in the lateness figures (`lateMs` is how late the pipeline let a
                    // user go, a health signal): counted as passedSentNow instead.
                    // The rest of an experiment is counted held, not by its local time.
                    Delivery::Now | Delivery::Skip => {
                        counts.passed_sent_now += u64::from(held_until.is_none());
                        (now_ms, tz, false)
                    }
                    Delivery::NextDay(at_ms)
                    | Delivery::AfterWindow(at_ms)
                    | Delivery::At(at_ms) => {
                        match decided {
                            _ if held_until.is_some() => {}
                            Delivery::NextDay(_) => counts.passed_next_day += 1,
                            Delivery::AfterWindow(_) => counts.next_day_after_window += 1,
                            _ => {}
                        }
                        (at_ms, tz, true)
                    }
                }
            }
        };
        let zone_name = tz.iana_name().map(str::to_owned);
        if let Some(until) = held_until.filter(|until| at_ms < *until) {
            at_ms = Experiment::rest_goes_at(until, delivery, &tz);
        }
        let quiet = self
            .config
            .quiet_hours
            .filter(|q| q.policy == QuietPolicy::Defer)
            .and_then(|q| q.quiet_until(at_ms.max(now_ms), &tz));
        if let Some(until) = quiet {
            counts.quiet_deferred += 1;
            at_ms = until;
        }
        let wait_ms = at_ms - now_ms;
        let when = if held_until.is_some() {
            // Held even when near: only the release lets them go with the winner (a user
            // held within 15 minutes of it is found by its sweep, if not by the release).
            counts.experiment_held += 1;
            *counts.waiting.entry(at_ms).or_default() += 1;
            When::Slot(at_ms)
        } else if wait_ms <= 0 && !on_a_slot {
            When::Now(None)
        } else if wait_ms <= 0 {
            // Its time is now (or passed within the start grace): on time.
            counts.due_now += 1;
            When::Now(Some(Due {
                slot_late_ms: -wait_ms,
                released_at_ms: SystemClock.now_ms(),
            }))
        } else if wait_ms <= DELAY_WITHIN_MS {
            counts.delayed += 1;
            When::Delayed(at_ms)
        } else {
            *counts.waiting.entry(at_ms).or_default() += 1;
            When::Slot(at_ms)
        };
        (when, zone_name)
    }

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
        // An experiment's decision slot goes as soon as the winner is picked by hand (with
        // local time, it is some zone's local time too: it waits for it).
        let picked = state.decision.is_some()
            && (state.experiment.as_ref())
                .is_some_and(|e| !e.local_time && e.decide_at_ms == Some(release.slot_ms));
        let early_ms = release.not_before_ms() - self.clock.now_ms();
        if early_ms > 0 && !picked {
            summary.early = true;
            let seconds = ((early_ms + 999) / 1000).min(i64::from(MAX_DELAY_SECONDS)) as u32;
            self.continue_release(&release, seconds).await?;
            return Ok(summary);
        }
        let hold = state.hold.clone();
        let cancelled = matches!(hold, Some(Hold::Cancelled(_)));
        if matches!(hold, Some(Hold::Paused(_))) {
            summary.paused = true;
            // The pause stopped this queue's consumer; should it still run (a disable not
            // yet applied, or failed), the release looks again in a minute, not at once.
            self.continue_release(&release, PAUSED_LOOK_AGAIN_SECONDS)
                .await?;
            tracing::info!(campaign = %release.campaign_id, slot = %summary.slot, sweep = release.sweep, "campaign paused: the slot's release waits for the resume");
            return Ok(summary);
        }
        // The rest of an experiment's audience goes with the winner (decided now if no one
        // has yet); a cancelled campaign decides nothing.
        let winner = match cancelled {
            true => None,
            false => match self
                .release_winner(&release.campaign_id, &state, release.slot_ms)
                .await?
            {
                ReleaseWinner::NoExperiment => None,
                ReleaseWinner::Winner(winner) => Some(winner),
                ReleaseWinner::WaitsUntil(at) => {
                    let later = Release {
                        decision_waits_until_ms: Some(at),
                        ..release
                    };
                    let wait_ms = at - self.clock.now_ms();
                    let seconds = ((wait_ms + 999) / 1000).clamp(0, i64::from(MAX_DELAY_SECONDS));
                    self.continue_release(&later, seconds as u32).await?;
                    summary.early = true;
                    summary.decision_waits_until = Some(local_time::rfc3339_ms(at));
                    return Ok(summary);
                }
            },
        };
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
                return Ok(summary);
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
                // An experiment's rest let go by a pick before the decision's slot: on time,
                // not early.
                let due = Due {
                    slot_late_ms: (self.clock.now_ms() - release.slot_ms).max(0),
                    released_at_ms: SystemClock.now_ms(),
                };
                let bodies: Vec<String> = bodies
                    .into_iter()
                    .map(|b| let_go(b, due, winner.as_deref()))
                    .collect();
                let mut in_flight: FuturesUnordered<_> = bodies
                    .chunks(MAX_BATCH_ENTRIES)
                    .map(|chunk| self.users.send_batch(chunk))
                    .collect();
                while let Some(sent) = in_flight.next().await {
                    released += sent?.sent as u64;
                }
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
        if cancelled {
            summary.cancelled = true;
            tracing::info!(campaign = %release.campaign_id, slot = %summary.slot, users_dropped = summary.users_dropped, "campaign cancelled: the slot's waiting users are dropped, not released");
            return Ok(summary);
        }
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
        Ok(summary)
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
                released_at_ms: SystemClock.now_ms() + seconds * 1000,
            };
            let bodies: Vec<String> = bodies.into_iter().map(|b| let_go(b, due, None)).collect();
            Ok(self
                .users
                .send_batch_delayed(&bodies, seconds as u32)
                .await?)
        })
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
fn let_go(body: String, due: Due, winner: Option<&str>) -> String {
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

/// A user due within this goes onto the users queue with an SQS delay (at most 15 minutes)
/// instead of into the waiting room. So every hold is decided more than 15 minutes before
/// its slot, and written before the invocation that decided it ends (Lambda's longest is 15
/// minutes): a slot's holds are all stored before its release can fire.
pub(crate) const DELAY_WITHIN_MS: i64 = MAX_DELAY_SECONDS as i64 * 1000;

/// How often a paused campaign's release or checkpoint looks again should the continuation
/// queue's consumer still run.
pub(super) const PAUSED_LOOK_AGAIN_SECONDS: u32 = 60;

/// Users held per BatchWriteItem round (four calls of 25).
pub(super) const HOLD_BATCH: usize = 100;

/// What happens to one user of a run (with when a local-time one is let go).
pub(super) enum When {
    Now(Option<Due>),
    /// Local time within 15 minutes, at this instant: enqueued invisible until it (the
    /// delay worked out when the batch is sent).
    Delayed(i64),
    /// Held until this instant's release.
    Slot(i64),
    /// Passed, and the policy says skip.
    Never,
}
