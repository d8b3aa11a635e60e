//! GetUsers' checkpoints against the local stack: a run cut off by its time budget
//! continues from where it stopped, with string and ObjectId ids, losing and repeating no one.

use mailflow::domain::campaign::Campaign;
use mailflow::runtime::Invocation;
use mailflow::stages::get_users::{Checkpoint, Run};
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use mongodb::bson::{doc, Document};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W46", None).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn get_users_continues_from_checkpoints_without_losing_or_repeating_users() {
    let env = test_env("checkpoint", |_| {}).await.unwrap();
    let seeded = env.seed(200, &campaign()).await.unwrap();
    let options = PipelineOptions {
        env: BTreeMap::from([(
            mailflow_local::pipeline::GET_USERS,
            // One batch in flight at a time, so that the audience's batches take several short deadlines
            // even when the local SQS answers in milliseconds.
            BTreeMap::from([
                ("DEADLINE_MARGIN_SECONDS".to_string(), "0".to_string()),
                ("ENQUEUE_CONCURRENCY".to_string(), "1".to_string()),
            ]),
        )]),
        ..Default::default()
    };
    let pipeline = env.pipeline(options, ses).await.unwrap();
    let sqs = env.sqs();
    let continuation = env
        .stack
        .queue_url(names::CONTINUATION_QUEUE)
        .unwrap()
        .to_owned();

    // Each invocation gets a deadline so short that it must stop and leave a checkpoint.
    let short = || Invocation::with_timeout("short", Duration::from_millis(80));
    let mut run = Run {
        campaign: campaign(),
        topic_named: false,
        include_failed: false,
        include_cancelled: false,
        after: None,
        segment: 0,
        delivery: None,
        guardrails: Default::default(),
        started_at_ms: 0,
        experiment: None,
        definition: None,
        repin: false,
        pinned: None,
    };
    let mut segments = 0;
    loop {
        let summary = pipeline.get_users.run(run.clone(), &short()).await.unwrap();
        segments += 1;
        if summary.complete {
            break;
        }
        assert!(segments < 500, "no progress");
        let out = sqs
            .receive_message()
            .queue_url(&continuation)
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        let message = out
            .messages
            .unwrap_or_default()
            .pop()
            .expect("a checkpoint on the continuation queue");
        let checkpoint: Checkpoint = serde_json::from_str(message.body().unwrap()).unwrap();
        assert_eq!(checkpoint.after, summary.continued_after);
        sqs.delete_message()
            .queue_url(&continuation)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
        run = checkpoint.into();
    }
    assert!(
        segments > 2,
        "the audience should have needed several invocations, took {segments}"
    );

    let users = env.stack.queue_url(names::USERS_QUEUE).unwrap().to_owned();
    let mut enqueued = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&users)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        let mut deletes = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap()).unwrap();
            enqueued.push(body["userId"].as_str().unwrap().to_owned());
            deletes.push(
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap())
                    .build()
                    .unwrap(),
            );
        }
        sqs.delete_message_batch()
            .queue_url(&users)
            .set_entries(Some(deletes))
            .send()
            .await
            .unwrap();
    }
    let distinct: BTreeSet<String> = enqueued.iter().cloned().collect();
    assert_eq!(
        distinct.len(),
        enqueued.len(),
        "a user was enqueued twice across checkpoints"
    );
    assert_eq!(distinct, seeded.audience.keys().cloned().collect());

    // The exclusions the segments recorded add up to what one invocation counts: a segment
    // that read the audience ahead of its checkpoint counted none of what it did not take.
    let whole = Run {
        campaign: Campaign::from_id("again-2026-W46", Some(campaign().window)).unwrap(),
        topic_named: false,
        include_failed: false,
        include_cancelled: false,
        after: None,
        segment: 0,
        delivery: None,
        guardrails: Default::default(),
        started_at_ms: 0,
        experiment: None,
        definition: None,
        repin: false,
        pinned: None,
    };
    let at_once = Invocation::with_timeout("whole", Duration::from_secs(120));
    assert!(
        pipeline
            .get_users
            .run(whole, &at_once)
            .await
            .unwrap()
            .complete
    );
    let campaigns = mailflow::adapters::campaigns::CampaignsTable::new(
        env.dynamo(),
        env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap(),
    );
    let mut excluded = Vec::new();
    for id in ["weekly-2026-W46", "again-2026-W46"] {
        excluded.push(campaigns.record(id).await.unwrap().unwrap().excluded);
    }
    assert!(excluded[0].unsubscribed > 0, "{excluded:?}");
    assert_eq!(excluded[0], excluded[1], "segmented, then at once");
}

#[tokio::test(flavor = "multi_thread")]
async fn get_users_resumes_after_a_string_or_an_object_id_checkpoint() {
    let env = test_env("mixed-ids", |_| {}).await.unwrap();
    let window = campaign().window;
    let at = mongodb::bson::DateTime::from_millis(
        (window.since.unix_timestamp_nanos() / 1_000_000) as i64 + 1000,
    );
    let oid = |n: u8| mongodb::bson::oid::ObjectId::from_bytes([n; 12]);
    let ids: [mongodb::bson::Bson; 4] = ["a".into(), "b".into(), oid(1).into(), oid(2).into()];
    let users: Vec<Document> = ids
        .iter()
        .map(|id| doc! { "_id": id.clone(), "subscribed": true, "email": "x@example.com" })
        .collect();
    let follows: Vec<Document> = ids
        .iter()
        .map(|id| doc! { "followerId": "f", "followeeId": id.clone(), "createdAt": at })
        .collect();
    env.db.collection("users").insert_many(users).await.unwrap();
    env.db
        .collection("follows")
        .insert_many(follows)
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let first = format!("oid:{}", "01".repeat(12));
    for (after, expected) in [
        (None, 4),
        (Some("a"), 3),
        (Some("b"), 2),
        (Some(first.as_str()), 1),
    ] {
        let run = Run {
            campaign: campaign(),
            topic_named: false,
            include_failed: false,
            include_cancelled: false,
            after: after.map(str::to_owned),
            segment: 1,
            delivery: None,
            guardrails: Default::default(),
            started_at_ms: 0,
            experiment: None,
            definition: None,
            repin: false,
            pinned: None,
        };
        let invocation = Invocation::with_timeout("mixed", Duration::from_secs(60));
        let summary = pipeline.get_users.run(run, &invocation).await.unwrap();
        assert_eq!(summary.users_enqueued, expected, "after {after:?}");
    }
}
