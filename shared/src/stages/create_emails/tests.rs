//! CreateEmails over in-memory ports: every skip reason and partial failure.

use super::*;
use crate::config::CreateEmailsConfig;
use crate::domain::campaign::Campaign;
use crate::domain::topics::TopicId;
use crate::ports::memory::directory::{MemoryDirectory, User};
use crate::ports::memory::{MemoryCampaigns, MemoryOutbox, MemoryRecords};
use aws_lambda_events::event::sqs::SqsMessage;

const OID: &str = "oid:65a1f0c2e4b0a1b2c3d4e5f6";

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W47", None).unwrap()
}

/// A directory with one user of every kind; `in_window` is a moment inside the window.
fn directory() -> MemoryDirectory {
    let at = campaign().window.since + time::Duration::hours(1);
    let later = at + time::Duration::hours(1);
    let before = campaign().window.since - time::Duration::hours(1);
    let user = |subscribed, suppressed, email: Option<&str>, invalid| User {
        email: email.map(str::to_owned),
        name: Some("Someone".into()),
        locale: None,
        subscribed,
        suppressed,
        invalid,
        timezone: None,
        topics: Default::default(),
    };
    MemoryDirectory::default()
        .user("alice", User::named("Alice", "alice@example.com"))
        .user(OID, User::named("Olga", "olga@example.com"))
        .user("bob", User::named("Bob", "bob@example.com"))
        .user("nameless", user(true, false, Some("n@example.com"), false))
        .user("quit", user(false, false, Some("q@example.com"), false))
        .user("bounced", user(true, true, Some("b@example.com"), false))
        .user("mute", user(true, false, None, false))
        .user("odd", user(true, false, Some("o@example.com"), true))
        .user("lonely", User::named("Lonely", "l@example.com"))
        // Alice: Bob twice (counted once), a follower with no name, one before the window.
        .follow("bob", "alice", at)
        .follow("bob", "alice", later)
        .follow("ghost", "alice", at)
        .follow("lonely", "alice", before)
        .follow("alice", OID, at)
        .follow("lonely", "lonely", before)
        .follow("bob", "quit", at)
        .follow("bob", "bounced", at)
        .follow("bob", "mute", at)
        .follow("bob", "odd", at)
}

type Stage = CreateEmails<MemoryDirectory, MemoryOutbox, MemoryCampaigns, MemoryRecords>;

fn stage(directory: MemoryDirectory) -> Stage {
    let vars = |k: &str| {
        let v = match k {
            "MONGODB_URI" => "mongodb://127.0.0.1:1",
            "EMAILS_QUEUE_URL" => "http://emails",
            "CAMPAIGNS_TABLE_NAME" => "campaigns",
            "SENDS_TABLE_NAME" => "sends",
            "UNSUBSCRIBE_SECRET" => "a-secret-long-enough-for-the-signer-0123456789",
            "UNSUBSCRIBE_BASE_URL" => "https://example.com/unsubscribe",
            _ => return None,
        };
        Some(v.to_owned())
    };
    let config = CreateEmailsConfig::from_source(&vars).unwrap();
    let signer = Signer::new(
        "a-secret-long-enough-for-the-signer-0123456789",
        &config.unsubscribe.list,
    )
    .unwrap();
    CreateEmails::new(
        directory,
        MemoryOutbox::default(),
        MemoryCampaigns::default(),
        MemoryRecords::default(),
        signer,
        config,
    )
}

fn record(id: &str, body: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{id}"));
    record.body = Some(body.to_owned());
    record
}

fn message(user: &str) -> SqsMessage {
    let message = UserMessage {
        campaign_id: campaign().id,
        user_id: user.to_owned(),
        window: campaign().window,
        topic: campaign().topic,
        include_failed: false,
        include_cancelled: false,
        due: None,
        zone: None,
        variant: None,
        definition: None,
    };
    record(user, &serde_json::to_string(&message).unwrap())
}

fn event(users: &[&str]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = users.iter().map(|u| message(u)).collect();
    event
}

fn failed(response: &SqsBatchResponse) -> Vec<String> {
    let mut ids: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    ids.sort();
    ids
}

