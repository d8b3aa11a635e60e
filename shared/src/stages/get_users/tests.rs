//! GetUsers: its requests, and its runs over the in-memory directory and queues (one
//! fixture; local time's cases are in `tests/local_time_delivery.rs`).

use super::*;
use crate::config::LocalTimeConfig;
use crate::domain::campaign::{rfc3339, Campaign, CampaignId};
use crate::domain::experiment::Assignment;
use crate::domain::messages::UserMessage;
use crate::domain::topics::TopicId;
use crate::ports::memory::directory::{MemoryDirectory, User};
use crate::ports::memory::{MemoryCampaigns, MemoryOutbox, MemoryResults, MemoryWaitingRoom};
use crate::ports::SlotSchedule;
use serde_json::json;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;
use time::OffsetDateTime;

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
        started_at_ms: Some(1_795_000_000_000),
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
    stage_with(directory, margin_seconds, &[])
}

fn stage_with(directory: MemoryDirectory, margin_seconds: &str, extra: &[(&str, &str)]) -> Stage {
    let results = Arc::new(MemoryResults::default());
    stage_with_results(directory, margin_seconds, extra, results)
}

fn stage_with_results(
    directory: MemoryDirectory,
    margin_seconds: &str,
    extra: &[(&str, &str)],
    results: Arc<MemoryResults>,
) -> Stage {
    let vars = |k: &str| {
        if let Some((_, v)) = extra.iter().find(|(n, _)| *n == k) {
            return Some(v.to_string());
        }
        let v = match k {
            "MONGODB_URI" => "mongodb://127.0.0.1:1",
            "USERS_QUEUE_URL" => "http://users",
            "TRACK_OPENS_AND_CLICKS" => "true",
            "CONTINUATION_QUEUE_URL" => "http://continuation",
            "CAMPAIGNS_TABLE_NAME" => "campaigns",
            "SENDS_TABLE_NAME" => "sends",
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
        results,
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
        let Response::Checkpoints(Checkpoints { response, .. }) =
            stage.handle(records, &plenty()).await.unwrap()
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
    let Response::Checkpoints(Checkpoints { response, .. }) =
        stage.handle(records, &plenty()).await.unwrap()
    else {
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
        started_at_ms: None,
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
async fn a_failed_continuation_record_comes_back_after_a_short_backoff_by_its_receives() {
    assert_eq!(
        (1..=6).map(continuation_backoff).collect::<Vec<_>>(),
        [30, 120, 480, 1800, 1800, 1800].map(Duration::from_secs)
    );
    let stage = stage("20");
    stage
        .users
        .closed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let record = |id: &str, receives: u32| {
        json!({
            "messageId": id,
            "receiptHandle": format!("receipt-{id}"),
            "body": failed_invocation(manual()),
            "attributes": {"ApproximateReceiveCount": receives.to_string()},
        })
    };
    let records = json!({"Records": [record("first", 1), record("third", 3)]});
    let failed = failed_records(&stage, records).await;
    assert_eq!(failed, ["first", "third"]);
    // Set before the response reports them: back in 30 s and 8 minutes, not 90.
    assert_eq!(
        *stage.continuation.visibility.lock().unwrap(),
        [
            ("receipt-first".to_owned(), Duration::from_secs(30)),
            ("receipt-third".to_owned(), Duration::from_secs(480)),
        ]
    );
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
    let Response::Checkpoints(Checkpoints { response, .. }) =
        resumed.handle(records, &plenty()).await.unwrap()
    else {
        panic!("expected a batch response");
    };
    assert!(response.batch_item_failures.is_empty());
    let unpaused = stage("3600");
    unpaused.handle(manual(), &plenty()).await.unwrap();
    assert_eq!(enqueued(&resumed), enqueued(&unpaused));
    assert!(!enqueued(&resumed).is_empty());
}

mod local_time_delivery;

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

#[tokio::test]
async fn guardrails_are_fixed_when_a_campaign_first_starts_and_only_its_deadline_moves() {
    let stage = stage_with(
        directory(),
        "20",
        &[("HOLDOUT_PERCENT", "10"), ("CAMPAIGN_DEADLINE_HOURS", "48")],
    );
    let recorded = |id: &str| stage.campaigns.states().guardrails.lock().unwrap()[id];
    stage.handle(manual(), &plenty()).await.unwrap();
    let first = recorded("weekly-2026-W47");
    assert_eq!(first.holdout_bp, 1000, "the stack's default");
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let deadline = first.deadline_ms.unwrap();
    assert!((now + 47 * 3_600_000..=now + 48 * 3_600_000).contains(&deadline));
    // Another holdout is refused, naming both; the same one is accepted.
    let other = json!({"campaignId": "weekly-2026-W47", "holdoutPercent": 20});
    let err = stage
        .handle(other, &plenty())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("10.00 %") && err.contains("20.00 %"), "{err}");
    let same = json!({"campaignId": "weekly-2026-W47", "holdoutPercent": "10"});
    stage.handle(same, &plenty()).await.unwrap();
    // A deadline given moves it; one already passed is refused, and nothing is enqueued.
    let later = json!({"campaignId": "weekly-2026-W47", "deadline": "2099-01-01T00:00:00Z"});
    stage.handle(later, &plenty()).await.unwrap();
    assert_eq!(
        recorded("weekly-2026-W47").deadline_ms,
        Some(4_070_908_800_000)
    );
    let enqueued_before = stage.users.bodies().len();
    let passed = json!({"campaignId": "weekly-2026-W47", "deadline": "2020-01-01T00:00:00Z"});
    let err = stage
        .handle(passed, &plenty())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("has passed") && err.contains("--deadline"),
        "{err}"
    );
    assert_eq!(stage.users.bodies().len(), enqueued_before);
    // A campaign started before guardrails were recorded takes none of the defaults.
    stage
        .campaigns
        .states()
        .registered
        .lock()
        .unwrap()
        .insert("legacy-1".into(), 1);
    let legacy = json!({
        "campaignId": "legacy-1", "since": "2026-11-16T00:00:00Z", "until": "2026-11-23T00:00:00Z",
    });
    stage.handle(legacy, &plenty()).await.unwrap();
    assert_eq!(recorded("legacy-1"), Default::default());
}

/// The stack's default deadline (`CAMPAIGN_DEADLINE_HOURS`) counts from the wall clock at
/// the start, as SendEmail judges it: a decision clock days behind (the simulator's, set to
/// a campaign's local times) does not date the deadline days early.
#[tokio::test]
async fn a_start_dates_its_default_deadline_and_registration_by_the_wall_clock() {
    let behind =
        crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64 - 3 * 86_400_000;
    let stage = stage_with(directory(), "20", &[("CAMPAIGN_DEADLINE_HOURS", "48")])
        .with_clock(crate::ports::memory::MemoryClock::at(behind));
    stage.handle(manual(), &plenty()).await.unwrap();
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let deadline = stage.campaigns.states().guardrails.lock().unwrap()["weekly-2026-W47"]
        .deadline_ms
        .unwrap();
    assert!(
        (now + 47 * 3_600_000..=now + 48 * 3_600_000).contains(&deadline),
        "deadline {deadline} is not 48 h after the wall clock's {now}"
    );
    let registered = stage.campaigns.states().registered.lock().unwrap()["weekly-2026-W47"];
    assert!(
        (now - 60_000..=now).contains(&(registered as i64)),
        "registered at {registered}, not at the wall clock's {now}"
    );
}

/// A clock the test moves.
struct TestClock(std::sync::atomic::AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// 60 users with a new follower each.
fn crowd() -> MemoryDirectory {
    let at = campaign().window.since + time::Duration::hours(1);
    (0..60).fold(MemoryDirectory::default(), |d, i| {
        let id = format!("c{i:02}");
        d.user(&id, User::named("C", "c@example.com"))
            .follow("u1", &id, at)
    })
}

fn messages(bodies: &[String]) -> Vec<UserMessage> {
    bodies
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect()
}

#[tokio::test]
async fn an_experiment_sends_the_test_group_its_variants_and_the_rest_the_winner_after_the_wait() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let clock = Arc::new(TestClock(now.into()));
    let stage = stage_with_results(crowd(), "20", &[], results.clone()).with_clock(clock.clone());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 2, "minDelivered": 3, "minPeople": 5});
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment});
    stage.handle(start.clone(), &plenty()).await.unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    assert_eq!(decide_at, (now + 2 * 3_600_000 + 999) / 1000 * 1000);
    // The test group now, each in their variant; the rest held for the decision's slot.
    let test = messages(&stage.users.bodies());
    let held = stage.waiting.held.lock().unwrap()[&("weekly-2026-W47".into(), decide_at)].clone();
    assert_eq!(test.len() + held.len(), 60);
    assert!(
        test.len() > 15 && held.len() > 15,
        "{} {}",
        test.len(),
        held.len()
    );
    for m in &test {
        let Assignment::Test(i) = recorded.assign("weekly-2026-W47", &m.user_id) else {
            panic!("{} is not in the test group", m.user_id);
        };
        assert_eq!(
            m.variant.as_deref(),
            Some(recorded.variants[i].name.as_str())
        );
    }
    for (user, body) in &held {
        assert_eq!(recorded.assign("weekly-2026-W47", user), Assignment::Rest);
        assert_eq!(messages(std::slice::from_ref(body))[0].variant, None);
    }
    // Another experiment on a later start is refused; so is one on a campaign started
    // without.
    let mut other = start.clone();
    other["experiment"]["testPercent"] = json!(30);
    let err = stage
        .handle(other, &plenty())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("started with another experiment"), "{err}");
    stage
        .handle(json!({"campaignId": "weekly-2026-W46"}), &plenty())
        .await
        .unwrap();
    let mut late = start.clone();
    late["campaignId"] = json!("weekly-2026-W46");
    let err = stage.handle(late, &plenty()).await.unwrap_err().to_string();
    assert!(err.contains("started without an experiment"), "{err}");
    // The same start again (a retry) is accepted and sends nobody twice... to the queue
    // (the ledger keeps the sends once).
    stage.handle(start, &plenty()).await.unwrap();
    // At the decision's slot, b clicked far more: the rest gets b.
    let tally = |delivered, human_clicks| crate::domain::experiment::Tally {
        sent: delivered,
        delivered,
        human_clicks,
        human_opens: 0,
        last_sent_ms: None,
    };
    results.0.lock().unwrap().insert(
        "weekly-2026-W47".into(),
        [
            ("a".to_string(), tally(20, 1)),
            ("b".to_string(), tally(20, 15)),
        ]
        .into(),
    );
    let before = stage.users.bodies().len();
    let release = Release {
        campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
        slot_ms: decide_at,
        from: Default::default(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    // Not before its time...
    let early = stage.release(release.clone(), &plenty()).await.unwrap();
    assert!(early.early && early.users_released == 0);
    clock
        .0
        .store(decide_at, std::sync::atomic::Ordering::SeqCst);
    let summary = stage.release(release, &plenty()).await.unwrap();
    assert_eq!(summary.users_released as usize, held.len());
    let rest = messages(&stage.users.bodies()[before..]);
    assert!(rest.iter().all(|m| m.variant.as_deref() == Some("b")));
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    assert_eq!(decision.winner, "b");
    assert_eq!(decision.by, crate::domain::experiment::DecidedBy::Rule);
    // A resend after the decision sends the rest the winner at once, holding nobody.
    let resend = json!({"campaignId": "weekly-2026-W47", "includeFailed": true});
    let before = stage.users.bodies().len();
    stage.handle(resend, &plenty()).await.unwrap();
    let again = messages(&stage.users.bodies()[before..]);
    assert_eq!(again.len(), 60);
    for m in again {
        let expected = match recorded.assign("weekly-2026-W47", &m.user_id) {
            Assignment::Test(i) => recorded.variants[i].name.clone(),
            Assignment::Rest => "b".into(),
        };
        assert_eq!(m.variant, Some(expected));
    }
}

/// A clock that moves on a millisecond at each reading, as a segment's clock does between
/// users.
struct Ticking(std::sync::atomic::AtomicI64);

impl Clock for Ticking {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_decision_instant_that_passes_during_a_segment_decides_then_and_holds_no_more() {
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage = stage_with(crowd(), "20", &[]).with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 2});
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment});
    stage.handle(start, &plenty()).await.unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    // A resend that starts just before the decision's instant and passes it after a few
    // users.
    let stage = stage.with_clock(Arc::new(Ticking((decide_at - 5).into())));
    let before = stage.users.bodies().len();
    let resend = json!({"campaignId": "weekly-2026-W47", "includeFailed": true});
    let Response::Run(summary) = stage.handle(resend, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert!(summary.complete);
    let slots: BTreeSet<i64> = (stage.waiting.held.lock().unwrap().keys())
        .map(|(_, slot)| *slot)
        .collect();
    assert_eq!(
        slots,
        BTreeSet::from([decide_at]),
        "one slot, the decision's"
    );
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    let sent_rest: Vec<UserMessage> = messages(&stage.users.bodies()[before..])
        .into_iter()
        .filter(|m| recorded.assign("weekly-2026-W47", &m.user_id) == Assignment::Rest)
        .collect();
    assert!(sent_rest.len() > 30, "{}", sent_rest.len());
    assert!(sent_rest
        .iter()
        .all(|m| m.variant.as_deref() == Some(decision.winner.as_str())));
}

