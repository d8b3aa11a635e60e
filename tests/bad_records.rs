//! The named bad inputs through the real handlers on the local stack, each with the outcome
//! the "Bad input" table of docs/reliability.md documents: failed alone with a logged reason (SQS retries
//! it, then the DLQ keeps it), skipped and acknowledged, or FAILED in the ledger; the rest of
//! the batch untouched.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::ledger::SendStatus;
use mailflow::runtime::Invocation;
use mailflow_local::ledger_scan;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use mongodb::bson::{doc, DateTime};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const W46: &str = "weekly-2026-W46";
const ONE_MIB: usize = 1 << 20;

fn record(id: &str, body: &str) -> SqsMessage {
    let mut r = SqsMessage::default();
    r.message_id = Some(id.into());
    r.body = Some(body.into());
    r
}

/// The document's text with every tag (and the attribute values inside them) left out.
fn text_outside_tags(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

fn failed_ids(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> BTreeSet<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn create_emails_fails_each_bad_record_alone_and_escapes_names() {
    let env = test_env("bad-users", |_| {}).await.unwrap();
    let window = Campaign::from_id(W46, None).unwrap().window;
    let in_window = DateTime::from_system_time(
        std::time::SystemTime::from(window.since) + Duration::from_secs(3600),
    );
    let users = env.db.collection::<mongodb::bson::Document>("users");
    users
        .insert_many([
            doc! {"_id": "target", "email": format!("target@{}", env.domain), "name": "Target", "subscribed": true, "locale": "en"},
            doc! {"_id": "f-script", "email": "x@example.com", "name": "<script>alert(1)</script>", "subscribed": true, "locale": "en"},
            doc! {"_id": "f-template", "email": "y@example.com", "name": "{{ 7 * 7 }} {% raw %}", "subscribed": true, "locale": "en"},
        ])
        .await
        .unwrap();
    env.db
        .collection::<mongodb::bson::Document>("follows")
        .insert_many([
            doc! {"followerId": "f-script", "followeeId": "target", "createdAt": in_window},
            doc! {"followerId": "f-template", "followeeId": "target", "createdAt": in_window},
        ])
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();

    let message = |user: &Value| json!({"campaignId": W46, "userId": user, "since": "2026-11-09T00:00:00Z", "until": "2026-11-16T00:00:00Z"});
    let good = message(&json!("target")).to_string();
    let mut extra_field = message(&json!("target"));
    extra_field["note"] = json!("x".repeat(ONE_MIB - 200));
    let mut missing = message(&json!("target"));
    missing.as_object_mut().unwrap().remove("userId");
    let cases = [
        (
            "malformed-json",
            r#"{"campaignId": "weekly-2026-W46","#.to_string(),
        ),
        ("missing-field", missing.to_string()),
        ("wrong-type", message(&json!(42)).to_string()),
        (
            "one-mib-user-id",
            message(&json!("u".repeat(ONE_MIB - 200))).to_string(),
        ),
        (
            "invalid-campaign-id",
            good.replace(W46, "no spaces allowed"),
        ),
        ("inverted-window", good.replace("2026-11-09", "2026-11-30")),
        ("nonexistent-user", message(&json!("nobody")).to_string()),
        // Still processed: users-queue messages ignore fields they do not know.
        ("one-mib-extra-field", extra_field.to_string()),
        // A campaign id nobody scheduled is still a campaign: its message carries the window.
        ("unknown-campaign", good.replace(W46, "never-scheduled")),
        ("good", good.clone()),
        ("same-body-again", good.clone()),
    ];
    let mut event = SqsEvent::default();
    event.records = cases.iter().map(|(id, body)| record(id, body)).collect();
    // The same message id twice in one batch.
    event.records.push(record("good", &good));
    let (response, summary) = pipeline.create_emails.handle(event).await;

    assert_eq!(
        failed_ids(&response),
        BTreeSet::from(
            [
                "malformed-json",
                "missing-field",
                "wrong-type",
                "one-mib-user-id",
                "invalid-campaign-id",
                "inverted-window",
            ]
            .map(String::from)
        )
    );
    assert_eq!(summary.skipped.get("vanished"), Some(&1));
    assert_eq!(summary.enqueued, 5, "{summary:?}");
    assert_eq!(env.depth(names::EMAILS_QUEUE).await.unwrap(), 5);

    // The followers' names are text in the email, never markup or template code.
    let sqs = env.sqs();
    let out = sqs
        .receive_message()
        .queue_url(env.stack.queue_url(names::EMAILS_QUEUE).unwrap())
        .max_number_of_messages(1)
        .send()
        .await
        .unwrap();
    let job: mailflow::domain::messages::EmailJob =
        mailflow::domain::messages::parse_body(out.messages()[0].body()).unwrap();
    let html = job.html.as_str();
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("{{ 7 * 7 }} {% raw %}"), "{html}");
    // Evaluated, the name would read "49"; links carry random tokens, so look at text only.
    assert!(!text_outside_tags(html).contains("49"), "{html}");
    assert!(job.text.contains("<script>alert(1)</script>"));
}

#[tokio::test(flavor = "multi_thread")]
async fn send_email_fails_each_bad_job_alone_and_records_invalid_addresses() {
    let env = test_env("bad-jobs", |_| {}).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let job = |user: &str, to: &str| {
        json!({"campaignId": W46, "userId": user, "to": to,
               "subject": "Hi {{ name }} <b>", "html": "<p>hello</p>", "text": "hello"})
    };
    let address = |user: &str| format!("{user}@{}", env.domain);
    let mut extra = job("extra", &address("extra"));
    extra["bcc"] = json!("someone@example.com");
    let mut missing_to = job("no-to", &address("no-to"));
    missing_to.as_object_mut().unwrap().remove("to");
    let mut wrong_type = job("typed", &address("typed"));
    wrong_type["subject"] = json!(["not", "a", "string"]);
    let cases = [
        ("malformed-json", "{\"campaignId\":".to_string()),
        ("missing-to", missing_to.to_string()),
        ("extra-field", extra.to_string()),
        ("wrong-type", wrong_type.to_string()),
        (
            "one-mib-user-id",
            job(&"u".repeat(ONE_MIB - 300), "a@example.com").to_string(),
        ),
        (
            "invalid-address",
            job("bad-address", "not-an-address").to_string(),
        ),
        ("good", job("good", &address("good")).to_string()),
        ("good-copy", job("good", &address("good")).to_string()),
    ];
    let mut event = SqsEvent::default();
    event.records = cases.iter().map(|(id, body)| record(id, body)).collect();
    let invocation = Invocation::with_timeout("bad-jobs", Duration::from_secs(30));
    let (response, summary) = pipeline.send_email[0].handle(event, &invocation).await;

    let mut failed = failed_ids(&response);
    // Two copies of one job in one batch: one sends; the other met its live lease (returned,
    // to be suppressed later) or its SENT record (acknowledged).
    let copies_returned =
        usize::from(failed.remove("good")) + usize::from(failed.remove("good-copy"));
    assert!(copies_returned <= 1);
    assert_eq!(
        failed,
        BTreeSet::from(
            [
                "malformed-json",
                "missing-to",
                "extra-field",
                "wrong-type",
                "one-mib-user-id"
            ]
            .map(String::from)
        )
    );
    assert_eq!((summary.sent, summary.failed), (1, 1), "{summary:?}");

    let sent = env.sent().await.unwrap();
    assert_eq!(sent.get(&address("good")).map(Vec::len), Some(1));
    assert_eq!(sent.values().map(Vec::len).sum::<usize>(), 1, "{sent:?}");
    assert_eq!(
        sent[&address("good")][0].subject.as_deref(),
        Some("Hi {{ name }} <b>"),
        "the subject goes out as given, never evaluated"
    );
    let records = ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        W46,
    )
    .await
    .unwrap();
    let status = |user: &str| {
        records
            .iter()
            .find(|r| r.user_id == user)
            .map(|r| (r.status, r.last_error.clone()))
    };
    assert_eq!(status("good").unwrap().0, Some(SendStatus::Sent));
    let (bad_status, reason) = status("bad-address").unwrap();
    assert_eq!(bad_status, Some(SendStatus::Failed));
    assert!(!reason.unwrap_or_default().is_empty());
    assert_eq!(records.len(), 2, "no record for a job that failed to parse");
}
