//! `mailctl pipeline --local-time --through-sending`: a local-time campaign past the users
//! queue. The users each slot releases go through the real CreateEmails and SendEmail (and
//! SES's events to SesEvents) on the pipeline's ports, sized as RateControl sizes them for
//! the quota, so a slot's lateness is measured where it counts: at SES's acceptance. A
//! mapping idle at a slot's instant scales from five environments again (`Ramp::restart`),
//! as Lambda's does after a quiet spell.

use super::directory::LabDirectory;
use super::sending::Released;
use super::stages::{start_stages_after_get_users, Rig, Sizing};
use super::PipelineOptions;
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the sending made of the released users.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotSending {
    /// After the local send time, at SES's acceptance (p50, p99).
    pub sent_late_p50_ms: i64,
    pub sent_late_p99_ms: i64,
    /// The busiest slot: its emails, its first and last acceptance after its instant, and
    /// its emails a second between the 10th and the 90th percentile as a share of the quota.
    pub busiest_slot_emails: usize,
    pub busiest_first_s: f64,
    pub busiest_last_s: f64,
    pub busiest_steady_share: f64,
    pub throttles: usize,
    /// Released users SES never accepted, accepted more than once, and records moved to a
    /// DLQ (users and emails queues).
    pub lost: usize,
    pub twice: usize,
    pub dead_lettered: usize,
    pub events_lag_p99_s: Option<f64>,
}

/// CreateEmails, SendEmail and SesEvents running on a campaign's ports.
pub(super) struct SlotStages {
    pub(super) rig: Rig,
    tasks: Vec<JoinHandle<()>>,
    events_environments: u32,
    /// The run's start, on both clocks: acceptances are instants, dues are epoch ms.
    started: (Instant, i64),
}

impl SlotStages {
    /// The stages on `directory`'s users (GetUsers sends to `rig.users`).
    pub(super) fn start(
        options: &PipelineOptions,
        seed: u64,
        directory: LabDirectory,
    ) -> Result<Self> {
        let started = Instant::now();
        let started_ms = mailflow::domain::ledger::epoch_ms(mailflow::runtime::clock::now()) as i64;
        let sizing = Sizing::of(options);
        let mut rig = Rig::new(options, seed, started)?;
        rig.directory = directory;
        let tasks =
            start_stages_after_get_users(&rig, options, &sizing, seed, std::sync::Arc::default())?;
        Ok(Self {
            rig,
            tasks,
            events_environments: sizing.events_environments,
            started: (started, started_ms),
        })
    }

    /// A slot's instant, before its release: mappings with nothing to do since the last
    /// slot start again at five environments.
    pub(super) fn slot_begins(&self) {
        let rig = &self.rig;
        let idle = rig.users.left().0 == 0 && rig.emails.left().0 == 0 && rig.events.settled();
        if idle {
            rig.ramp.restart();
        }
    }

    /// Until every released user's email is accepted (or `limit`), then the figures.
    pub(super) async fn finish(
        self,
        options: &PipelineOptions,
        released: &Released,
    ) -> Result<SlotSending> {
        let slot_of: HashMap<String, i64> = (mailflow::runtime::lock(released).iter())
            .map(|(user, due)| (user.clone(), due.released_at_ms - due.slot_late_ms))
            .collect();
        let until = Instant::now() + super::sending_limit(options, slot_of.len(), 600.0);
        // Until each is accepted, nothing is left to send (a record dead-lettered, an email
        // never to be accepted), or the limit.
        let rig = &self.rig;
        while rig.ses.accepted_count() < slot_of.len()
            && rig.users.left().0 + rig.emails.left().0 > 0
            && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.rig.drain_events(Duration::from_secs(600)).await;
        self.rig.done.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await?;
        }
        let seen = self.rig.ses.seen();
        let (started, started_ms) = self.started;
        let epoch_ms = |t: Instant| started_ms + (t - started).as_millis() as i64;
        let mut late = Vec::new();
        // slot (ms) -> each acceptance (ms)
        let mut slots: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for ((_, user), times) in &seen.accepted {
            let (Some(slot), Some(first)) = (slot_of.get(user), times.first()) else {
                continue;
            };
            let at = epoch_ms(*first);
            late.push(at - slot);
            slots.entry(*slot).or_default().push(at);
        }
        late.sort_unstable();
        let (busiest_slot, mut busiest) = slots
            .into_iter()
            .max_by_key(|(_, times)| times.len())
            .unwrap_or_default();
        busiest.sort_unstable();
        let at = |times: &[i64], share: f64| {
            times
                .get(((times.len().max(1) - 1) as f64 * share).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        let (from, to) = (at(&busiest, 0.1), at(&busiest, 0.9));
        let between = busiest.iter().filter(|t| **t >= from && **t <= to).count();
        // 0 over a window too short to say (a slot sent within one millisecond).
        let steady = match to - from {
            0 => 0.0,
            ms => between as f64 / (ms as f64 / 1000.0),
        };
        let secs = |ms: i64| (ms - busiest_slot) as f64 / 1000.0;
        Ok(SlotSending {
            sent_late_p50_ms: at(&late, 0.5),
            sent_late_p99_ms: at(&late, 0.99),
            busiest_slot_emails: busiest.len(),
            busiest_first_s: busiest.first().map_or(0.0, |t| secs(*t)),
            busiest_last_s: busiest.last().map_or(0.0, |t| secs(*t)),
            busiest_steady_share: steady / options.quota,
            throttles: seen.throttled.len(),
            lost: {
                let accepted: HashSet<&str> =
                    (seen.accepted.keys()).map(|(_, u)| u.as_str()).collect();
                slot_of
                    .keys()
                    .filter(|u| !accepted.contains(u.as_str()))
                    .count()
            },
            twice: seen.accepted.values().filter(|t| t.len() > 1).count(),
            dead_lettered: self.rig.users.left().1 + self.rig.emails.left().1,
            events_lag_p99_s: (self.rig.events)
                .report(self.events_environments, &self.rig.account)
                .lag_p99_s,
        })
    }
}
