//! `mailctl pipeline --local-time`: a local-time campaign's holds and releases in virtual
//! time. The real GetUsers holds each user of the lab's audience (`Zones`) in the waiting
//! table as DynamoDB would serve it (`waiting::LabWaitingTable`: partitions, the table's
//! quota, BatchWriteItem's unprocessed items), then, as EventBridge Scheduler would, is
//! invoked with each slot's release and sweep at their instants, its continuation queue
//! drained after each. It reports how the holds went, each slot's release (users a second
//! from its instant to its last user on the users queue), how late after their local send
//! time the users went onto the users queue (p50, p99; `--through-sending` goes on to SES
//! and measures it there: `local_sending`) and the table's throttles; lost and twice count
//! users against the audience.

use super::directory::{LabDirectory, Zones};
pub use super::local_sending::SlotSending;
use super::local_sending::SlotStages;
use super::sending::{cpu_time, Released};
use super::stages::{get_users, GetUsersQueues};
use super::waiting::{LabWaitingTable, PARTITION_WRITES};
use super::PipelineOptions;
use crate::rate::latency::{millis, Cpu};
use crate::rate::queue::LabQueue;
use anyhow::{bail, Result};
use mailflow::domain::local_time::{self, shards::new_slot_shards};
use mailflow::runtime::Invocation;
use mailflow::stages::get_users::RELEASE_LANES;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The zone of every user of a one-zone run.
pub const ONE_ZONE: &str = "Europe/Berlin";
/// The local send time, on the day after the run starts.
const LOCAL_TIME: &str = "09:00";

#[derive(Clone, Debug, clap::Args)]
pub struct LocalTimeOptions {
    /// Run a local-time campaign: holds, then each slot's release at its instant.
    #[arg(long)]
    pub local_time: bool,
    /// Every user in one zone (Europe/Berlin): one slot, filled at GetUsers' pace.
    #[arg(long)]
    pub one_zone: bool,
    /// Shards of a new slot (8 before they were sized to GetUsers' peak).
    #[arg(long, default_value_t = new_slot_shards())]
    pub waiting_shards: u8,
    /// Shards a release takes at once (1 before the release went in lanes).
    #[arg(long, default_value_t = RELEASE_LANES)]
    pub release_lanes: usize,
    /// Past the users queue: each released user rendered and sent (CreateEmails, SendEmail
    /// and SES's events at the quota), lateness measured at SES's acceptance.
    #[arg(long)]
    pub through_sending: bool,
}

impl LocalTimeOptions {
    /// The waiting table and release before: eight shards, one at a time.
    pub fn before(mut self) -> Self {
        self.waiting_shards = 8;
        self.release_lanes = 1;
        self
    }
}

/// One slot's release.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotFigures {
    pub slot: String,
    pub users: usize,
    /// From the slot's instant to its last user on the users queue.
    pub release_s: f64,
    pub users_per_second: f64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTimeReport {
    pub users: usize,
    pub one_zone: bool,
    pub waiting_shards: u8,
    pub release_lanes: usize,
    /// GetUsers' run: how long it took, and its error if a segment failed.
    pub hold_s: f64,
    pub hold_error: Option<String>,
    pub slots: Vec<SlotFigures>,
    /// The busiest slot's release, users a second.
    pub release_per_second: f64,
    /// After the local send time, onto the users queue.
    pub late_p50_ms: i64,
    pub late_p99_ms: i64,
    pub write_throttles: u64,
    pub read_throttles: u64,
    /// The most write units one shard key took in a second.
    pub peak_key_writes_per_second: f64,
    pub write_units: f64,
    pub read_units: f64,
    /// EventBridge Scheduler: `CreateSchedule` calls, and those it throttled.
    pub schedules_created: f64,
    pub schedule_throttles: u64,
    /// Audience users never released, released more than once, still in the table.
    pub lost: usize,
    pub twice: usize,
    pub still_waiting: usize,
    /// With `--through-sending`: what the sending made of them.
    pub sending: Option<SlotSending>,
}

const CAMPAIGN: &str = "weekly-2026-W47";

