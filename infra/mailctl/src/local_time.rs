//! Delivery at each user's local time, as `plan` and `status` show it: what it would do
//! with the emails a campaign would send (zones, passed times, each send slot's load), and
//! what it did (who was held, released, swept, is still waiting or stranded, how late).

use mailflow::adapters::sends::SendRecord;
use mailflow::domain::local_time::{
    slot_loads, HourWaiting, Lateness, LocalDelivery, LocalTimeCounts, SlotLoad, SlotStatus,
    WaitingReport, LATE_TOLERANCE_MS,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// What local-time delivery would do with the emails that would be sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTimePlan {
    pub local_time: String,
    pub send_date: String,
    pub fallback_zone: String,
    pub passed_time: &'static str,
    /// What the delivery rule decided for the emails that would be sent (zones replaced,
    /// passed local times, holds), as a run's segments count it.
    #[serde(flatten)]
    pub counts: LocalTimeCounts,
    /// Emails per send slot (its instant, the zones in it), in time order, with how long
    /// each takes at the effective rate and when its last email goes.
    pub slots: Vec<SlotLoad>,
    /// The slot with the most emails.
    pub busiest: Option<SlotLoad>,
    /// Slots whose last email goes more than 30 minutes after their local time.
    pub late: Vec<SlotLoad>,
    /// Slots whose last email would go after the campaign's deadline.
    pub past_deadline: Vec<SlotLoad>,
}

impl LocalTimePlan {
    /// The plan of `delivery`, nothing counted yet.
    pub fn of(delivery: &LocalDelivery) -> Self {
        LocalTimePlan {
            local_time: delivery.local_time.to_string(),
            send_date: delivery.send_date.to_string(),
            fallback_zone: delivery.fallback_zone.as_str().to_owned(),
            passed_time: delivery.passed_time.as_str(),
            ..Default::default()
        }
    }

    /// Each slot's load at `rate` (emails and zones by instant), the busiest, the late ones
    /// and those still sending after `deadline_ms`.
    pub fn set_slots(
        &mut self,
        slots: &BTreeMap<i64, (u64, Vec<String>)>,
        rate: f64,
        deadline_ms: Option<i64>,
    ) {
        self.slots = slot_loads(slots, rate);
        self.busiest = self.slots.iter().max_by_key(|s| s.emails).cloned();
        self.late = (self.slots.iter())
            .filter(|s| s.finishes_after * 1000.0 > LATE_TOLERANCE_MS as f64)
            .cloned()
            .collect();
        if let Some(deadline) = deadline_ms {
            self.past_deadline = (self.slots.iter())
                .zip(slots.keys())
                .filter(|(s, at)| **at as f64 + s.finishes_after * 1000.0 > deadline as f64)
                .map(|(s, _)| s.clone())
                .collect();
        }
    }

    /// The local-time lines of the plan: the settings, the zones replaced, each slot (its
    /// UTC instant, emails, zones), the busiest, and the late ones.
    pub fn describe(&self) -> String {
        let l = self;
        let mut out = format!(
            "local time {} on {} in each user's zone (fallback {} for {} without a zone and {} with an unknown one); {} on the next day because their local time came before the window closed; local time already passed: {} sent at once, {} moved to the next day, {} skipped ({})\n",
            l.local_time, l.send_date, l.fallback_zone, l.counts.timezone_missing, l.counts.timezone_invalid, l.counts.next_day_after_window, l.counts.passed_sent_now, l.counts.passed_next_day, l.counts.passed_skipped, l.passed_time
        );
        for s in &l.slots {
            out.push_str(&format!(
                "  {} {:>7} emails, {:.0} s of sending, last at +{:.0} s  {}\n",
                s.slot,
                s.emails,
                s.seconds,
                s.finishes_after,
                s.zones.join(" ")
            ));
        }
        if let Some(b) = &l.busiest {
            out.push_str(&format!(
                "busiest slot {}: {} emails take {:.1} min at the effective rate\n",
                b.slot,
                b.emails,
                b.seconds / 60.0
            ));
        }
        let slot_names = |slots: &[SlotLoad]| {
            slots
                .iter()
                .map(|s| s.slot.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !l.past_deadline.is_empty() {
            out.push_str(&format!(
                "{} slots would still be sending after the campaign's deadline ({}): their users after it are recorded expired\n",
                l.past_deadline.len(),
                slot_names(&l.past_deadline)
            ));
        }
        if l.late.is_empty() {
            out.push_str("every slot finishes within 30 minutes of its local time\n");
        } else {
            out.push_str(&format!(
                "{} slots finish more than 30 minutes after their local time ({}): raise the send rate (and the SES quota) or accept the lateness\n",
                l.late.len(),
                slot_names(&l.late)
            ));
        }
        out
    }
}

/// What `status` shows of a local-time campaign. The campaign's figures come from the sends
/// table and the waiting table, which keep one record a user whatever runs came before;
/// what GetUsers decided is a run's (each run decides the whole audience again, users an
/// earlier run sent among them), shown as that run's.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTimeStatus {
    /// Users with a SENT record.
    pub sent: u64,
    /// Users the waiting table held for a slot (SendEmail's quiet-hours holds too), once a
    /// slot however many runs held them; those still waiting, by UTC hour of their slot.
    pub held: u64,
    pub still_waiting: u64,
    pub waiting_by_hour: Vec<HourWaiting>,
    /// Each slot: held, released at the instant, released by the sweep, still waiting.
    pub slots: Vec<SlotStatus>,
    /// The latest run's decisions: zones replaced, passed local times, holds, delays.
    pub latest_run: Option<RunCounts>,
    /// Each run's own decisions (a resend or a re-run is a run of its own), in start order.
    pub runs: Vec<RunCounts>,
    /// Users still waiting although their slot's sweep has passed: nothing will release
    /// them (a problem, like a DLQ message).
    pub stranded: u64,
    pub slots_released: usize,
    /// Slots' release minus their instant, over released users (p50, p99, max).
    pub release_lateness: Option<Lateness>,
    /// Sent minus the user's local send time, over the emails sent (p50, p99, max): what a
    /// recipient sees.
    pub lateness: Option<Lateness>,
}

/// One run of a local-time campaign, as `status` shows it: what it decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCounts {
    pub started_at: String,
    pub counts: LocalTimeCounts,
}

