//! GetUsers' local-time half over the in-memory ports: when each user goes, holds and
//! their schedules, a slot's release and sweep, and what the waiting room reports.

use super::*;
use crate::domain::local_time::{rfc3339_ms, SWEEP_GIVEN_UP_AFTER_MS};
use crate::ports::memory::MemoryClock;

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

/// u1 in Tokyo, u2 in New York, the ObjectId user without a zone, the escaped one with a
/// misspelt zone; the campaign (send date Monday 2026-11-23) starts at `start`.
fn zoned_stage(start: &str) -> (Stage, Arc<MemoryClock>) {
    let mut dir = directory();
    for (id, zone) in [
        ("u1", Some("Asia/Tokyo")),
        ("u2", Some("America/New_York")),
        (OID, None),
        ("str:oid:x", Some("Amrica/Chicago")),
    ] {
        let mut user = User::named(id, "x@example.com");
        user.timezone = zone.map(str::to_owned);
        dir = dir.user(id, user);
    }
    let clock = MemoryClock::at(ms(start));
    (stage_over(dir, "20").with_clock(clock.clone()), clock)
}

/// The schedule of New York's slot (14:00 UTC).
fn new_york_schedule(stage: &Stage) -> (String, Value) {
    slot_schedule(stage, "2026-11-23T14:00:00Z", false)
}

fn slot_schedule(stage: &Stage, slot: &str, sweep: bool) -> (String, Value) {
    let schedule = SlotSchedule {
        slot_ms: ms(slot),
        sweep,
    };
    let key = (campaign().id.to_string(), schedule);
    stage.waiting.schedules.lock().unwrap()[&key].clone()
}

fn local_nine() -> Value {
    json!({"campaignId": "weekly-2026-W47", "localTime": "09:00", "sendDate": "2026-11-23"})
}