fn jobs(stage: &Stage) -> Vec<EmailJob> {
    let mut jobs: Vec<EmailJob> = stage
        .emails
        .bodies()
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect();
    jobs.sort_by(|a, b| a.user_id.cmp(&b.user_id));
    jobs
}

#[tokio::test]
async fn every_user_gets_one_email_or_a_counted_reason_and_bad_records_fail_alone() {
    let stage = stage(directory());
    let mut event = event(&[
        "alice", OID, "quit", "bounced", "mute", "odd", "lonely", "gone",
    ]);
    event.records.push(record("garbage", "not json"));
    event.records.push(record(
        "bad-id",
        &message("alice")
            .body
            .unwrap()
            .replace("alice", "oid:not-hex"),
    ));
    let (response, summary) = stage.handle(event).await;

    assert_eq!(failed(&response), ["m-bad-id", "m-garbage"]);
    assert_eq!(
        (summary.rendered, summary.enqueued, summary.failed),
        (2, 2, 2)
    );
    let skipped: Vec<_> = summary.skipped.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(
        skipped,
        [
            ("invalid_document", 1),
            ("no_address", 1),
            ("no_new_followers", 1),
            ("suppressed", 1),
            ("unsubscribed", 1),
            ("vanished", 1),
        ]
    );
    let jobs = jobs(&stage);
    assert_eq!(jobs.len(), 2);
    let alice = &jobs[0];
    assert_eq!(
        (alice.user_id.as_str(), alice.to.as_str()),
        ("alice", "alice@example.com")
    );
    // Two distinct followers in the window; only the nameable one is named.
    assert_eq!(alice.subject, "You have 2 new followers this week");
    assert!(alice.text.contains("Hi Alice,") && alice.text.contains("  - Bob"));
    assert!(!alice.text.contains("Lonely"), "{}", alice.text);
    let link = alice.unsubscribe_url.as_deref().unwrap();
    assert!(link.starts_with("https://example.com/unsubscribe?token="));
    assert!(alice.text.contains(link) && alice.html.contains("Bob"));
    let olga = &jobs[1];
    assert_eq!(
        (olga.user_id.as_str(), olga.to.as_str()),
        (OID, "olga@example.com")
    );
    assert_eq!(olga.subject, "You have a new follower this week");
}

#[tokio::test]
async fn a_user_the_directory_cannot_read_comes_back_alone() {
    let directory = directory();
    directory.unreachable("alice");
    let stage = stage(directory);
    let (response, summary) = stage.handle(event(&["alice", OID])).await;
    assert_eq!(failed(&response), ["m-alice"]);
    assert_eq!((summary.enqueued, summary.failed), (1, 1));
    assert_eq!(jobs(&stage)[0].user_id, OID);
}

#[tokio::test]
async fn jobs_the_queue_refuses_come_back_and_only_enqueued_ones_count() {
    let stage = stage(directory());
    stage.emails.refuse("olga@example.com");
    let (response, summary) = stage.handle(event(&["alice", OID, "quit"])).await;
    assert_eq!(failed(&response), [format!("m-{OID}")]);
    assert_eq!(
        (summary.rendered, summary.enqueued, summary.failed),
        (2, 1, 1)
    );
    assert_eq!(summary.skipped.get("unsubscribed"), Some(&1));

    // The queue down: every rendered record comes back, skipped ones are acknowledged.
    let stage = self::stage(directory());
    stage
        .emails
        .closed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (response, summary) = stage.handle(event(&["alice", OID, "quit"])).await;
    assert_eq!(
        failed(&response),
        ["m-alice".to_owned(), format!("m-{OID}")]
    );
    assert_eq!((summary.enqueued, summary.failed), (0, 2));
}

#[tokio::test]
async fn a_cancelled_campaign_makes_no_more_emails() {
    let stage = stage(directory());
    stage.campaigns.states.cancel(campaign().id.as_str());
    let (response, summary) = stage.handle(event(&["alice", OID])).await;
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    assert_eq!(summary.skipped.get("campaign_cancelled"), Some(&2));
    assert!(jobs(&stage).is_empty());
}

