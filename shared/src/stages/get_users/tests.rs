// Over 450 lines on purpose: one catalogue of GetUsers' requests and runs (segments,
// checkpoints, local-time holds and releases, bad ids) sharing one in-memory fixture.

//! GetUsers: its requests, and its runs over the in-memory directory and queues.

use super::*;
use crate::config::LocalTimeConfig;
use crate::domain::campaign::{rfc3339, CampaignId};
use crate::domain::topics::TopicId;
use crate::ports::memory::directory::{MemoryDirectory, User};
use crate::ports::memory::{MemoryCampaigns, MemoryOutbox, MemoryWaitingRoom};
use crate::ports::SlotSchedule;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// The clock reading parse uses: 2026-11-28T00:00:00Z.
const NOW_MS: i64 = 1_795_824_000_000;

fn parse(event: Value) -> Result<Request, GetUsersError> {
    let defaults = LocalTimeConfig::from_source(&|_: &str| None).unwrap();
    parse_request(event, &defaults, NOW_MS)
}

fn run(event: Value) -> Run {
    match parse(event) {
        Ok(Request::Run(run)) => run,
        Ok(_) => panic!("expected a run"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn recognises_schedule_manual_and_checkpoints() {
    let scheduled = run(
        json!({"detail-type": "Scheduled Event", "source": "aws.events", "time": "2026-11-23T09:00:00Z"}),
    );
    assert_eq!(scheduled.campaign.id.as_str(), "weekly-2026-W47");
    let manual = run(json!({"campaignId": "weekly-2026-W47", "includeFailed": true}));
    assert_eq!(manual.campaign, scheduled.campaign);
    assert!(manual.include_failed);
    let custom = run(
        json!({"campaignId": "promo", "since": "2026-01-01T00:00:00Z", "until": "2026-01-08T00:00:00Z"}),
    );
    assert_eq!(custom.campaign.id.as_str(), "promo");
    assert!(matches!(
        parse(json!({"Records": [{"messageId": "m1", "body": "{}"}]})),
        Ok(Request::Continuations(r)) if r.len() == 1
    ));
}

#[test]
fn bad_requests_say_what_is_expected() {
    let typo = parse(json!({"campaign": "weekly-2026-W47"}))
        .err()
        .unwrap()
        .to_string();
    assert!(
        typo.contains("unknown field") && typo.contains("Expected"),
        "{typo}"
    );
    let half = parse(json!({"campaignId": "x", "since": "2026-01-01T00:00:00Z"}))
        .err()
        .unwrap();
    assert!(half.to_string().contains("both since and until"));
    assert!(matches!(
        parse(json!({"campaignId": "x"})),
        Err(GetUsersError::Campaign(_))
    ));
    // A weekly id covers its week: another window under its name is refused, naming both,
    // so one mistyped event cannot use up that week's campaign.
    let foreign = parse(json!({
        "campaignId": "weekly-2027-W01",
        "since": "2026-06-01T00:00:00Z", "until": "2026-06-08T00:00:00Z",
    }))
    .err()
    .unwrap()
    .to_string();
    assert!(
        foreign.contains("[2027-01-04T00:00:00Z, 2027-01-11T00:00:00Z)")
            && foreign.contains("[2026-06-01T00:00:00Z, 2026-06-08T00:00:00Z)"),
        "{foreign}"
    );
}

#[test]
fn checkpoint_round_trips() {
    let cp = Checkpoint {
        campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
        window: Campaign::from_id("weekly-2026-W47", None).unwrap().window,
        topic: TopicId::parse("product-news").unwrap(),
        include_failed: false,
        include_cancelled: false,
        after: Some("u00042".into()),
        segment: 3,
        delivery: None,
    };
    let body = serde_json::to_string(&cp).unwrap();
    assert_eq!(parse_body::<Checkpoint>(Some(&body)).unwrap(), cp);
}

const OID: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W47", None).unwrap()
}

/// Eligible users with string and ObjectId ids, and users the audience leaves out.
fn directory() -> MemoryDirectory {
    let at = campaign().window.since + time::Duration::hours(1);
    let before = campaign().window.since - time::Duration::hours(1);
    let mut quit = User::named("Quit", "q@example.com");
    quit.subscribed = false;
    let mut bounced = User::named("Bounced", "b@example.com");
    bounced.suppressed = true;
    MemoryDirectory::default()
        .user("u2", User::named("Two", "2@example.com"))
        .user("u1", User::named("One", "1@example.com"))
        .user(OID, User::named("Olga", "o@example.com"))
        .user("str:oid:x", User::named("Escaped", "e@example.com"))
        .user("quit", quit)
        .user("bounced", bounced)
        .user("old", User::named("Old", "old@example.com"))
        .follow("u1", "u2", at)
        .follow("u2", "u1", at)
        .follow("u2", "u1", at)
        .follow("u1", OID, at)
        .follow("u1", "str:oid:x", at)
        .follow("u1", "quit", at)
        .follow("u1", "bounced", at)
        .follow("u1", "old", before)
        .odd_follows(3)
}

type Stage = GetUsers<MemoryDirectory, MemoryOutbox, MemoryCampaigns, MemoryWaitingRoom>;

fn stage(margin_seconds: &str) -> Stage {
    stage_over(directory(), margin_seconds)
}

fn stage_over(directory: MemoryDirectory, margin_seconds: &str) -> Stage {
    let vars = |k: &str| {
        let v = match k {
            "MONGODB_URI" => "mongodb://127.0.0.1:1",
            "USERS_QUEUE_URL" => "http://users",
            "CONTINUATION_QUEUE_URL" => "http://continuation",
            "CAMPAIGNS_TABLE_NAME" => "campaigns",
            "WAITING_TABLE_NAME" => "waiting",
            "RELEASE_SCHEDULE_GROUP" => "releases",
            "RELEASE_SCHEDULER_ROLE_ARN" => "arn:aws:iam::000000000000:role/scheduler",
            "RELEASE_DEAD_LETTER_ARN" => "arn:aws:sqs:us-east-1:000000000000:schedule-dlq",
            "DEADLINE_MARGIN_SECONDS" => margin_seconds,
            _ => return None,
        };
        Some(v.to_owned())
    };
    let config = GetUsersConfig::from_source(&vars).unwrap();
    GetUsers::new(
        directory,
        MemoryOutbox::default(),
        MemoryOutbox::default(),
        MemoryCampaigns::default(),
        MemoryWaitingRoom::default(),
        config,
    )
}

fn enqueued(stage: &Stage) -> Vec<String> {
    stage
        .users
        .bodies()
        .iter()
        .map(|b| serde_json::from_str::<UserMessage>(b).unwrap().user_id)
        .collect()
}

fn manual() -> Value {
    json!({"campaignId": "weekly-2026-W47"})
}

fn plenty() -> Invocation {
    Invocation::with_timeout("r1", Duration::from_secs(900))
}

#[tokio::test]
async fn a_run_enqueues_the_audience_once_each_in_id_order() {
    let stage = stage("20");
    let Response::Run(summary) = stage.handle(manual(), &plenty()).await.unwrap() else {
        panic!("expected a run summary");
    };
    // Strings in order, then ObjectIds; the escaped string keeps its text form.
    assert_eq!(enqueued(&stage), ["str:oid:x", "u1", "u2", OID]);
    assert_eq!(summary.users_enqueued, 4);
    assert_eq!(summary.follows_skipped, 3);
    assert!(summary.complete && summary.continued_after.is_none());
    assert!(stage.continuation.bodies().is_empty());
}

#[tokio::test]
async fn a_campaigns_window_is_fixed_when_it_first_starts() {
    let stage = stage("20");
    let window = campaign().window;
    let start = |until: OffsetDateTime| json!({"campaignId": "promo", "since": rfc3339(window.since), "until": rfc3339(until)});
    stage.handle(start(window.until), &plenty()).await.unwrap();
    // The same window again: a re-run, which the ledger keeps from sending twice.
    stage.handle(start(window.until), &plenty()).await.unwrap();
    let enqueued_before = enqueued(&stage).len();
    let later = window.until + time::Duration::days(1);
    let err = stage.handle(start(later), &plenty()).await.err().unwrap();
    assert!(
        matches!(
            err,
            GetUsersError::Campaign(CampaignError::WindowChanged { .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("was started with the window"),
        "{err}"
    );
    assert_eq!(enqueued(&stage).len(), enqueued_before, "nothing enqueued");
}

#[tokio::test]
async fn a_window_not_over_or_too_long_is_refused_before_anything_is_enqueued() {
    let stage = stage("20");
    let now = OffsetDateTime::now_utc();
    let start = |since: OffsetDateTime, until: OffsetDateTime| json!({"campaignId": "promo", "since": rfc3339(since), "until": rfc3339(until)});
    let not_over = start(now - time::Duration::days(3), now + time::Duration::days(1));
    let err = stage.handle(not_over, &plenty()).await.err().unwrap();
    assert!(err.to_string().contains("ends in the future"), "{err}");
    let window = campaign().window;
    // MAX_WINDOW_DAYS defaults to 31.
    let long = start(window.until - time::Duration::days(32), window.until);
    let err = stage.handle(long, &plenty()).await.err().unwrap();
    assert!(err.to_string().contains("32 days long"), "{err}");
    let longest = start(window.until - time::Duration::days(31), window.until);
    stage.handle(longest, &plenty()).await.unwrap();
    // Only the accepted start enqueued anything, and only it is registered.
    assert_eq!(stage.campaigns.states().registered.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn users_whose_ids_cannot_travel_are_refused_and_counted_not_enqueued() {
    let at = campaign().window.since + time::Duration::hours(1);
    let mut directory = directory();
    for id in [
        "tab\there".to_owned(),
        "new\nline".to_owned(),
        "x".repeat(600),
    ] {
        let user = User::named("Untravelled", "u@example.com");
        directory = directory.followed_user(UserId::Text(id), user, "u1", at);
    }
    let stage = stage_over(directory, "20");
    let Response::Run(summary) = stage.handle(manual(), &plenty()).await.unwrap() else {
        panic!("expected a run summary");
    };
    assert_eq!(enqueued(&stage), ["str:oid:x", "u1", "u2", OID]);
    assert_eq!((summary.users_enqueued, summary.users_refused), (4, 3));
    assert!(summary.complete);
}

#[tokio::test]
async fn a_run_out_of_time_continues_from_checkpoints_without_gaps_or_repeats() {
    // A margin longer than the invocation: one user per invocation, then a checkpoint.
    let stage = stage("3600");
    let Response::Run(first) = stage.handle(manual(), &plenty()).await.unwrap() else {
        panic!("expected a run summary");
    };
    assert!(!first.complete);
    assert_eq!(first.continued_after.as_deref(), Some("str:oid:x"));
    let mut segments = 1;
    loop {
        let pending = stage.continuation.bodies();
        let Some(body) = pending.get(segments - 1).cloned() else {
            break;
        };
        let checkpoint: Checkpoint = serde_json::from_str(&body).unwrap();
        assert_eq!(checkpoint.segment as usize, segments);
        let records = json!({"Records": [{"messageId": "c", "body": body}]});
        let Response::Checkpoints(response) = stage.handle(records, &plenty()).await.unwrap()
        else {
            panic!("expected a batch response");
        };
        assert!(response.batch_item_failures.is_empty());
        segments += 1;
    }
    assert_eq!(enqueued(&stage), ["str:oid:x", "u1", "u2", OID]);
    // The last checkpoint's run finds the audience ended and leaves none.
    assert_eq!(segments, 5);
}

#[tokio::test]
async fn a_queue_that_refuses_fails_the_run_and_leaves_no_checkpoint() {
    let stage = stage("3600");
    stage
        .users
        .closed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = stage.handle(manual(), &plenty()).await.err().unwrap();
    assert!(matches!(err, GetUsersError::Queue(_)), "{err}");
    assert!(stage.continuation.bodies().is_empty());
}

/// The message ids of an SQS batch of continuation records that come back for a retry.
async fn failed_records(stage: &Stage, records: Value) -> Vec<String> {
    let Response::Checkpoints(response) = stage.handle(records, &plenty()).await.unwrap() else {
        panic!("expected a batch response");
    };
    response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect()
}

#[tokio::test]
async fn a_bad_checkpoint_fails_alone() {
    let stage = stage("20");
    let good = Checkpoint {
        campaign_id: campaign().id,
        window: campaign().window,
        topic: campaign().topic,
        include_failed: false,
        include_cancelled: false,
        after: Some("u2".into()),
        segment: 1,
        delivery: None,
    };
    let records = json!({"Records": [
        {"messageId": "bad", "body": "{\"campaignId\": 7}"},
        {"messageId": "bad-after", "body": serde_json::to_string(&Checkpoint { after: Some("oid:zz".into()), ..good.clone() }).unwrap()},
        {"messageId": "good", "body": serde_json::to_string(&good).unwrap()},
    ]});
    let failed = failed_records(&stage, records).await;
    assert_eq!(failed, ["bad", "bad-after"]);
    assert_eq!(enqueued(&stage), [OID]);
}

/// Lambda's record of an asynchronous invocation that failed three times, as its
/// on-failure destination receives it.
fn failed_invocation(payload: Value) -> String {
    json!({
        "version": "1.0",
        "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 3},
        "requestPayload": payload,
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
        "responsePayload": {"errorMessage": "the waiting table could not be read"},
    })
    .to_string()
}

#[tokio::test]
async fn an_invocation_lambda_gave_up_on_runs_again_from_the_continuation_queue() {
    let stage = stage("20");
    let records = json!({"Records": [
        {"messageId": "run", "body": failed_invocation(manual())},
        // Fails the same way every time: refused now, not retried into the DLQ.
        {"messageId": "never", "body": failed_invocation(json!({"campaignId": "no spaces allowed"}))},
        {"messageId": "batch", "body": failed_invocation(json!({"Records": []}))},
    ]});
    assert!(failed_records(&stage, records).await.is_empty());
    assert_eq!(enqueued(&stage), ["str:oid:x", "u1", "u2", OID]);

    // A store that fails again is a fault of the moment: the record goes back for a retry.
    let stage = self::stage("20");
    stage
        .users
        .closed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let records = json!({"Records": [{"messageId": "run", "body": failed_invocation(manual())}]});
    let failed = failed_records(&stage, records).await;
    assert_eq!(failed, ["run"]);
}

#[tokio::test]
async fn a_cancelled_campaign_is_not_fanned_out_and_leaves_no_checkpoint() {
    let stage = stage("3600");
    stage.campaigns.states.cancel(campaign().id.as_str());
    let Response::Run(summary) = stage.handle(manual(), &plenty()).await.unwrap() else {
        panic!("expected a run summary");
    };
    assert!(summary.cancelled && !summary.complete);
    assert_eq!(summary.users_enqueued, 0);
    assert!(enqueued(&stage).is_empty());
    assert!(stage.continuation.bodies().is_empty());
}

#[tokio::test]
async fn a_paused_campaign_parks_its_checkpoint_and_continues_from_it_when_resumed() {
    let paused = stage("3600");
    paused.campaigns.states.pause(campaign().id.as_str());
    let Response::Run(summary) = paused.handle(manual(), &plenty()).await.unwrap() else {
        panic!("expected a run summary");
    };
    assert!(summary.paused && !summary.complete && !summary.cancelled);
    assert_eq!(summary.users_enqueued, 0);
    assert!(
        paused
            .campaigns
            .states
            .registered
            .lock()
            .unwrap()
            .contains_key(campaign().id.as_str()),
        "registered RUNNING before the pause was seen"
    );
    let parked = paused.continuation.bodies();
    assert_eq!(parked.len(), 1, "one checkpoint parked");
    // Should the consumer still run, the checkpoint comes back in a minute, and looking
    // again decides nobody: it keeps its segment (no new entry a minute in the report).
    let records = json!({"Records": [{"messageId": "again", "body": parked[0]}]});
    paused.handle(records, &plenty()).await.unwrap();
    let again = paused.continuation.delayed.lock().unwrap().clone();
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|(delay, _)| *delay == 60), "{again:?}");
    let segment = |body: &str| serde_json::from_str::<Checkpoint>(body).unwrap().segment;
    assert_eq!(segment(&again[1].1), segment(&again[0].1));

    // After the resume (a new execution environment: no cached state), the parked
    // checkpoint enqueues the whole audience.
    let resumed = stage("3600");
    let records = json!({"Records": [{"messageId": "parked", "body": parked[0]}]});
    let Response::Checkpoints(response) = resumed.handle(records, &plenty()).await.unwrap() else {
        panic!("expected a batch response");
    };
    assert!(response.batch_item_failures.is_empty());
    let unpaused = stage("3600");
    unpaused.handle(manual(), &plenty()).await.unwrap();
    assert_eq!(enqueued(&resumed), enqueued(&unpaused));
    assert!(!enqueued(&resumed).is_empty());
}

mod local_time_delivery {
    use super::*;
    use crate::domain::local_time::rfc3339_ms;
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
        let Response::Release(paused) = stage.handle(event.clone(), &plenty()).await.unwrap()
        else {
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
        let Response::Checkpoints(response) = stage.handle(records, &plenty()).await.unwrap()
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
    async fn a_user_due_within_a_quarter_hour_is_delayed_so_every_hold_is_written_before_its_slot()
    {
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
        assert_eq!((slot.held, slot.released, slot.waiting), (1, 1, 1));
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
        assert_eq!((slot.released, slot.swept, slot.waiting), (1, 1, 0));
        assert!(!slot.stranded);
        assert_eq!(report.slots_released(), 1);
        // The release's lateness is the release's, not the sweep's.
        assert_eq!(report.release_lateness().unwrap().max_ms, 0);
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
}

/// `directory()` with two users who chose topics: one left the digest, one joined tips.
fn directory_with_choices() -> MemoryDirectory {
    let at = campaign().window.since + time::Duration::hours(1);
    let topic = |id: &str| TopicId::parse(id).unwrap();
    let mut left_digest = User::named("Leaver", "l@example.com");
    left_digest.topics.insert(topic("digest"), false);
    let mut tips_reader = User::named("Reader", "r@example.com");
    tips_reader.topics.insert(topic("tips"), true);
    directory()
        .user("left-digest", left_digest)
        .user("tips-reader", tips_reader)
        .follow("u1", "left-digest", at)
        .follow("u1", "tips-reader", at)
}

#[tokio::test]
async fn each_campaign_reaches_its_topics_audience_and_counts_who_it_leaves_out() {
    let run = |topic: Option<&'static str>| async move {
        let stage = stage_over(directory_with_choices(), "20");
        let mut event = json!({"campaignId": "weekly-2026-W47"});
        if let Some(topic) = topic {
            event["topic"] = topic.into();
        }
        let Response::Run(summary) = stage.handle(event, &plenty()).await.unwrap() else {
            panic!("expected a run summary");
        };
        let bodies = stage.users.bodies();
        let topics: BTreeSet<String> = bodies
            .iter()
            .map(|b| {
                serde_json::from_str::<UserMessage>(b)
                    .unwrap()
                    .topic
                    .to_string()
            })
            .collect();
        let recorded = stage.campaigns.states().excluded.lock().unwrap().clone();
        (enqueued(&stage), summary.excluded, topics, recorded)
    };
    // The weekly digest: the leaver is out (left_topic), the tips reader in (digest is "in"
    // by default), with the unsubscribed and the suppressed user counted.
    let (users, excluded, topics, recorded) = run(None).await;
    assert_eq!(users, ["str:oid:x", "tips-reader", "u1", "u2", OID]);
    assert_eq!(
        excluded.describe(),
        "unsubscribed 1, suppressed 1, left_topic 1"
    );
    assert_eq!(topics, BTreeSet::from(["digest".to_owned()]));
    assert_eq!(recorded[&("weekly-2026-W47".to_owned(), 0)], excluded);
    // Tips is "out" by default: only the one who joined it.
    let (users, excluded, topics, _) = run(Some("tips")).await;
    assert_eq!(users, ["tips-reader"]);
    assert_eq!(excluded.left_topic, 5);
    assert_eq!(topics, BTreeSet::from(["tips".to_owned()]));
    // Product news, "in" by default: the digest leaver still gets it.
    let (users, _, _, _) = run(Some("product-news")).await;
    assert!(users.contains(&"left-digest".to_owned()), "{users:?}");
}

#[tokio::test]
async fn an_unknown_topic_is_refused_naming_the_topics_there_are() {
    let stage = stage("20");
    let err = stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "topic": "newsletter"}),
            &plenty(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "there is no topic \"newsletter\": the topics are digest, product-news, tips (shared/topics.json)"
    );
    assert!(stage.users.bodies().is_empty());
    assert!(stage
        .campaigns
        .states()
        .registered
        .lock()
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_campaigns_topic_is_fixed_when_it_first_starts_and_a_resend_keeps_it() {
    let stage = stage_over(directory_with_choices(), "20");
    let start = |topic: Option<&str>| {
        let mut event = json!({"campaignId": "weekly-2026-W47"});
        if let Some(topic) = topic {
            event["topic"] = topic.into();
        }
        event
    };
    stage.handle(start(Some("tips")), &plenty()).await.unwrap();
    let err = stage
        .handle(start(Some("product-news")), &plenty())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GetUsersError::Campaign(CampaignError::TopicChanged { .. })
        ),
        "{err}"
    );
    // A start that names no topic (a resend) is the campaign's own: still tips.
    stage.handle(start(None), &plenty()).await.unwrap();
    let topics: BTreeSet<String> = stage
        .users
        .bodies()
        .iter()
        .map(|b| {
            serde_json::from_str::<UserMessage>(b)
                .unwrap()
                .topic
                .to_string()
        })
        .collect();
    assert_eq!(topics, BTreeSet::from(["tips".to_owned()]));
}
