//! What the waiting room records of a local-time campaign and `status` and `plan` show of
//! it: every slot's release and sweep, who is still waiting or stranded, how late slots and
//! emails went, and a slot's load at the send rate.

use super::{rfc3339_ms, utc_hour, LocalDelivery, LocalTimeCounts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long after a slot its sweep runs: a second one-time schedule that releases whoever
/// the slot's release did not find (held users are written at least 15 minutes before
/// their slot, so the sweep normally releases nobody).
pub const SWEEP_AFTER_MS: i64 = 15 * 60 * 1000;

/// A slot whose sweep has not run by this long after the slot never will on its own:
/// EventBridge Scheduler retries a schedule for a day (then its DLQ, alarmed).
pub const SWEEP_GIVEN_UP_AFTER_MS: i64 = SWEEP_AFTER_MS + 24 * 3600 * 1000;

/// One pass over a slot: its release at the instant, or its sweep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotRelease {
    pub slot_ms: i64,
    pub users: u64,
    pub released_at_ms: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sweep: bool,
}

/// What is recorded of a local-time campaign: every segment's counts, every slot's release
/// and sweep, and who is still in the waiting room.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitingReport {
    /// Every run's counts added up: not the campaign's figures (a re-run or a resend
    /// decides the same users again), only which slots were ever held.
    pub counts: LocalTimeCounts,
    /// Each run's own, by when it started (ms; 0 for counts recorded before runs were kept
    /// apart).
    pub runs: BTreeMap<i64, LocalTimeCounts>,
    /// Releases and sweeps, by slot.
    pub releases: Vec<SlotRelease>,
    /// The delivery the latest run started with.
    pub delivery: Option<LocalDelivery>,
    /// Users still in the waiting room, by slot (slots with none are left out).
    pub waiting_now: BTreeMap<i64, u64>,
    /// Users SendEmail handed back to a slot, the end of their quiet hours, by slot.
    pub quiet_held: BTreeMap<i64, u64>,
}

/// A slot as `status` shows it: held = released + swept + still waiting, the users the
/// waiting table had in it (one row a user, however many runs held them; by GetUsers, and
/// by SendEmail at the end of users' quiet hours). A cancelled campaign's waiting users are
/// dropped, and leave the count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotStatus {
    pub slot: String,
    pub held: u64,
    pub released: u64,
    pub swept: u64,
    pub waiting: u64,
    /// Still waiting although the slot's sweep ran (or gave up): nothing will release them;
    /// `mailctl release` does.
    pub stranded: bool,
}

/// Users still waiting for the slots of one UTC hour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HourWaiting {
    pub utc_hour: String,
    pub users: u64,
}

/// How late emails went after their users' local send time: p50, p99, max.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lateness {
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

impl Lateness {
    /// Of (lateness, how many) pairs, in any order; `None` when there are none.
    pub fn of(mut late: Vec<(i64, u64)>) -> Option<Self> {
        late.retain(|(_, n)| *n > 0);
        if late.is_empty() {
            return None;
        }
        late.sort();
        let total: u64 = late.iter().map(|(_, n)| n).sum();
        let at = |q: f64| {
            let rank = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (ms, n) in &late {
                seen += n;
                if seen >= rank {
                    return *ms;
                }
            }
            late.last().map(|(ms, _)| *ms).unwrap_or_default()
        };
        Some(Self {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: late.last().map(|(ms, _)| *ms).unwrap_or_default(),
        })
    }
}

impl WaitingReport {
    /// One segment's counts of the run started at `run_started_ms`.
    pub fn add_segment(&mut self, run_started_ms: i64, counts: &LocalTimeCounts) {
        self.counts.add(counts);
        self.runs.entry(run_started_ms).or_default().add(counts);
    }

    /// The slots whose waiting users a reader counts: those not swept yet, and those swept
    /// whose holds outnumber their releases (a hold that landed while the sweep read; a
    /// resend that held a user again is counted too, at the cost of one count). A swept
    /// slot whose releases cover its holds is left out: its count can only be 0.
    pub fn slots_to_count(&self) -> Vec<i64> {
        let mut slots: std::collections::BTreeSet<i64> =
            self.counts.waiting.keys().copied().collect();
        slots.extend(self.quiet_held.keys().copied());
        slots.extend(self.releases.iter().map(|r| r.slot_ms));
        slots
            .into_iter()
            .filter(|slot| {
                let (released, swept, sweep_ran) = self.passes(*slot);
                let held = self.counts.waiting.get(slot).copied().unwrap_or(0);
                !sweep_ran || held > released + swept
            })
            .collect()
    }

