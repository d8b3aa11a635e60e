//! Steering a live campaign against the local stack: a cancellation part-way stops the sends,
//! and every user of the audience ends in a state that can be counted.

use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::campaign::{Campaign, Cancellation};
use mailflow::ledger::{epoch_ms, SendStatus};
use mailflow::stages::CAMPAIGN_STATE_TTL;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use std::time::{Duration, SystemTime};

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_cancelled_part_way_sends_nothing_more_and_every_user_ends_counted() {
    let env = test_env("cancel", |_| {}).await.unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let id = campaign.id.as_str();
    let seeded = env.seed(300, &campaign).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let table = CampaignsTable::new(
        env.dynamo(),
        env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap(),
    );

    let run = pipeline.run(
        serde_json::json!({ "campaignId": id }),
        Duration::from_secs(900),
    );
    let cancel = async {
        // Once some emails are out, the operator cancels.
        let started = std::time::Instant::now();
        loop {
            let records = env.records(id).await.unwrap();
            let sent = records
                .values()
                .filter(|r| r.status == Some(SendStatus::Sent))
                .count();
            if sent >= 10 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(300), "nothing sent");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let cancellation = Cancellation {
            at_ms: epoch_ms(SystemTime::now()),
            by: "test".into(),
            reason: "stopped part-way".into(),
        };
        assert_eq!(table.cancel(id, &cancellation).await.unwrap(), None);
        cancellation
    };
    let (report, cancellation) = tokio::join!(run, cancel);
    let report = report.unwrap();

    // Every audience user is SENT, FAILED (an invalid address), CANCELLED, or has no record
    // because CreateEmails skipped them; none is left in progress or dead-lettered.
    let records = env.records(id).await.unwrap();
    let count = |s: SendStatus| records.values().filter(|r| r.status == Some(s)).count();
    let (sent, failed, cancelled) = (
        count(SendStatus::Sent),
        count(SendStatus::Failed),
        count(SendStatus::Cancelled),
    );
    assert_eq!(sent + failed + cancelled, records.len(), "{records:?}");
    for user in records.keys() {
        assert!(
            seeded.audience.contains_key(user),
            "{user} is not in the audience"
        );
    }
    let skipped_for_cancel = report
        .totals
        .create_emails
        .skipped
        .get("campaign_cancelled")
        .copied()
        .unwrap_or(0);
    eprintln!(
        "audience {}: sent {sent}, failed {failed}, cancelled {cancelled}, skipped for the cancellation {skipped_for_cancel}",
        seeded.audience.len()
    );
    assert!(
        cancelled + skipped_for_cancel > 0,
        "the cancellation stopped nothing: {report:?}"
    );
    assert!(sent < seeded.deliverable().count(), "everyone was sent to");

    // Nothing more after the cancellation: no email SENT later than the state's cache and
    // the batch already sending allow.
    let bound = cancellation.at_ms + CAMPAIGN_STATE_TTL.as_millis() as u64 + 5_000;
    let late: Vec<_> = records
        .values()
        .filter(|r| r.status == Some(SendStatus::Sent))
        .filter(|r| r.completed_at_ms.unwrap_or(0) > bound)
        .collect();
    assert!(late.is_empty(), "sent after the cancellation: {late:?}");
    // Every email SES took has its SENT record, and only those.
    let emails: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(emails, sent);

    // The messages were acknowledged, not left to the DLQs.
    for queue in [
        names::USERS_QUEUE,
        names::EMAILS_QUEUE,
        names::USERS_DLQ,
        names::EMAILS_DLQ,
    ] {
        assert_eq!(env.depth(queue).await.unwrap(), 0, "{queue}");
    }

    // A second cancellation changes nothing and says who cancelled first.
    let again = Cancellation {
        at_ms: epoch_ms(SystemTime::now()),
        by: "someone else".into(),
        reason: "again".into(),
    };
    let earlier = table.cancel(id, &again).await.unwrap().unwrap();
    assert_eq!(earlier.by, "test");
}