impl RunCounts {
    fn of(started: i64, counts: &LocalTimeCounts) -> Self {
        RunCounts {
            started_at: if started > 0 {
                mailflow::domain::local_time::rfc3339_ms(started)
            } else {
                "before runs were kept apart".into()
            },
            counts: counts.clone(),
        }
    }

    /// What the run decided, in words.
    fn describe(&self) -> String {
        let c = &self.counts;
        format!(
            "{} held for a slot, {} on the next day (local time before the window closed); local time passed at its start: {} sent at once, {} moved to the next day, {} skipped; {} delayed under 15 minutes, {} due at its start | fallback zone for {} without a zone and {} with an unknown one",
            c.waiting.values().sum::<u64>(),
            c.next_day_after_window,
            c.passed_sent_now,
            c.passed_next_day,
            c.passed_skipped,
            c.delayed,
            c.due_now,
            c.timezone_missing,
            c.timezone_invalid
        )
    }
}

impl LocalTimeStatus {
    /// The waiting room's record of the campaign and its sends, at `now_ms`.
    pub fn of(r: &WaitingReport, records: &[SendRecord], now_ms: i64) -> Self {
        let sent = (records.iter())
            .filter(|r| r.status == Some(mailflow::domain::ledger::SendStatus::Sent))
            .count() as u64;
        LocalTimeStatus {
            sent,
            held: r.held(now_ms),
            still_waiting: r.still_waiting(),
            waiting_by_hour: r.waiting_by_hour(),
            slots: r.slots(now_ms),
            latest_run: r.latest_run().map(|(at, c)| RunCounts::of(at, c)),
            runs: (r.runs.iter())
                .map(|(at, c)| RunCounts::of(*at, c))
                .collect(),
            stranded: r.stranded(now_ms),
            slots_released: r.slots_released(),
            release_lateness: r.release_lateness(),
            lateness: Lateness::of(
                records
                    .iter()
                    .filter_map(|r| r.late_ms)
                    .map(|l| (l, 1))
                    .collect(),
            ),
        }
    }

    /// Its lines of `mailctl status`: the campaign's figures first, then what each run
    /// decided, labelled as that run's.
    pub fn describe(&self) -> String {
        let l = self;
        let mut out = format!(
            "  local time, the campaign: {} sent, {} held for their slot (a user once a slot, however many runs held them), {} still waiting\n",
            l.sent, l.held, l.still_waiting
        );
        if let Some(latest) = &l.latest_run {
            let earlier = match l.runs.len() {
                0 | 1 => String::new(),
                n => format!(
                    " (of {n} runs; each decides the whole audience again, users an earlier run sent among them)"
                ),
            };
            out.push_str(&format!(
                "  local time, the latest run (started {}){earlier}: {}\n",
                latest.started_at,
                latest.describe()
            ));
        }
        if l.runs.len() > 1 {
            for run in &l.runs[..l.runs.len() - 1] {
                out.push_str(&format!(
                    "    earlier run (started {}): {}\n",
                    run.started_at,
                    run.describe()
                ));
            }
        }
        for slot in &l.slots {
            out.push_str(&format!(
                "    slot {}: held {} | released {} | swept {} | still waiting {}{}\n",
                slot.slot,
                slot.held,
                slot.released,
                slot.swept,
                slot.waiting,
                if slot.stranded {
                    " STRANDED: its sweep has passed; `mailctl release` releases them"
                } else {
                    ""
                }
            ));
        }
        let seconds = |ms: i64| ms as f64 / 1000.0;
        if let Some(late) = &l.lateness {
            out.push_str(&format!(
                "  sent after the local time: p50 {:.1}s p99 {:.1}s max {:.1}s\n",
                seconds(late.p50_ms),
                seconds(late.p99_ms),
                seconds(late.max_ms)
            ));
        }
        if let Some(late) = &l.release_lateness {
            out.push_str(&format!(
                "  {} slots released, after their instant: p50 {:.1}s p99 {:.1}s max {:.1}s\n",
                l.slots_released,
                seconds(late.p50_ms),
                seconds(late.p99_ms),
                seconds(late.max_ms)
            ));
        }
        out
    }
}

/// The release events (`mailctl release`) for a local-time campaign's slots whose sweep time
/// has passed by `now_ms` and that still hold users: each the sweep its schedule would send
/// (an earlier one would only wait for that time).
pub fn release_events(
    campaign: &str,
    report: &mailflow::domain::local_time::WaitingReport,
    now_ms: i64,
) -> Vec<serde_json::Value> {
    report
        .waiting_now
        .iter()
        .filter(|(slot_ms, waiting)| {
            **slot_ms + mailflow::domain::local_time::SWEEP_AFTER_MS <= now_ms && **waiting > 0
        })
        .map(|(slot_ms, _)| {
            serde_json::json!({"releaseWaiting": {
                "campaignId": campaign, "slotMs": slot_ms, "sweep": true,
            }})
        })
        .collect()
}
