use super::*;
use mailflow::domain::campaign_state::StateChange;
use mailflow::domain::send_rate::RateSource;

const NOW: u64 = 1_800_000_000_000;
const DAY: i64 = 24 * 3600 * 1000;

fn record(status: SendStatus) -> SendRecord {
    SendRecord {
        user_id: "u".into(),
        campaign_id: "weekly-2026-W47".into(),
        status: Some(status),
        attempt: 1,
        ses_message_id: None,
        last_error: None,
        skip_reason: None,
        lease_until_ms: None,
        started_at_ms: None,
        completed_at_ms: None,
        late_ms: None,
        duplicates_suppressed: 0,
        send_errors: 0,
        engagement: Default::default(),
        reconciled_at_ms: None,
        variant: None,
        zone: None,
        updated_at_ms: None,
    }
}

fn sent_at(ms: u64) -> SendRecord {
    SendRecord {
        started_at_ms: Some(ms - 100),
        completed_at_ms: Some(ms),
        ..record(SendStatus::Sent)
    }
}

fn facts(records: Vec<SendRecord>) -> StatusFacts {
    StatusFacts {
        campaign: "weekly-2026-W47".into(),
        records,
        ..Default::default()
    }
}

fn held(hold: fn(StateChange) -> Hold) -> Option<CampaignRecord> {
    Some(CampaignRecord {
        started_at_ms: Some(NOW - 3_600_000),
        hold: Some(hold(StateChange {
            at_ms: NOW - 60_000,
            by: "ops".into(),
            reason: "checking".into(),
        })),
        ..Default::default()
    })
}

/// A waiting room with users in a slot whose sweep gave up a day ago: stranded.
fn stranded_room() -> WaitingReport {
    let slot = NOW as i64 - 3 * DAY;
    WaitingReport {
        waiting_now: [(slot, 4)].into(),
        ..Default::default()
    }
}

#[test]
fn the_state_follows_the_hold_the_queues_and_the_waiting_room() {
    let state = |f: &StatusFacts| CampaignStatus::of(f, NOW).state;
    assert_eq!(state(&facts(vec![])), "not started");
    let mut running = facts(vec![record(SendStatus::Sent)]);
    running.emails_pending = 3;
    assert_eq!(state(&running), "running");
    let mut in_progress = facts(vec![record(SendStatus::InProgress)]);
    assert_eq!(state(&in_progress), "running");
    in_progress.records = vec![record(SendStatus::Sent)];
    assert_eq!(state(&in_progress), "finished");
    let mut waiting = facts(vec![record(SendStatus::Sent)]);
    waiting.waiting = Some(stranded_room());
    assert_eq!(state(&waiting), "waiting");
    // A hold comes first, whatever the queues say.
    running.record = held(Hold::Paused);
    assert_eq!(state(&running), "paused");
    running.record = held(Hold::Cancelled);
    assert_eq!(state(&running), "cancelled");
}

#[test]
fn a_held_campaign_has_no_stranded_users() {
    let mut f = facts(vec![record(SendStatus::Sent)]);
    f.waiting = Some(stranded_room());
    let waiting = CampaignStatus::of(&f, NOW);
    assert_eq!((waiting.stranded(), waiting.problems()), (4, 4));
    assert!(waiting.local_time.as_ref().unwrap().slots[0].stranded);
    f.record = held(Hold::Paused);
    let paused = CampaignStatus::of(&f, NOW);
    assert_eq!((paused.stranded(), paused.problems()), (0, 0));
    assert!(!paused.local_time.as_ref().unwrap().slots[0].stranded);
    // Paused: resume within the queues' retention, counted from the start.
    assert_eq!(
        paused.resume_before_ms,
        Some(NOW - 3_600_000 + QUEUE_RETENTION_MS)
    );
    f.record = held(Hold::Cancelled);
    assert_eq!(CampaignStatus::of(&f, NOW).stranded(), 0);
}

#[test]
fn the_eta_goes_by_the_shared_rate_while_sending_and_the_observed_one_before() {
    // 30 sent over the last minute, one every 2 seconds: 0.5/s.
    let records: Vec<SendRecord> = (0..30).map(|i| sent_at(NOW - 2_000 * i)).collect();
    let mut f = facts(records.clone());
    f.users_pending = 10;
    f.emails_pending = 20;
    let observed = CampaignStatus::of(&f, NOW);
    assert_eq!(observed.send_rate, Some(0.5));
    assert_eq!(observed.eta_seconds, Some(60));
    let shared = SharedRate {
        rate: 3.0,
        ceiling: 14.0,
        source: RateSource::Configured,
        changed_at_ms: 0,
        lowered_at_ms: 0,
        ceiling_from_ses: false,
    };
    f.shared_rate = Some(shared);
    let sending = CampaignStatus::of(&f, NOW);
    assert_eq!(sending.eta_seconds, Some(10));
    // Nothing sent in the last minute: no rate to promise an ETA with.
    let later = CampaignStatus::of(&f, NOW + 120_000);
    assert_eq!((later.send_rate, later.eta_seconds), (None, None));
    assert!(crate::status::view::describe(&later)
        .contains("nothing sent in the last minute | ETA unknown (0 waiting to retry)"));
    assert!(crate::status::view::describe(&sending).contains(
        "shared rate 3/s (configured; ceiling 14/s) | 0.5/s sent over the last minute | ETA 10s"
    ));
    // A campaign younger than a minute is measured since its first claim.
    let young: Vec<SendRecord> = (0..10).map(|_| sent_at(NOW)).collect();
    assert_eq!(crate::send_rate::observed(&young, NOW + 1_900), Some(5.0));
}