#[tokio::test]
async fn users_wait_for_their_local_time_and_are_counted() {
    // 08:59:30 UTC: Tokyo's 09:00 has passed (send now), UTC's is 30 s away (a queue
    // delay), New York's five hours (held for its slot).
    let (stage, _clock) = zoned_stage("2026-11-23T08:59:30Z");
    let Response::Run(summary) = stage.handle(local_nine(), &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    let counts = summary.local_time.unwrap();
    assert_eq!((counts.timezone_missing, counts.timezone_invalid), (1, 1));
    assert_eq!((counts.passed_sent_now, counts.delayed), (1, 2));
    let new_york = ms("2026-11-23T14:00:00Z");
    assert_eq!(counts.waiting, BTreeMap::from([(new_york, 1)]));
    let mut sent = enqueued(&stage);
    sent.sort();
    assert_eq!(sent, [OID, "str:oid:x", "u1"]);
    let delayed = stage.users.delayed.lock().unwrap().clone();
    assert_eq!(
        delayed.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [30, 30]
    );
    // New York waits in the room, with its slot's release and sweep scheduled.
    let held = stage.waiting.held.lock().unwrap().clone();
    assert_eq!(held[&(campaign().id.to_string(), new_york)].len(), 1);
    let schedules = stage.waiting.schedules.lock().unwrap().clone();
    let fires: Vec<String> = schedules
        .keys()
        .map(|(_, s)| rfc3339_ms(s.fires_at_ms()))
        .collect();
    assert_eq!(fires, ["2026-11-23T14:00:00Z", "2026-11-23T14:15:00Z"]);
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(report.still_waiting(), 1);
    assert_eq!(report.waiting_by_hour()[0].utc_hour, "2026-11-23T14:00Z");
}

#[tokio::test]
async fn a_slot_is_released_at_its_instant_never_before_and_not_while_paused() {
    let (stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let before = enqueued(&stage).len();
    let (_, event) = new_york_schedule(&stage);
    // A minute early (a clock that disagrees with the scheduler's): back on the
    // continuation queue for that minute, nothing released.
    clock.set(ms("2026-11-23T13:59:00Z"));
    let Response::Release(early) = stage.handle(event.clone(), &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(early.early && !early.complete);
    assert_eq!(stage.continuation.delayed.lock().unwrap()[0].0, 60);
    assert_eq!(enqueued(&stage).len(), before);
    // Paused: parked for the resume.
    clock.set(ms("2026-11-23T14:00:00Z"));
    stage.campaigns.states.pause(campaign().id.as_str());
    let Response::Release(paused) = stage.handle(event.clone(), &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(paused.paused && !paused.complete);
    assert_eq!(enqueued(&stage).len(), before);
    // Should the consumer still run, it looks again in a minute: no busy loop.
    assert_eq!(
        stage.continuation.delayed.lock().unwrap().last().unwrap().0,
        60
    );
    // The parked release, after the resume, from the continuation queue.
    let parked = stage.continuation.bodies().last().cloned().unwrap();
    stage.campaigns.states.resume(campaign().id.as_str());
    let records = json!({"Records": [{"messageId": "r", "body": parked}]});
    let Response::Checkpoints(Checkpoints { response, .. }) =
        stage.handle(records, &plenty()).await.unwrap()
    else {
        panic!("expected a batch response");
    };
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(enqueued(&stage).len(), before + 1);
    assert_eq!(enqueued(&stage).last().unwrap(), "u2");
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(report.still_waiting(), 0);
    assert_eq!(report.releases[0].users, 1);
    assert_eq!(
        rfc3339_ms(report.releases[0].slot_ms),
        "2026-11-23T14:00:00Z"
    );
    assert_eq!(report.release_lateness().unwrap().max_ms, 0);
}

#[tokio::test]
async fn a_cancelled_campaigns_slots_release_nobody() {
    let (stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let before = enqueued(&stage).len();
    let (_, event) = new_york_schedule(&stage);
    clock.set(ms("2026-11-23T14:00:00Z"));
    stage.campaigns.states.cancel(campaign().id.as_str());
    let Response::Release(summary) = stage.handle(event, &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(summary.cancelled);
    assert_eq!(summary.users_dropped, 1);
    assert_eq!(enqueued(&stage).len(), before);
    assert!(stage.continuation.bodies().is_empty());
    // Dropped from the waiting room, not left to wait forever.
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(report.still_waiting(), 0);
}

#[tokio::test]
async fn a_user_due_within_a_quarter_hour_is_delayed_so_every_hold_is_written_before_its_slot() {
    // 13:46 UTC: New York's 09:00 is 14 minutes away, within SQS's longest delay; a
    // hold decided now could be written after the release fired (a segment runs up to
    // 15 minutes), so the user goes on the users queue with the delay instead.
    let (stage, _clock) = zoned_stage("2026-11-23T13:46:00Z");
    let Response::Run(summary) = stage.handle(local_nine(), &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    let counts = summary.local_time.unwrap();
    assert!(counts.waiting.is_empty(), "{counts:?}");
    let delayed = stage.users.delayed.lock().unwrap().clone();
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].0, 14 * 60);
    assert!(stage.waiting.schedules.lock().unwrap().is_empty());
    // Sixteen minutes ahead: held, with the slot's release and sweep.
    let (stage, _clock) = zoned_stage("2026-11-23T13:44:00Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    assert_eq!(stage.waiting.schedules.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_delayed_batch_takes_its_delay_when_it_goes_not_when_its_user_was_decided() {
    let (stage, clock) = zoned_stage("2026-11-23T13:50:00Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let (delay, body) = stage.users.delayed.lock().unwrap()[0].clone();
    assert_eq!(delay, 600);
    // The same user's batch, had it waited for company until 13:59:30: 30 s, not 600.
    clock.set(ms("2026-11-23T13:59:30Z"));
    stage
        .send_delayed(ms("2026-11-23T14:00:00Z"), vec![body])
        .await
        .unwrap();
    let delayed = stage.users.delayed.lock().unwrap().clone();
    assert_eq!(delayed.last().unwrap().0, 30);
    let message: UserMessage = serde_json::from_str(&delayed.last().unwrap().1).unwrap();
    assert_eq!(message.due.unwrap().slot_late_ms, 0);
}

#[tokio::test]
async fn the_sweep_releases_a_user_held_after_the_slots_release_and_status_reconciles() {
    let (stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let before = enqueued(&stage).len();
    let (_, release) = new_york_schedule(&stage);
    let (_, sweep) = slot_schedule(&stage, "2026-11-23T14:00:00Z", true);
    clock.set(ms("2026-11-23T14:00:00Z"));
    stage.handle(release, &plenty()).await.unwrap();
    assert_eq!(enqueued(&stage).len(), before + 1);
    // A hold that lands after the release (a segment retried late, a slow write).
    let new_york = ms("2026-11-23T14:00:00Z");
    let last = stage.users.bodies().last().cloned().unwrap();
    let mut body: Value = serde_json::from_str(&last).unwrap();
    body["userId"] = json!("late");
    let body = body.to_string();
    stage
        .waiting
        .hold(&campaign().id, new_york, &[("late".into(), body)])
        .await
        .unwrap();
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    let slot = &report.slots(ms("2026-11-23T14:05:00Z"))[0];
    // Held counts the table's users: the one released and the late one.
    assert_eq!((slot.held, slot.released, slot.waiting), (2, 1, 1));
    assert!(!slot.stranded, "its sweep is still to come");
    // Stranded once the sweep would have run with all its retries, had it not.
    assert_eq!(report.stranded(ms("2026-11-24T14:14:00Z")), 0);
    assert_eq!(report.stranded(ms("2026-11-24T14:16:00Z")), 1);
    // The sweep, a quarter of an hour later, releases it.
    clock.set(ms("2026-11-23T14:15:00Z"));
    let Response::Release(swept) = stage.handle(sweep, &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(swept.sweep && swept.complete);
    assert_eq!(swept.users_released, 1);
    assert_eq!(enqueued(&stage).last().unwrap(), "late");
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    let slot = &report.slots(ms("2026-11-24T00:00:00Z"))[0];
    assert_eq!(
        (slot.held, slot.released, slot.swept, slot.waiting),
        (2, 1, 1, 0)
    );
    assert!(!slot.stranded);
    assert_eq!(report.slots_released(), 1);
    // The release's lateness is the release's, not the sweep's.
    assert_eq!(report.release_lateness().unwrap().max_ms, 0);
}

#[tokio::test]
async fn users_a_sweep_leaves_waiting_are_written_as_stranded() {
    let (stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let (_, release) = new_york_schedule(&stage);
    let (_, sweep) = slot_schedule(&stage, "2026-11-23T14:00:00Z", true);
    clock.set(ms("2026-11-23T14:00:00Z"));
    stage.handle(release, &plenty()).await.unwrap();
    // The sweep releases nobody and finishes with none left: no metric.
    clock.set(ms("2026-11-23T14:15:00Z"));
    let Response::Release(clean) = stage.handle(sweep.clone(), &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert_eq!(clean.users_stranded, 0);
    assert!(!Response::Release(clean)
        .metrics()
        .iter()
        .any(|m| m.name == "usersStranded"));
    // A hold that lands while the sweep reads (a segment retried late).
    let new_york = ms("2026-11-23T14:00:00Z");
    stage
        .waiting
        .hold(&campaign().id, new_york, &[("early".into(), "{}".into())])
        .await
        .unwrap();
    stage.waiting.landing.lock().unwrap().push((
        campaign().id.to_string(),
        new_york,
        "late".into(),
        "{}".into(),
    ));
    let Response::Release(swept) = stage.handle(sweep, &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(swept.complete);
    assert_eq!((swept.users_released, swept.users_stranded), (1, 1));
    let metrics = Response::Release(swept).metrics();
    let stranded = metrics.iter().find(|m| m.name == "usersStranded").unwrap();
    assert_eq!(stranded.values, [1.0]);
}

#[tokio::test]
async fn a_second_run_keeps_its_counts_apart_from_the_first() {
    let (stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.handle(local_nine(), &plenty()).await.unwrap();
    // A resend an hour later, skipping whoever's time has passed.
    clock.set(ms("2026-11-23T10:00:00Z"));
    let mut resend = local_nine();
    resend["passedTime"] = json!("skip");
    resend["includeFailed"] = json!(true);
    stage.handle(resend, &plenty()).await.unwrap();
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    let runs: Vec<(String, u64, u64)> = report
        .runs
        .iter()
        .map(|(at, c)| (rfc3339_ms(*at), c.passed_sent_now, c.passed_skipped))
        .collect();
    assert_eq!(
        runs,
        [
            ("2026-11-23T08:59:30Z".to_owned(), 1, 0),
            ("2026-11-23T10:00:00Z".to_owned(), 0, 3),
        ]
    );
    assert_eq!(
        (report.counts.passed_sent_now, report.counts.passed_skipped),
        (1, 3)
    );
}

#[tokio::test]
async fn skip_and_next_day_policies() {
    let (stage, _clock) = zoned_stage("2026-11-23T10:00:00Z");
    let mut event = local_nine();
    event["passedTime"] = json!("skip");
    let Response::Run(summary) = stage.handle(event, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    // Tokyo and the two UTC fallbacks have passed: skipped; New York waits.
    let counts = summary.local_time.unwrap();
    assert_eq!(counts.passed_skipped, 3);
    assert!(enqueued(&stage).is_empty());

    // Send-now: the three go at once, counted (not in the lateness figures: their
    // messages carry no release time).
    let (stage, _clock) = zoned_stage("2026-11-23T10:00:00Z");
    let Response::Run(summary) = stage.handle(local_nine(), &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert_eq!(summary.local_time.unwrap().passed_sent_now, 3);
    assert_eq!(enqueued(&stage).len(), 3);

    let (stage, _clock) = zoned_stage("2026-11-23T10:00:00Z");
    let mut event = local_nine();
    event["passedTime"] = json!("next-day");
    let Response::Run(summary) = stage.handle(event, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert_eq!(summary.local_time.unwrap().passed_next_day, 3);
    let slots: Vec<String> = stage
        .waiting
        .held
        .lock()
        .unwrap()
        .keys()
        .map(|(_, at)| rfc3339_ms(*at))
        .collect();
    assert_eq!(
        slots,
        [
            "2026-11-23T14:00:00Z",
            "2026-11-24T00:00:00Z",
            "2026-11-24T09:00:00Z"
        ]
    );
}

#[tokio::test]
async fn bad_local_time_settings_are_refused_before_anything_is_enqueued() {
    let (stage, _clock) = zoned_stage("2026-11-23T08:50:00Z");
    for (field, value, says) in [
        ("localTime", "9am", "HH:MM"),
        ("fallbackZone", "Europe/Berln", "IANA"),
        ("passedTime", "later", "send-now, next-day or skip"),
        ("sendDate", "2026-11-31", "YYYY-MM-DD"),
        // A year typo: it would hold everyone for a year.
        (
            "sendDate",
            "2027-11-23",
            "365 days after today (2026-11-23, UTC)",
        ),
    ] {
        let mut event = local_nine();
        event[field] = json!(value);
        let err = stage
            .handle(event, &plenty())
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(says), "{field}: {err}");
    }
    let err = stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "passedTime": "skip"}),
            &plenty(),
        )
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("go with localTime"), "{err}");
    assert!(enqueued(&stage).is_empty());
    assert!(stage.waiting.held.lock().unwrap().is_empty());
}

/// A user SendEmail met in their quiet hours, handed back as it does (the slot's schedules,
/// the user message its email was rendered from, the slot's count): the slot's release lets
/// them go to be rendered again, and `status` reconciles the slot, or finds it stranded.
#[tokio::test]
async fn a_user_handed_back_for_quiet_hours_is_released_at_their_end_and_counted() {
    let clock = MemoryClock::at(ms("2026-11-23T21:30:00Z"));
    let stage = stage("20").with_clock(clock.clone());
    let end = ms("2026-11-24T08:00:00Z");
    let job = crate::domain::messages::EmailJob {
        campaign_id: campaign().id,
        user_id: "u1".into(),
        to: "ada@example.com".into(),
        subject: "s".into(),
        html: "<p>h</p>".into(),
        text: "t".into(),
        unsubscribe_url: None,
        include_failed: false,
        include_cancelled: false,
        due: None,
        topic: crate::domain::messages::weekly_topic(),
        zone: Some("Europe/London".into()),
        variant: None,
        rendered_at_ms: Some(ms("2026-11-23T21:00:00Z")),
        window: Some(campaign().window),
        definition: None,
    };
    let message = job.user_message().unwrap();
    schedule_slot(&stage.waiting, &campaign().id, end, "arn:get-users")
        .await
        .unwrap();
    let body = serde_json::to_string(&message).unwrap();
    stage
        .waiting
        .hold(&campaign().id, end, &[("u1".into(), body)])
        .await
        .unwrap();
    stage
        .waiting
        .record_quiet_holds(&campaign().id, end, 1)
        .await
        .unwrap();
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(report.held(end), 1);
    let slot = &report.slots(end + 60_000)[0];
    assert_eq!((slot.held, slot.released, slot.waiting), (1, 0, 1));
    assert_eq!(report.stranded(end + SWEEP_GIVEN_UP_AFTER_MS + 1), 1);
    // The release its schedule sends, at the end of the quiet hours.
    let (target, release) = slot_schedule(&stage, "2026-11-24T08:00:00Z", false);
    assert_eq!(target, "arn:get-users");
    clock.set(end);
    let Response::Release(released) = stage.handle(release, &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert_eq!(released.users_released, 1);
    let sent: UserMessage = serde_json::from_str(&stage.users.bodies()[0]).unwrap();
    assert_eq!(
        (sent.user_id.as_str(), sent.window, sent.zone.as_deref()),
        ("u1", campaign().window, Some("Europe/London"))
    );
    assert!(sent.due.is_some(), "let go at the slot");
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    let slot = &report.slots(end + SWEEP_GIVEN_UP_AFTER_MS + 1)[0];
    assert_eq!((slot.held, slot.released, slot.waiting), (1, 1, 0));
    assert!(!slot.stranded);
}

/// The simulator's clock (SimClock), set to six hours before Tokyo's slot as the local
/// stack's tests set it, is before the window of weekly-2026-W47 closes: a start was judged
/// by the wall clock, which says the window is over, and was never refused for it.
#[tokio::test]
async fn a_start_is_judged_by_the_wall_clock_whatever_the_decision_clock_says() {
    let (stage, _clock) = zoned_stage("2026-11-22T18:00:00Z");
    let run = stage.handle(local_nine(), &plenty()).await;
    assert!(run.is_ok(), "{:?}", run.err().map(|e| e.to_string()));
}

/// New York's slot with `more` users besides u2, in a waiting room of `shards`, its
/// release due: the stage, the release's event and the users enqueued before it.
async fn a_big_new_york_slot(shards: u8, more: usize) -> (Stage, Value, usize) {
    let (mut stage, clock) = zoned_stage("2026-11-23T08:59:30Z");
    stage.waiting = MemoryWaitingRoom::sharded(shards);
    stage.handle(local_nine(), &plenty()).await.unwrap();
    let slot = ms("2026-11-23T14:00:00Z");
    let key = (campaign().id.to_string(), slot);
    let u2 = stage.waiting.held.lock().unwrap()[&key]["u2"].clone();
    let users: Vec<(String, String)> = (0..more)
        .map(|i| {
            let mut message: UserMessage = serde_json::from_str(&u2).unwrap();
            message.user_id = format!("ny{i:05}");
            (
                message.user_id.clone(),
                serde_json::to_string(&message).unwrap(),
            )
        })
        .collect();
    stage
        .waiting
        .hold(&campaign().id, slot, &users)
        .await
        .unwrap();
    clock.set(slot);
    let (_, event) = new_york_schedule(&stage);
    let before = enqueued(&stage).len();
    (stage, event, before)
}

/// A slot spread over six shards, released four shards at a time: everyone once, in one
/// invocation.
#[tokio::test(start_paused = true)]
async fn a_slot_in_shards_is_released_in_lanes_each_user_once() {
    let (stage, event, before) = a_big_new_york_slot(6, 1_500).await;
    let stage = stage.with_release_lanes(4);
    let Response::Release(summary) = stage.handle(event, &plenty()).await.unwrap() else {
        panic!("expected a release");
    };
    assert!(summary.complete, "{summary:?}");
    let released: BTreeSet<String> = enqueued(&stage)[before..].iter().cloned().collect();
    assert_eq!(released.len(), 1_501);
    assert_eq!(enqueued(&stage).len() - before, 1_501);
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(
        (report.still_waiting(), report.releases[0].users),
        (0, 1_501)
    );
}

/// A release whose invocations have time for one page each goes on from the continuation
/// queue with every shard where it had got to: nobody lost, nobody released twice.
#[tokio::test(start_paused = true)]
async fn a_release_in_lanes_that_runs_short_goes_on_without_losing_or_doubling_a_user() {
    let (stage, mut event, before) = a_big_new_york_slot(6, 1_500).await;
    // The stage's margin is 20 s: an invocation of 20 s is short from its start.
    let short = Invocation::with_timeout("short", Duration::from_secs(20));
    let mut invocations = 0;
    loop {
        let Response::Release(summary) = stage.handle(event, &short).await.unwrap() else {
            panic!("expected a release");
        };
        invocations += 1;
        if summary.complete {
            break;
        }
        let body = stage.continuation.bodies().last().cloned().unwrap();
        event = serde_json::from_str(&body).unwrap();
        assert!(event["releaseWaiting"]["lanes"].is_array(), "{event}");
    }
    assert!(invocations > 6, "{invocations} invocations");
    let released = &enqueued(&stage)[before..];
    let once: BTreeSet<&String> = released.iter().collect();
    assert_eq!((released.len(), once.len()), (1_501, 1_501));
    let report = stage.waiting.report(&campaign().id).await.unwrap().unwrap();
    assert_eq!(
        (report.still_waiting(), report.releases[0].users),
        (0, 1_501)
    );
}