/// One local-time campaign, on the runtime's paused clock (followed by the stages' clock).
pub async fn run_one(options: &PipelineOptions, seed: u64) -> Result<LocalTimeReport> {
    let local = &options.local_time;
    let [get_cpu, ..] = options.cpu_us[..] else {
        bail!("--cpu-us takes three figures: GetUsers, CreateEmails, SendEmail");
    };
    super::refuse_zero_daily_quota(options)?;
    let zones = match local.one_zone {
        true => Zones::One(ONE_ZONE),
        false => Zones::Mix,
    };
    let per_user = cpu_time(get_cpu, options.get_users_memory_mb);
    let cpu = Arc::new(Cpu::default());
    let waiting = Arc::new(LabWaitingTable::new(
        local.waiting_shards,
        millis(&options.store_latency_ms)?,
        cpu.clone(),
        per_user,
        &options.region,
        seed,
    ));
    let directory = LabDirectory::zoned(options.users, millis(&options.mongo_latency_ms)?, zones);
    // Through sending, GetUsers fills the users queue the stages after it read.
    let sending = match local.through_sending {
        true => Some(SlotStages::start(options, seed, directory.clone())?),
        false => None,
    };
    let users = match &sending {
        Some(sending) => sending.rig.users.clone(),
        None => Arc::new(LabQueue::new(Duration::from_secs(360), 5)),
    };
    let released: Released = Arc::default();
    let continuation = Arc::new(LabQueue::new(Duration::from_secs(900), 5));
    let stage = get_users(
        options,
        directory,
        GetUsersQueues {
            users,
            continuation: continuation.clone(),
            enqueued: Arc::default(),
            released: Some(released.clone()),
            cpu,
            per_user,
            sqs: millis(&options.sqs_latency_ms)?,
        },
        waiting.clone(),
    )?
    .with_release_lanes(local.release_lanes);

    let now_ms = mailflow::domain::ledger::epoch_ms(mailflow::runtime::clock::now()) as i64;
    let tomorrow = &local_time::rfc3339_ms(now_ms + 86_400_000)[..10];
    let started = Instant::now();
    let held = invoke(
        &stage,
        serde_json::json!({"campaignId": CAMPAIGN, "localTime": LOCAL_TIME, "sendDate": tomorrow}),
    )
    .await;
    let hold_s = started.elapsed().as_secs_f64();
    drain_continuations(&stage, &continuation).await;

    // Scheduler: each slot's release, then its sweep, at their instants.
    let mut schedules: Vec<(i64, serde_json::Value)> =
        (mailflow::runtime::lock(&waiting.room().schedules).iter())
            .map(|((_, schedule), (_, event))| (schedule.fires_at_ms(), event.clone()))
            .collect();
    schedules.sort_by_key(|(at, _)| *at);
    for (at_ms, event) in schedules {
        let now_ms = mailflow::domain::ledger::epoch_ms(mailflow::runtime::clock::now()) as i64;
        tokio::time::sleep(Duration::from_millis((at_ms - now_ms).max(0) as u64)).await;
        if let Some(sending) = &sending {
            sending.slot_begins();
        }
        if let Err(e) = invoke(&stage, event).await {
            tracing::warn!(error = %e, "a release failed");
        }
        drain_continuations(&stage, &continuation).await;
    }
    let sent = match sending {
        Some(sending) => Some(sending.finish(options, &released).await?),
        None => None,
    };
    Ok(LocalTimeReport {
        sending: sent,
        ..report(options, &waiting, &released, hold_s, held.err())
    })
}

type LabGetUsers = mailflow::stages::get_users::GetUsers<
    LabDirectory,
    super::sending::Sending,
    mailflow::ports::memory::MemoryCampaigns,
    Arc<LabWaitingTable>,
>;

