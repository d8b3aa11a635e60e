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
        definition: None,
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
        definition: None,
    };
    let records = json!({"Records": [
        {"messageId": "bad", "body": "{\"campaignId\": 7}"},
        {"messageId": "bad-after", "body": serde_json::to_string(&Checkpoint { after: Some("oid:zz".into()), ..good.clone() }).unwrap()},
        {"messageId": "good", "body": serde_json::to_string(&good).unwrap()},
    ]});
    let failed = failed_records(&stage, records).await;
    // A checkpoint GetUsers refuses would be refused the same way again: dropped, said once.
    assert_eq!(failed, ["bad"]);
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

mod experiments;
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
    let segments: Vec<_> = recorded.iter().collect();
    assert_eq!(segments.len(), 1, "{recorded:?}");
    assert_eq!(
        (&segments[0].0 .0[..], segments[0].0 .2),
        ("weekly-2026-W47", 0)
    );
    assert_eq!(segments[0].1, &excluded);
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
async fn a_campaign_keeps_the_definition_version_its_first_run_pinned() {
    use crate::domain::definition::pin::{PinError, PinnedDefinition};
    use crate::ports::definitions::Push;
    use crate::ports::memory::MemoryDefinitions;
    use crate::ports::{DefinitionCache, DefinitionStore};
    // Three versions of the digest pushed (their descriptions differ).
    let store = MemoryDefinitions::default();
    for n in 1..=3 {
        let mut files = crate::domain::definition::example("digest");
        let toml = files.get_mut("campaign.toml").unwrap();
        *toml = toml.replacen("description = \"", &format!("description = \"v{n} "), 1);
        let push = Push {
            name: "digest",
            files: &files,
            schedule: None,
            at_ms: 0,
            by: None,
        };
        store.push(push).await.unwrap();
    }
    let announcement = crate::domain::definition::example("announcement");
    let push = Push {
        name: "announcement",
        files: &announcement,
        schedule: None,
        at_ms: 0,
        by: None,
    };
    store.push(push).await.unwrap();
    let stage = stage("20").with_definitions(Arc::new(DefinitionCache::new(store)));
    let start = |version: Option<u32>, repin: bool| {
        let mut event = json!({"campaignId": "digest-2026-W47", "definition": "digest"});
        if let Some(v) = version {
            event["definitionVersion"] = v.into();
        }
        if repin {
            event["repin"] = true.into();
        }
        event
    };
    let pinned = || {
        stage
            .campaigns
            .states()
            .definitions
            .lock()
            .unwrap()
            .get("digest-2026-W47")
            .cloned()
    };
    let pin = |version| PinnedDefinition {
        name: "digest".into(),
        version,
    };
    // A settled start runs the digest's audience from the in-memory directory.
    let ran = |result: Result<Response, GetUsersError>| match result {
        Ok(Response::Run(summary)) => assert!(summary.complete),
        other => panic!("{other:?}"),
    };
    // A first start naming no version pins the latest.
    ran(stage.handle(start(None, false), &plenty()).await);
    assert_eq!(pinned(), Some(pin(3)));
    // A re-run naming nothing, or the same version, keeps it.
    ran(stage.handle(start(None, false), &plenty()).await);
    ran(stage.handle(start(Some(3), false), &plenty()).await);
    // Another version is refused before anything is enqueued, unless asked with repin; the
    // record keeps 3 either way.
    let before = enqueued(&stage).len();
    let err = stage
        .handle(start(Some(2), false), &plenty())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GetUsersError::Definition(PinError::OtherVersion {
                recorded: 3,
                asked: 2,
                ..
            })
        ),
        "{err}"
    );
    assert!(err.repeats());
    assert_eq!(enqueued(&stage).len(), before);
    ran(stage.handle(start(Some(2), true), &plenty()).await);
    assert_eq!(pinned(), Some(pin(3)));
    // A version never pushed, or a definition never pushed, is refused with what to do.
    let err = stage
        .handle(start(Some(9), true), &plenty())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("has no version 9 (its latest is 3)"),
        "{err}"
    );
    assert!(err.repeats());
    let err = stage
        .handle(json!({"campaignId": "promo-1", "since": "2026-11-16T00:00:00Z", "until": "2026-11-23T00:00:00Z", "definition": "promo"}), &plenty())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("mailctl campaign push"), "{err}");
    // Named by the definition alone: the campaign of its window rule at the firing's time.
    ran(stage
        .handle(
            json!({"definition": "digest", "at": "2026-11-30T09:00:00Z"}),
            &plenty(),
        )
        .await);
    assert!(stage
        .campaigns
        .states()
        .definitions
        .lock()
        .unwrap()
        .contains_key("digest-2026-W48"));
    for at in [json!("Monday"), json!(1764493200)] {
        let err = stage
            .handle(json!({"definition": "digest", "at": at}), &plenty())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("is not an RFC 3339 time"), "{err}");
        assert!(err.repeats());
    }
    // A definition's campaigns are its own: another's id, or one started without a
    // definition, is refused with what to do.
    let other = json!({"campaignId": "digest-2026-W47", "definition": "announcement"});
    let err = stage.handle(other, &plenty()).await.unwrap_err();
    assert!(
        err.to_string().contains("ids start with \"announcement-\""),
        "{err}"
    );
    assert!(err.repeats());
    stage
        .handle(json!({"campaignId": "weekly-2026-W47"}), &plenty())
        .await
        .unwrap();
    let takeover = json!({"campaignId": "digest-w", "since": "2026-11-16T00:00:00Z", "until": "2026-11-23T00:00:00Z"});
    stage.handle(takeover, &plenty()).await.unwrap();
    let err = stage
        .handle(
            json!({"campaignId": "digest-w", "definition": "digest"}),
            &plenty(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("was started without a definition"),
        "{err}"
    );
    // A version alone names nothing.
    let err = parse(json!({"campaignId": "weekly-2026-W47", "definitionVersion": 2}))
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("definitionVersion goes with definition"),
        "{err}"
    );
}