#[tokio::test]
async fn a_paused_campaign_hands_its_records_back_unrendered() {
    let stage = stage(directory());
    stage.campaigns.states.pause(campaign().id.as_str());
    let (response, summary) = stage.handle(event(&["alice", OID])).await;
    assert_eq!(
        failed(&response),
        ["m-alice".to_owned(), format!("m-{OID}")]
    );
    assert_eq!((summary.failed, summary.held), (0, 2));
    assert!(jobs(&stage).is_empty());
}

#[tokio::test]
async fn control_characters_in_names_never_stop_an_email() {
    let at = campaign().window.since + time::Duration::hours(1);
    let directory = MemoryDirectory::default()
        .user("nul", User::named("Ada\0 Nul\u{1b}[31m", "nul@example.com"))
        .user("f1", User::named("Line\nBreak", "f1@example.com"))
        .user("f2", User::named("\0\u{7}", "f2@example.com"))
        .follow("f1", "nul", at)
        .follow("f2", "nul", at + time::Duration::hours(1));
    let stage = stage(directory);
    let (response, summary) = stage.handle(event(&["nul"])).await;
    assert!(response.batch_item_failures.is_empty(), "decided at once");
    assert_eq!((summary.rendered, summary.enqueued), (1, 1), "{summary:?}");
    let job = &jobs(&stage)[0];
    assert!(!job.html.contains('\0') && !job.text.contains('\0'));
    // The recipient's name without its control characters; a follower with nothing printable
    // in their name is counted but not named.
    assert!(job.text.contains("Hi Ada Nul[31m,"), "{}", job.text);
    assert!(job.text.contains("  - Line Break"), "{}", job.text);
    assert_eq!(job.subject, "You have 2 new followers this week");
}

#[tokio::test]
async fn the_topic_decides_again_and_names_itself_in_the_footer_and_the_token() {
    let mut leaver = User::named("Leaver", "leaver@example.com");
    leaver
        .topics
        .insert(TopicId::parse("digest").unwrap(), false);
    let at = campaign().window.since + time::Duration::hours(1);
    let directory = || {
        directory()
            .user("leaver", leaver.clone())
            .follow("bob", "leaver", at)
    };
    // The digest: the leaver chose since GetUsers read them, and is skipped.
    let stage = stage(directory());
    let (_, summary) = stage.handle(event(&["leaver", "alice"])).await;
    assert_eq!(summary.skipped.get("left_topic"), Some(&1));
    assert_eq!(jobs(&stage).len(), 1);
    // Product news still reaches them, and its footer and token name product news.
    let stage = self::stage(directory());
    let news = |user: &str| {
        let body = message(user)
            .body
            .unwrap()
            .replace("\"digest\"", "\"product-news\"");
        record(user, &body)
    };
    let mut event = SqsEvent::default();
    event.records = vec![news("leaver")];
    let (response, summary) = stage.handle(event).await;
    assert_eq!((failed(&response).len(), summary.enqueued), (0, 1));
    let job = &jobs(&stage)[0];
    assert!(
        job.text.contains("Unsubscribe from “Product news”:"),
        "{}",
        job.text
    );
    let token = job
        .unsubscribe_url
        .as_deref()
        .unwrap()
        .split_once("token=")
        .unwrap()
        .1;
    let signer = Signer::new(
        "a-secret-long-enough-for-the-signer-0123456789",
        "weekly-digest",
    )
    .unwrap();
    assert_eq!(signer.verify(token).unwrap().topic.as_str(), "product-news");
    // A topic this build does not declare: decided at once, never retried.
    let stage = self::stage(directory());
    let mut event = SqsEvent::default();
    let body = message("alice")
        .body
        .unwrap()
        .replace("\"digest\"", "\"retired-topic\"");
    event.records = vec![record("alice", &body)];
    let (response, summary) = stage.handle(event).await;
    assert!(failed(&response).is_empty());
    assert_eq!(summary.skipped.get("unknown_topic"), Some(&1));
}

