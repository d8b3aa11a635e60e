//! A backlog of rendered emails that runs into its users' quiet hours, on an emails queue
//! that keeps SQS's quota of 120,000 messages in flight. An email held back for the quiet
//! hours must not stay in flight until they end: past the quota no receive returns anything,
//! for every campaign on the queue, until the held ones come back hours later.

use super::polling::{failures, poll, Ramp};
use crate::rate::latency::Slow;
use crate::rate::queue::{LabQueue, SQS_IN_FLIGHT_LIMIT};
use crate::rate::standin::{Ses, StandInSes};
use mailflow::config::SendEmailConfig;
use mailflow::domain::campaign::CampaignId;
use mailflow::ports::memory::{MemoryCampaigns, MemoryLedger, MemoryRateBucket, MemoryWaitingRoom};
use mailflow::ports::WaitingRoom;
use mailflow::runtime::Invocation;
use mailflow::stages::send_email::{SendEmail, Wanted};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// SendEmail environments and their batch, as the template sizes them at 14 emails/s.
const ENVIRONMENTS: u32 = 2;
const BATCH: usize = 10;

#[tokio::test(start_paused = true)]
async fn a_backlog_met_by_quiet_hours_never_stops_the_emails_queue() {
    mailflow::runtime::clock::follow_tokio_clock();
    // Quiet hours from an hour ago to two hours on, in UTC (the jobs' users have no zone):
    // every email of the backlog meets them.
    let now_ms = mailflow::domain::ledger::epoch_ms(mailflow::runtime::clock::now()) as i64;
    let hour = (now_ms / 3_600_000) % 24;
    let quiet = format!("{:02}:00-{:02}:00", (hour + 23) % 24, (hour + 3) % 24);
    let users = SQS_IN_FLIGHT_LIMIT + 5_000;
    let emails = Arc::new(LabQueue::new(Duration::from_secs(180), 10));
    emails.send(crate::rate::campaign::jobs(users));

    let ses = Arc::new(StandInSes::new(14.0, (Duration::ZERO, Duration::ZERO), 1));
    let waiting = Arc::new(MemoryWaitingRoom::default());
    let done = Arc::new(AtomicBool::new(false));
    let tasks = start_send_email(&emails, &ses, &waiting, users, &quiet, &done);
    // Until the queue is empty, or half an hour: far less than the quiet hours left, so an
    // email hidden until their end would still be in flight.
    let started = Instant::now();
    while emails.left().0 > 0 && started.elapsed() < Duration::from_secs(1800) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }

    let (peak, refused) = emails.in_flight_peak_and_refusals();
    assert_eq!(refused, 0, "receives refused at {peak} messages in flight");
    assert!(
        peak <= ENVIRONMENTS as usize * BATCH,
        "{peak} in flight at once"
    );
    assert_eq!(
        emails.left(),
        (0, 0),
        "every email acknowledged, none to the DLQ"
    );
    assert_eq!(ses.accepted_count(), 0, "nothing sent in the quiet hours");
    // Every user waits in the waiting room for the end of the quiet hours, once.
    let held = mailflow::runtime::lock(&waiting.held).clone();
    let end = ((hour + 3) % 24) * 3_600_000;
    let slots: Vec<(&(String, i64), usize)> = held.iter().map(|(k, v)| (k, v.len())).collect();
    assert_eq!(slots.len(), 1, "{slots:?}");
    let ((campaign, slot_ms), count) = slots[0];
    assert_eq!(campaign, "lab-rate");
    assert_eq!(count, users);
    assert_eq!(slot_ms.rem_euclid(86_400_000), end, "{quiet}");
    let campaign = CampaignId::parse("lab-rate").unwrap();
    let report = waiting.report(&campaign).await.unwrap().unwrap();
    assert_eq!(report.quiet_held.get(slot_ms), Some(&(users as u64)));
}

/// SendEmail at 14 emails/s with `quiet` hours: its environments on `emails`, without
/// latency, holding the users it meets in their quiet hours in `waiting`.
fn start_send_email(
    emails: &Arc<LabQueue>,
    ses: &Arc<StandInSes>,
    waiting: &Arc<MemoryWaitingRoom>,
    users: usize,
    quiet: &str,
    done: &Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    let mut vars: BTreeMap<&str, String> = BTreeMap::from([
        ("MONGODB_URI", "mongodb://127.0.0.1:1".to_string()),
        ("SENDS_TABLE_NAME", "lab-sends".into()),
        ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
        ("EMAILS_QUEUE_URL", "lab-emails".into()),
        ("SENDER_ADDRESS", "lab@example.com".into()),
        ("SEND_RATE_PER_SECOND", "14".into()),
        ("VISIBILITY_TIMEOUT_SECONDS", "180".into()),
        ("FUNCTION_TIMEOUT_SECONDS", "30".into()),
        ("RECORD_CONCURRENCY", BATCH.to_string()),
        ("QUIET_HOURS", quiet.to_string()),
    ]);
    vars.extend(crate::rate::campaign::waiting_room_vars());
    let config = SendEmailConfig::from_source(&|k: &str| vars.get(k).cloned()).unwrap();
    let ledger = Arc::new(MemoryLedger::default());
    let rate = Arc::new(MemoryRateBucket::default());
    let no_latency = (Duration::ZERO, Duration::ZERO);
    let ramp = Ramp::new(Instant::now(), false);
    let mut tasks = Vec::new();
    for environment in 0..ENVIRONMENTS {
        let stage = Arc::new(SendEmail::new(
            Slow::new(ledger.clone(), no_latency),
            Ses(ses.clone()),
            Slow::new(emails.clone(), no_latency),
            MemoryCampaigns::default(),
            rate.clone(),
            waiting.clone(),
            // Every user still subscribed when an email that waited reads it again.
            Wanted {
                users: super::directory::LabDirectory::new(users, no_latency),
                pending: mailflow::ports::memory::MemoryRecords::default(),
            },
            config.clone(),
        ));
        tasks.push(poll(
            emails.clone(),
            BATCH,
            environment,
            ramp.clone(),
            (Duration::from_millis(10), Duration::from_millis(10)),
            done.clone(),
            move |event| {
                let stage = stage.clone();
                async move {
                    let invocation = Invocation::with_timeout("lab-send", Duration::from_secs(30));
                    failures(&stage.handle(event, &invocation).await.0)
                }
            },
        ));
    }
    tasks
}