#[tokio::test]
async fn a_variant_picked_by_hand_releases_the_rest_before_the_wait_ends() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage =
        stage_with_results(crowd(), "20", &[], results).with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 4});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap();
    let id = CampaignId::parse("weekly-2026-W47").unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let picked = crate::domain::experiment::decide(&recorded, &Default::default(), Some("b"), now);
    stage
        .campaigns
        .states()
        .record_decision(&id, &picked)
        .await
        .unwrap();
    let before = stage.users.bodies().len();
    let release = Release {
        campaign_id: id,
        slot_ms: recorded.decide_at_ms.unwrap(),
        from: Default::default(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    let summary = stage.release(release, &plenty()).await.unwrap();
    assert!(!summary.early && summary.users_released > 30, "{summary:?}");
    let rest = messages(&stage.users.bodies()[before..]);
    assert!(rest.iter().all(|m| m.variant.as_deref() == Some("b")));
}

#[tokio::test]
async fn an_experiment_whose_deadline_comes_before_its_decision_is_refused() {
    let stage = stage_with(crowd(), "20", &[]);
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 6});
    let in_hours = |h: i64| rfc3339(time::OffsetDateTime::now_utc() + time::Duration::hours(h));
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": in_hours(3)});
    let err = stage
        .handle(start.clone(), &plenty())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("comes before the rest of its audience can be sent"),
        "{err}"
    );
    assert!(stage.users.bodies().is_empty(), "nothing enqueued");
    // A later deadline moves it, and the campaign starts.
    let mut later = start;
    later["deadline"] = json!(in_hours(30));
    stage.handle(later, &plenty()).await.unwrap();
    assert!(!stage.users.bodies().is_empty());
}