    /// Users released by the slot's release and by its sweep.
    fn passes(&self, slot_ms: i64) -> (u64, u64, bool) {
        let mut out = (0, 0, false);
        for r in self.releases.iter().filter(|r| r.slot_ms == slot_ms) {
            if r.sweep {
                out.1 += r.users;
                out.2 = true;
            } else {
                out.0 += r.users;
            }
        }
        out
    }

    /// Every slot, in time order, as of `now_ms`.
    pub fn slots(&self, now_ms: i64) -> Vec<SlotStatus> {
        let mut slots: std::collections::BTreeSet<i64> =
            self.counts.waiting.keys().copied().collect();
        slots.extend(self.quiet_held.keys().copied());
        slots.extend(self.releases.iter().map(|r| r.slot_ms));
        slots.extend(self.waiting_now.keys().copied());
        slots
            .into_iter()
            .map(|slot_ms| {
                let (released, swept, sweep_ran) = self.passes(slot_ms);
                let waiting = self.waiting_now.get(&slot_ms).copied().unwrap_or(0);
                // The sweep ran, or would have, with all its retries.
                let after_sweep = sweep_ran || now_ms > slot_ms + SWEEP_GIVEN_UP_AFTER_MS;
                SlotStatus {
                    slot: rfc3339_ms(slot_ms),
                    held: released + swept + waiting,
                    released,
                    swept,
                    waiting,
                    stranded: waiting > 0 && after_sweep,
                }
            })
            .collect()
    }

    /// Users still waiting although their slot's sweep has passed.
    pub fn stranded(&self, now_ms: i64) -> u64 {
        self.slots(now_ms)
            .iter()
            .filter(|s| s.stranded)
            .map(|s| s.waiting)
            .sum()
    }

    /// Users still waiting, by UTC hour of their slot.
    pub fn waiting_by_hour(&self) -> Vec<HourWaiting> {
        let mut hours: BTreeMap<String, u64> = BTreeMap::new();
        for (slot, n) in &self.waiting_now {
            *hours.entry(utc_hour(*slot)).or_default() += n;
        }
        hours
            .into_iter()
            .map(|(utc_hour, users)| HourWaiting { utc_hour, users })
            .collect()
    }

    /// Users held for a slot, in all, as the waiting table had them (`SlotStatus::held`): by
    /// the runs, and by SendEmail for their quiet hours, each user once however many runs
    /// held them for the slot.
    pub fn held(&self, now_ms: i64) -> u64 {
        self.slots(now_ms).iter().map(|s| s.held).sum()
    }

    /// The latest run's counts, and when it started (None: no run recorded any).
    pub fn latest_run(&self) -> Option<(i64, &LocalTimeCounts)> {
        self.runs.last_key_value().map(|(at, c)| (*at, c))
    }

    pub fn still_waiting(&self) -> u64 {
        self.waiting_now.values().sum()
    }

    /// Slots released at their instant (sweeps not counted).
    pub fn slots_released(&self) -> usize {
        self.releases.iter().filter(|r| !r.sweep).count()
    }

    /// How late the slots were released (release minus slot), weighted by their users.
    pub fn release_lateness(&self) -> Option<Lateness> {
        Lateness::of(
            self.releases
                .iter()
                .filter(|r| !r.sweep)
                .map(|r| (r.released_at_ms - r.slot_ms, r.users))
                .collect(),
        )
    }
}

/// How late a slot may finish sending after its instant before `plan` calls it late.
pub const LATE_TOLERANCE_MS: i64 = 30 * 60 * 1000;

/// One send slot under load: its emails go out at `rate` per second from its instant, or
/// after the slot before it has finished, whichever is later.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotLoad {
    pub slot: String,
    pub emails: u64,
    pub zones: Vec<String>,
    /// Seconds its emails take at the rate.
    pub seconds: f64,
    /// When its last email goes, after the slot's instant (seconds).
    pub finishes_after: f64,
}

/// The slots' load at `rate` emails per second (the stack's effective rate), in time order.
pub fn slot_loads(slots: &BTreeMap<i64, (u64, Vec<String>)>, rate: f64) -> Vec<SlotLoad> {
    let mut free_at = f64::MIN;
    slots
        .iter()
        .map(|(at, (emails, zones))| {
            let at_s = *at as f64 / 1000.0;
            let seconds = *emails as f64 / rate.max(0.001);
            let finish = free_at.max(at_s) + seconds;
            free_at = finish;
            SlotLoad {
                slot: rfc3339_ms(*at),
                emails: *emails,
                zones: zones.clone(),
                seconds: (seconds * 10.0).round() / 10.0,
                finishes_after: ((finish - at_s) * 10.0).round() / 10.0,
            }
        })
        .collect()
}