/// A one-click MongoDB did not take: recorded in the sends table by Unsubscribe.
async fn left_by_one_click(stage: &Stage, user: &str, at_ms: u64) {
    let key = crate::domain::ledger::SendKey::new(user, campaign().id);
    stage
        .pending
        .record_leave(&key, &campaign().topic, at_ms)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_one_click_mongodb_did_not_take_keeps_the_user_out_of_the_topics_campaigns() {
    // MongoDB still says Alice and Olga receive the topic.
    let stage = stage(directory());
    left_by_one_click(&stage, "alice", 1_000).await;
    left_by_one_click(&stage, OID, 1_000).await;
    let (response, summary) = stage.handle(event(&["alice", OID, "bob"])).await;
    assert!(failed(&response).is_empty());
    assert_eq!(summary.enqueued, 0);
    assert_eq!(summary.skipped.get("left_topic"), Some(&2), "{summary:?}");
    assert!(jobs(&stage).is_empty());

    // Chosen again on the page after the one-click: the leave no longer stands.
    stage
        .pending
        .rejoined(OID, &campaign().topic, 2_000)
        .await
        .unwrap();
    let (_, summary) = stage.handle(event(&["alice", OID])).await;
    assert_eq!(summary.enqueued, 1);
    assert_eq!(jobs(&stage)[0].user_id, OID);
}

#[tokio::test]
async fn pending_leaves_that_cannot_be_read_hold_the_records_back() {
    let stage = stage(directory());
    left_by_one_click(&stage, "alice", 1_000).await;
    stage
        .pending
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (response, summary) = stage.handle(event(&["alice", OID])).await;
    // Nobody is emailed on a guess: both come back.
    assert_eq!(failed(&response), ["m-alice", &format!("m-{OID}")]);
    assert_eq!(summary.enqueued, 0);
    stage
        .pending
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (response, summary) = stage.handle(event(&["alice", OID])).await;
    assert!(failed(&response).is_empty());
    assert_eq!(
        (summary.enqueued, summary.skipped.get("left_topic")),
        (1, Some(&1))
    );
}

fn in_variant(user: &str, variant: &str) -> SqsMessage {
    let mut body: serde_json::Value =
        serde_json::from_str(message(user).body.as_deref().unwrap()).unwrap();
    body["variant"] = variant.into();
    record(user, &body.to_string())
}

#[tokio::test]
async fn each_user_gets_their_variants_subject_and_body_and_an_unknown_variant_is_decided_at_once()
{
    let stage = stage(directory());
    let batch = |records: Vec<SqsMessage>| {
        let mut event = SqsEvent::default();
        event.records = records;
        event
    };
    // Not recorded yet (a state read from before GetUsers registered it): it comes back.
    let (response, _) = stage.handle(batch(vec![in_variant("alice", "b")])).await;
    assert_eq!(failed(&response), ["m-alice"]);
    let experiment = crate::domain::experiment::Experiment::parse(
        &serde_json::json!({"variants": [{"name": "a"},
            {"name": "b", "template": "short",
             "subject": {"en": "[b] {{ data.followers.count }}", "fr": "[b]", "de": "[b]"}}],
            "testPercent": 50, "waitHours": 1})
        .to_string(),
    )
    .unwrap();
    let stage = self::stage(directory());
    stage
        .campaigns
        .states
        .experiments
        .lock()
        .unwrap()
        .insert(campaign().id.to_string(), experiment);
    let records = vec![
        in_variant("alice", "b"),
        in_variant(OID, "a"),
        in_variant("bob", "z"),
    ];
    let (response, summary) = stage.handle(batch(records)).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(summary.skipped.get("unknown_variant"), Some(&1));
    let jobs = jobs(&stage);
    let alice = jobs.iter().find(|j| j.user_id == "alice").unwrap();
    assert_eq!(alice.subject, "[b] 2");
    assert_eq!(alice.variant.as_deref(), Some("b"));
    // The short body: the count without the names.
    assert!(alice.html.contains("Your week in one line") && !alice.text.contains("- Bob"));
    let olga = jobs.iter().find(|j| j.user_id == OID).unwrap();
    assert_eq!(olga.variant.as_deref(), Some("a"));
    assert!(!olga.subject.starts_with("[b]"), "{}", olga.subject);
}