#[tokio::test]
async fn a_rest_that_cannot_be_sent_before_the_deadline_at_the_rate_is_warned_of() {
    // One email every 100 s: the rest (about 48 users) takes over an hour from the decision.
    let now = time::OffsetDateTime::now_utc();
    let clock = || {
        Arc::new(TestClock(
            ((now.unix_timestamp_nanos() / 1_000_000) as i64).into(),
        ))
    };
    let stage = stage_with(crowd(), "20", &[("SEND_RATE_PER_SECOND", "0.01")]).with_clock(clock());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 2});
    // The decision two hours from now comes before a deadline 30.5 minutes later (the
    // decision rounded up and the deadline down to their seconds take up to 2 s of it): the
    // start is not refused, but the rest would go until well after it.
    let deadline = rfc3339(now + time::Duration::seconds(7200 + 1830));
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": deadline});
    let Response::Run(summary) = stage.handle(start, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    let held = summary.local_time.unwrap().experiment_held;
    assert!(held > 30, "{held}");
    // About 30.5 minutes at 0.01/s send 18 of them.
    assert_eq!(summary.users_past_deadline, held - 18);
    // With the rate the rest needs, nothing is past it.
    let stage = stage_with(crowd(), "20", &[("SEND_RATE_PER_SECOND", "14")]).with_clock(clock());
    let start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                       "deadline": deadline});
    let Response::Run(summary) = stage.handle(start, &plenty()).await.unwrap() else {
        panic!("expected a run");
    };
    assert_eq!(summary.users_past_deadline, 0);
}