async fn invoke(stage: &LabGetUsers, event: serde_json::Value) -> Result<(), String> {
    let invocation = Invocation::with_timeout("get-users", Duration::from_secs(900));
    stage
        .handle(event, &invocation)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The continuation queue until it is empty (a release that went on, one put back until
/// its instant), a record at a time as its event source mapping would deliver it.
async fn drain_continuations(stage: &LabGetUsers, continuation: &LabQueue) {
    while continuation.left().0 > 0 {
        let event = continuation.receive(1).unwrap_or_default();
        if event.records.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        let failed = match invoke(stage, serde_json::to_value(&event).unwrap_or_default()).await {
            Ok(()) => Vec::new(),
            Err(_) => (event.records.iter())
                .filter_map(|r| r.message_id.clone())
                .collect(),
        };
        continuation.settle(&event, &failed);
    }
}

/// Who went onto the users queue when (the releases as GetUsers sent them), against the
/// audience.
fn report(
    options: &PipelineOptions,
    waiting: &LabWaitingTable,
    released: &Released,
    hold_s: f64,
    hold_error: Option<String>,
) -> LocalTimeReport {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut late: Vec<i64> = Vec::new();
    // slot (ms) -> (users, latest lateness)
    let mut slots: BTreeMap<i64, (usize, i64)> = BTreeMap::new();
    for (user, due) in mailflow::runtime::lock(released).iter() {
        *seen.entry(user.clone()).or_default() += 1;
        late.push(due.slot_late_ms);
        let slot = due.released_at_ms - due.slot_late_ms;
        let entry = slots.entry(slot / 60_000 * 60_000).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(due.slot_late_ms);
    }
    late.sort_unstable();
    let at = |share: f64| {
        late.get(((late.len().max(1) - 1) as f64 * share).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    let slots: Vec<SlotFigures> = (slots.into_iter())
        .map(|(slot, (n, last_ms))| SlotFigures {
            slot: local_time::rfc3339_ms(slot),
            users: n,
            release_s: last_ms as f64 / 1000.0,
            users_per_second: n as f64 / (last_ms as f64 / 1000.0).max(1e-3),
        })
        .collect();
    let busiest = slots.iter().max_by_key(|s| s.users);
    let counts = waiting.limits.counts();
    let units = |name: &str| counts.get(name).map_or(0.0, |c| c.units);
    let throttles = |name: &str| counts.get(name).map_or(0, |c| c.throttles);
    let still_waiting = (mailflow::runtime::lock(&waiting.room().held).values())
        .map(|slot| slot.len())
        .sum();
    let local = &options.local_time;
    LocalTimeReport {
        users: options.users,
        one_zone: local.one_zone,
        waiting_shards: local.waiting_shards,
        release_lanes: local.release_lanes,
        hold_s,
        hold_error,
        release_per_second: busiest.map_or(0.0, |s| s.users_per_second),
        slots,
        late_p50_ms: at(0.5),
        late_p99_ms: at(0.99),
        write_throttles: throttles(PARTITION_WRITES.name) + throttles("waiting table writes"),
        read_throttles: throttles("waiting partition reads") + throttles("waiting table reads"),
        peak_key_writes_per_second: counts
            .get(PARTITION_WRITES.name)
            .map_or(0.0, |c| c.peak_key_per_second),
        write_units: units(PARTITION_WRITES.name),
        read_units: units("waiting partition reads"),
        schedules_created: units(waiting.scheduler.name),
        schedule_throttles: throttles(waiting.scheduler.name),
        lost: (0..options.users)
            .filter(|i| !seen.contains_key(&LabDirectory::id(*i)))
            .count(),
        twice: seen.values().filter(|n| **n > 1).count(),
        still_waiting,
        sending: None,
    }
}

/// The runs as Markdown: one row per run.
pub fn markdown(reports: &[LocalTimeReport]) -> String {
    let mut out = String::from(
        "| users | zones | shards | lanes | holds (s) | hold error | busiest slot's release (users/s) | late p50 / p99 (s) | write throttles | peak key WCU/s | WCU / RCU | lost / twice / waiting |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {} | {:.0} | {:.1} / {:.1} | {} | {:.0} | {:.0} / {:.0} | {} / {} / {} |\n",
            r.users,
            if r.one_zone { ONE_ZONE } else { "mix" },
            r.waiting_shards,
            r.release_lanes,
            r.hold_s,
            r.hold_error.as_deref().unwrap_or("none"),
            r.release_per_second,
            r.late_p50_ms as f64 / 1000.0,
            r.late_p99_ms as f64 / 1000.0,
            r.write_throttles,
            r.peak_key_writes_per_second,
            r.write_units,
            r.read_units,
            r.lost,
            r.twice,
            r.still_waiting,
        ));
    }
    if reports.iter().any(|r| r.sending.is_some()) {
        out.push_str(
            "\nThrough sending (lateness at SES's acceptance; the busiest slot from its instant):\n\n| sent late p50 / p99 (s) | busiest slot's emails | its first / last email (s) | its steady emails/s / quota | SES throttles | lost / twice / dead-lettered | events lag p99 (s) |\n|---|---|---|---|---|---|---|\n",
        );
        for s in reports.iter().filter_map(|r| r.sending.as_ref()) {
            out.push_str(&format!(
                "| {:.1} / {:.1} | {} | {:.1} / {:.1} | {:.2} | {} | {} / {} / {} | {} |\n",
                s.sent_late_p50_ms as f64 / 1000.0,
                s.sent_late_p99_ms as f64 / 1000.0,
                s.busiest_slot_emails,
                s.busiest_first_s,
                s.busiest_last_s,
                s.busiest_steady_share,
                s.throttles,
                s.lost,
                s.twice,
                s.dead_lettered,
                s.events_lag_p99_s
                    .map_or("beyond the run".to_string(), |l| format!("{l:.1}")),
            ));
        }
    }
    for r in reports.iter().take(1) {
        out.push_str("\nSlots (first run): ");
        let slots: Vec<String> = (r.slots.iter())
            .map(|s| format!("{} {} users in {:.1} s", s.slot, s.users, s.release_s))
            .collect();
        out.push_str(&slots.join("; "));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