#[test]
fn the_view_shows_the_bar_the_holds_and_the_failures() {
    let mut failed = record(SendStatus::Failed);
    failed.last_error = Some("MessageRejected (request 42) for a@b.example".into());
    let mut f = facts(vec![record(SendStatus::Sent), failed]);
    f.users_pending = 2;
    f.record = held(Hold::Paused);
    f.consumers = [("Disabled".to_owned(), 3)].into();
    let text = crate::status::view::describe(&CampaignStatus::of(&f, NOW));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0]
            .starts_with("weekly-2026-W47 paused [###############...............] sent 1 failed 1"),
        "{text}"
    );
    assert!(lines[2].starts_with("  PAUSED since "), "{text}");
    assert!(
        lines[2].contains("by ops: checking | consumers {\"Disabled\": 3}"),
        "{text}"
    );
    assert_eq!(lines[3], "  FAILED 1: MessageRejected");
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        reason_group("Rejected a@b.example (x)"),
        "Rejected <address>"
    );
}

#[test]
fn the_view_and_the_report_name_the_definition_version_the_campaign_ran() {
    let mut f = facts(vec![record(SendStatus::Sent)]);
    f.campaign = "orders-2026-W47".into();
    f.record = Some(CampaignRecord {
        started_at_ms: Some(NOW - 3_600_000),
        definition: Some(mailflow::domain::definition::pin::PinnedDefinition {
            name: "orders".into(),
            version: 1,
        }),
        ..Default::default()
    });
    let status = CampaignStatus::of(&f, NOW);
    let text = crate::status::view::describe(&status);
    assert!(text.lines().any(|l| l == "definition orders v1"), "{text}");
    let page = crate::report::render(&status, &f.records);
    assert!(page.contains("definition orders v1"), "{page}");
    // The weekly digest's campaigns have no such line.
    let digest = crate::status::view::describe(&CampaignStatus::of(&facts(vec![]), NOW));
    assert!(!digest.contains("definition"), "{digest}");
}

/// A local-time campaign of 286 users run three times: first with passed-time policy skip
/// (72 skipped, 214 held and released at their slots), then a re-run and a resend with
/// send-now, which sent the 72. Every user is SENT.
fn three_runs() -> StatusFacts {
    use mailflow::domain::local_time::{LocalTimeCounts, SlotRelease};
    let slot = NOW as i64 - 2 * DAY;
    let (first, rerun, resend) = (slot - DAY, NOW as i64 - 3_600_000, NOW as i64 - 60_000);
    let mut room = WaitingReport::default();
    room.add_segment(
        first,
        &LocalTimeCounts {
            passed_skipped: 72,
            timezone_missing: 5,
            waiting: [(slot, 214)].into(),
            ..Default::default()
        },
    );
    for run in [rerun, resend] {
        room.add_segment(
            run,
            &LocalTimeCounts {
                passed_sent_now: 286,
                timezone_missing: 5,
                ..Default::default()
            },
        );
    }
    room.releases = vec![SlotRelease {
        slot_ms: slot,
        users: 214,
        released_at_ms: slot + 2_000,
        sweep: false,
    }];
    let mut f = facts((0..286).map(|_| sent_at(NOW - 30_000)).collect());
    f.waiting = Some(room);
    f.record = Some(CampaignRecord {
        started_at_ms: Some(first as u64),
        topic: Some("digest".into()),
        excluded: mailflow::domain::topics::ExclusionCounts {
            unsubscribed: 4,
            ..Default::default()
        },
        excluded_run_ms: resend,
        ..Default::default()
    });
    f
}

#[test]
fn no_line_claims_a_run_s_skips_for_the_campaign_after_later_runs_sent_them() {
    let status = CampaignStatus::of(&three_runs(), NOW);
    let local = status.local_time.as_ref().unwrap();
    // The campaign's figures, from the records and the waiting table.
    assert_eq!((local.sent, local.held, local.still_waiting), (286, 214, 0));
    assert_eq!(local.slots[0].held, 214, "{:?}", local.slots);
    assert_eq!(local.runs.len(), 3);
    let latest = &local.latest_run.as_ref().unwrap().counts;
    assert_eq!((latest.passed_sent_now, latest.passed_skipped), (286, 0));
    let text = crate::status::view::describe(&status);
    // Only the first run's own line says 72 skipped, and says it is that run's.
    let skipped: Vec<&str> = text.lines().filter(|l| l.contains("72 skipped")).collect();
    assert_eq!(skipped.len(), 1, "{text}");
    assert!(
        skipped[0].starts_with("    earlier run (started "),
        "{text}"
    );
    assert!(
        text.contains("  local time, the campaign: 286 sent, 214 held for their slot"),
        "{text}"
    );
    assert!(
        text.contains("  local time, the latest run (started ") && text.contains("(of 3 runs;"),
        "{text}"
    );
    // No sum over runs anywhere: 72 skipped once, 5 fallback zones a run, 286 sent once.
    for sum in ["858", "572", "15 without a zone", "428"] {
        assert!(!text.contains(sum), "{sum}: {text}");
    }
    // The topic line: the latest run's exclusions, labelled as its.
    assert!(
        text.contains("  topic digest | left out of the audience by the latest run (started "),
        "{text}"
    );
}