#[tokio::test]
async fn with_local_time_the_wait_starts_after_the_last_zone_and_the_rest_goes_at_their_local_time()
{
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let stage = stage_with(crowd(), "20", &[("FALLBACK_TIME_ZONE", "Asia/Tokyo")])
        .with_clock(Arc::new(TestClock(now.into())));
    let tomorrow = (time::OffsetDateTime::now_utc() + time::Duration::days(1)).date();
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 3});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                   "localTime": "09:00", "sendDate": tomorrow.to_string()}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    // 09:00 tomorrow at UTC-12 is 21:00 UTC tomorrow; the decision 3 hours later.
    let last_zone = time::OffsetDateTime::new_utc(tomorrow, time::macros::time!(21:00));
    let decide_at = (last_zone.unix_timestamp() + 3 * 3600) * 1000;
    assert_eq!(recorded.decide_at_ms, Some(decide_at));
    // The rest waits for the first 09:00 in Tokyo at or after the decision (00:00 UTC the
    // day after tomorrow: the decision's instant itself); the test group for tomorrow's.
    let held = stage.waiting.held.lock().unwrap().clone();
    let tokyo_nine = |date: time::Date| {
        (time::OffsetDateTime::new_utc(date, time::macros::time!(00:00)).unix_timestamp()) * 1000
    };
    let test_slot = tokyo_nine(tomorrow);
    let rest_slot = tokyo_nine(tomorrow.next_day().unwrap());
    let slots: BTreeSet<i64> = held.keys().map(|(_, slot)| *slot).collect();
    assert_eq!(slots, BTreeSet::from([test_slot, rest_slot]), "{slots:?}");
    for ((_, slot), users) in &held {
        for user in users.keys() {
            let rest = recorded.assign("weekly-2026-W47", user) == Assignment::Rest;
            assert_eq!(rest, *slot == rest_slot, "{user} at {slot}");
        }
    }
}

#[tokio::test]
async fn with_passed_time_skip_the_rest_in_a_passed_zone_still_gets_the_winner_at_its_local_time() {
    // Noon UTC tomorrow: 09:00 in Tokyo (00:00 UTC) has passed, and the policy skips it.
    let tomorrow = (time::OffsetDateTime::now_utc() + time::Duration::days(1)).date();
    let utc = |date: time::Date, hour: u8| {
        time::OffsetDateTime::new_utc(date, time::Time::from_hms(hour, 0, 0).unwrap())
            .unix_timestamp()
            * 1000
    };
    let now = utc(tomorrow, 12);
    let stage = stage_with(crowd(), "20", &[("FALLBACK_TIME_ZONE", "Asia/Tokyo")])
        .with_clock(Arc::new(TestClock(now.into())));
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 3});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment,
                   "localTime": "09:00", "sendDate": tomorrow.to_string(),
                   "passedTime": "skip"}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    // The test group in Tokyo is skipped (its 09:00 passed at the start); the decision comes
    // 3 hours after UTC-12's 09:00 (21:00 UTC), and the rest gets the winner at Tokyo's
    // next 09:00 after it, which nothing has passed.
    let decide_at = utc(tomorrow, 21) + 3 * 3_600_000;
    assert_eq!(recorded.decide_at_ms, Some(decide_at));
    let rest_slot = utc(tomorrow.next_day().unwrap(), 0);
    assert!(stage.users.bodies().is_empty(), "the test group is skipped");
    let held = stage.waiting.held.lock().unwrap().clone();
    let slots: BTreeSet<i64> = held.keys().map(|(_, slot)| *slot).collect();
    assert_eq!(slots, BTreeSet::from([rest_slot]), "{slots:?}");
    let rest = (0..60)
        .filter(|i| recorded.assign("weekly-2026-W47", &format!("c{i:02}")) == Assignment::Rest)
        .count();
    assert!(rest > 15, "{rest}");
    assert_eq!(held[&("weekly-2026-W47".into(), rest_slot)].len(), rest);
}

#[tokio::test]
async fn the_wait_counts_from_the_test_groups_last_email_not_the_start() {
    let results = Arc::new(MemoryResults::default());
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now()) as i64;
    let clock = Arc::new(TestClock(now.into()));
    let stage = stage_with_results(crowd(), "20", &[], results.clone()).with_clock(clock.clone());
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50,
                            "waitHours": 2, "minDelivered": 3, "minPeople": 5});
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap();
    let recorded = stage.campaigns.states().experiments.lock().unwrap()["weekly-2026-W47"].clone();
    let decide_at = recorded.decide_at_ms.unwrap();
    let held = stage.waiting.held.lock().unwrap()[&("weekly-2026-W47".into(), decide_at)].len();
    // The test group went at the rate: its last email 90 minutes after the start, so the
    // decision is due 2 hours after that, not 2 hours after the start.
    let last = now + 90 * 60_000;
    let tally = |delivered, human_clicks| crate::domain::experiment::Tally {
        sent: delivered,
        delivered,
        human_clicks,
        human_opens: 0,
        last_sent_ms: Some(last),
    };
    results.0.lock().unwrap().insert(
        "weekly-2026-W47".into(),
        [
            ("a".to_string(), tally(20, 1)),
            ("b".to_string(), tally(20, 15)),
        ]
        .into(),
    );
    let due = (last + 2 * 3_600_000 + 999) / 1000 * 1000;
    let release = Release {
        campaign_id: CampaignId::parse("weekly-2026-W47").unwrap(),
        slot_ms: decide_at,
        from: Default::default(),
        released: 0,
        sweep: false,
        decision_waits_until_ms: None,
    };
    clock
        .0
        .store(decide_at, std::sync::atomic::Ordering::SeqCst);
    let waits = stage.release(release, &plenty()).await.unwrap();
    assert!(waits.early && waits.users_released == 0, "{waits:?}");
    assert_eq!(
        waits.decision_waits_until,
        Some(crate::domain::local_time::rfc3339_ms(due))
    );
    assert!(stage
        .campaigns
        .states()
        .decisions
        .lock()
        .unwrap()
        .is_empty());
    // The release looks again then (at most 15 minutes a hop), reading nothing before.
    let (delay, body) = stage
        .continuation
        .delayed
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(delay, 900);
    let again: ReleaseEvent = serde_json::from_str(&body).unwrap();
    assert_eq!(again.release_waiting.decision_waits_until_ms, Some(due));
    clock.0.store(due - 1, std::sync::atomic::Ordering::SeqCst);
    let early = stage
        .release(again.release_waiting.clone(), &plenty())
        .await
        .unwrap();
    assert!(
        early.early && early.decision_waits_until.is_none(),
        "{early:?}"
    );
    // A resend meanwhile holds the rest for that instant, not the passed one.
    let before = stage.waiting.held.lock().unwrap().len();
    stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "includeFailed": true}),
            &plenty(),
        )
        .await
        .unwrap();
    let slots: BTreeSet<i64> = stage
        .waiting
        .held
        .lock()
        .unwrap()
        .keys()
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(
        slots,
        BTreeSet::from([decide_at, due]),
        "{before} {slots:?}"
    );
    clock.0.store(due, std::sync::atomic::Ordering::SeqCst);
    let summary = stage
        .release(again.release_waiting, &plenty())
        .await
        .unwrap();
    assert_eq!(summary.users_released as usize, held);
    let decision = stage.campaigns.states().decisions.lock().unwrap()["weekly-2026-W47"].clone();
    assert_eq!(
        (decision.winner.as_str(), decision.decided_at_ms),
        ("b", due)
    );
}

#[tokio::test]
async fn without_consent_to_tracking_an_experiment_is_refused_before_anything_is_sent() {
    let stage = stage_with(crowd(), "20", &[("TRACK_OPENS_AND_CLICKS", "false")]);
    let experiment = json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20,
                            "waitHours": 4});
    let err = stage
        .handle(
            json!({"campaignId": "weekly-2026-W47", "experiment": experiment}),
            &plenty(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deploy with TrackOpensAndClicks=true"),
        "{err}"
    );
    assert!(stage.users.bodies().is_empty(), "nothing enqueued");
    assert!(stage.waiting.held.lock().unwrap().is_empty(), "nobody held");
    assert!(stage
        .campaigns
        .states()
        .experiments
        .lock()
        .unwrap()
        .is_empty());
    // Without an experiment the campaign starts as before.
    stage
        .handle(json!({"campaignId": "weekly-2026-W47"}), &plenty())
        .await
        .unwrap();
    assert_eq!(stage.users.bodies().len(), 60);
}
