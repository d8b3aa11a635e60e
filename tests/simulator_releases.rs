//! The simulator's releases as strict as Lambda and Scheduler: a release schedule fires at
//! its instant even while GetUsers is still holding users for its slot; an asynchronous
//! invocation that fails on every attempt is retried twice, then goes to the on-failure
//! destination or is dropped; a record Lambda gave up on is released from the continuation
//! queue, and one that fails there comes back after its backoff; provisioning again keeps
//! the release schedules a campaign waits on.

use super::simulator::ms;
use mailflow::domain::campaign::Campaign;
use mailflow::ports::Clock;
use mailflow_local::fault_switch::{Fault, FaultSwitch};
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions};
use mailflow_tests::{ses, test_env, TestEnv};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A stack whose users all live in Tokyo (09:00 there is 00:00 UTC on the send date), and a
/// pipeline whose functions reach AWS through a fault switch.
async fn tokyo(
    test: &str,
    users: usize,
    adjust: impl FnOnce(&mut TestEnv),
) -> (
    TestEnv,
    FaultSwitch,
    LocalPipeline<mailflow::adapters::ses::SesMailer>,
) {
    let mut env = test_env(test, |_| {}).await.unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    env.seed(users, &campaign).await.unwrap();
    env.db
        .collection::<mongodb::bson::Document>("users")
        .update_many(
            mongodb::bson::doc! {},
            mongodb::bson::doc! {"$set": {"timezone": "Asia/Tokyo"}},
        )
        .await
        .unwrap();
    adjust(&mut env);
    let switch = FaultSwitch::start(&env.endpoint).await.unwrap();
    let options = PipelineOptions {
        aws_endpoint: Some(switch.url()),
        ..Default::default()
    };
    let pipeline = env.pipeline(options, ses).await.unwrap();
    // Six hours before the slot: everyone is held.
    pipeline.clock.set(ms("2026-11-22T18:00:00Z"));
    (env, switch, pipeline)
}

fn local_time_run() -> serde_json::Value {
    json!({"campaignId": "weekly-2026-W47", "localTime": "09:00"})
}

const SLOT: &str = "2026-11-23T00:00:00Z";

#[tokio::test(flavor = "multi_thread")]
async fn a_release_schedule_fires_at_its_instant_while_get_users_is_still_holding_its_users() {
    let (env, switch, pipeline) = tokyo("fires-while-holding", 250, |_| {}).await;
    // Holds are written 25 to a BatchWriteItem; each takes half a second, so holding the
    // slot's users takes seconds, as a long segment does on Lambda; and enqueueing is slow
    // too, so GetUsers is still at work when the slot comes.
    switch.set(
        "dynamodb",
        "BatchWriteItem",
        Fault::Delay(Duration::from_millis(500)),
        None,
    );
    switch.set(
        "sqs",
        "SendMessageBatch",
        Fault::Delay(Duration::from_secs(1)),
        None,
    );
    let pipeline = Arc::new(pipeline);
    pipeline.invoke_async(local_time_run());
    // Time passes while GetUsers holds: once the slot's schedule exists, the clock reaches it.
    let group = env.stack.names[names::RELEASE_SCHEDULE_GROUP].clone();
    let scheduler = mailflow_local::scheduler::LocalScheduler::new(&env.stack.sdk, &group);
    let clock = pipeline.clock.clone();
    let mover = tokio::spawn(async move {
        for _ in 0..600 {
            if let Some(due) = scheduler.schedules().await.unwrap().first() {
                clock.advance_to(due.at_ms);
                return due.at_ms;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("GetUsers made no release schedule within a minute");
    });
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    assert_eq!(mover.await.unwrap(), ms(SLOT));

    // The slot's release, then its sweep a quarter of an hour later.
    let fired = pipeline.releases_fired();
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert!(
        fired[0].get_users_running >= 1,
        "the schedule fired only after GetUsers had finished holding: {fired:?}"
    );
    let stats = pipeline.async_stats();
    assert_eq!((stats.events, stats.succeeded), (3, 3), "{stats:?}");
    // The release found what had been written when it fired; the sweep released the rest:
    // every held user has a send record and nobody is left waiting.
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let report = mailflow::adapters::waiting::read_report(
        &env.dynamo(),
        env.stack.table_name(names::WAITING_TABLE).unwrap(),
        &campaign.id,
    )
    .await
    .unwrap()
    .unwrap();
    let held: u64 = report.counts.waiting.values().sum();
    let slot = &report.slots(ms(SLOT) + 86_400_000)[0];
    assert_eq!(slot.released + slot.swept, held, "{slot:?}");
    assert!(slot.swept > 0, "the release found every hold: {slot:?}");
    assert_eq!(report.still_waiting(), 0);
    // Users GetUsers decided once the clock had reached the slot went at once.
    let c = &report.counts;
    let records = env.records("weekly-2026-W47").await.unwrap();
    assert_eq!(
        records.len() as u64,
        held + c.due_now + c.delayed + c.passed_sent_now,
        "{c:?}"
    );
}

/// The waiting table cannot be read from now on (every Query fails as DynamoDB's 500).
fn waiting_table_unreadable(switch: &FaultSwitch) {
    switch.set("dynamodb", "Query", waiting_table_fault(), None);
}

fn waiting_table_fault() -> Fault {
    Fault::Fail {
        status: 500,
        code: "InternalServerError".into(),
    }
}

/// A release whose every attempt fails, GetUsers' on-failure destination set to
/// `destination` (the template's is the continuation queue, which GetUsers itself drains).
async fn failing_release(
    test: &str,
    destination: Option<&str>,
) -> (TestEnv, mailflow_local::async_invoke::AsyncStats) {
    let (env, switch, pipeline) = tokyo(test, 30, |env| {
        let function = env
            .stack
            .template
            .functions
            .iter_mut()
            .find(|f| f.logical_id == names::GET_USERS)
            .unwrap();
        function.async_invoke.on_failure_queue = destination.map(str::to_owned);
    })
    .await;
    let summary = pipeline.start(local_time_run()).await.unwrap();
    assert_eq!(summary["complete"], true, "{summary}");
    // From now on the waiting table cannot be read: every release attempt fails.
    waiting_table_unreadable(&switch);
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    assert!(!switch.hits().is_empty());
    assert!(env.sent().await.unwrap().is_empty());
    (env, pipeline.async_stats())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_failing_on_every_attempt_is_retried_twice_then_dropped_without_a_destination() {
    let (_env, stats) = failing_release("release-dropped", None).await;
    // The slot's release and its sweep, each tried three times and dropped.
    assert_eq!(stats.events, 2, "{stats:?}");
    assert_eq!((stats.attempts, stats.failed_attempts), (6, 6), "{stats:?}");
    assert_eq!((stats.dropped, stats.to_destination), (2, 0), "{stats:?}");
    // Lambda's spacing: a minute before the first retry, two more before the second.
    let at = &stats.attempts_at_ms;
    assert!(
        at[1] - at[0] >= 60_000 && at[2] - at[1] >= 120_000,
        "{at:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_failing_on_every_attempt_reaches_the_on_failure_destination() {
    let (env, stats) = failing_release("release-destination", Some(names::SCHEDULE_DLQ)).await;
    // The slot's release and its sweep, each tried three times.
    assert_eq!((stats.attempts, stats.failed_attempts), (6, 6), "{stats:?}");
    assert_eq!((stats.dropped, stats.to_destination), (0, 2), "{stats:?}");
    let url = env.stack.queue_url(names::SCHEDULE_DLQ).unwrap();
    let out = env
        .sqs()
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let messages = out.messages();
    assert_eq!(messages.len(), 2);
    let record: serde_json::Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(
        record["requestContext"]["condition"], "RetriesExhausted",
        "{record:#}"
    );
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 3);
    assert_eq!(
        record["requestPayload"]["releaseWaiting"]["campaignId"],
        "weekly-2026-W47"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_lambda_gives_up_on_is_released_from_the_continuation_queue() {
    // The template as it is: GetUsers' failed asynchronous invocations go to the
    // continuation queue (without a destination, Lambda drops the release, and only the
    // slot's sweep could still release its users).
    let (env, switch, pipeline) = tokyo("release-redriven", 30, |_| {}).await;
    let template = &env.stack.template;
    let get_users = template.function(names::GET_USERS).unwrap();
    assert_eq!(
        get_users.async_invoke.on_failure_queue.as_deref(),
        Some(names::CONTINUATION_QUEUE)
    );
    let summary = pipeline.start(local_time_run()).await.unwrap();
    assert_eq!(summary["complete"], true, "{summary}");
    // The waiting table cannot be read until Lambda has given up on the release (its three
    // attempts); it can again by the time Lambda's record reaches the continuation queue.
    let release = pipeline.get_users_async();
    let failed_before = release.stats().failed_attempts;
    switch.set_while(
        "dynamodb",
        "Query",
        waiting_table_fault(),
        Arc::new(move || release.stats().failed_attempts < failed_before + 3),
    );
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    let stats = pipeline.async_stats();
    // The release's three attempts; the sweep's one, which finds nobody left.
    assert_eq!((stats.attempts, stats.failed_attempts), (4, 3), "{stats:?}");
    assert_eq!((stats.dropped, stats.to_destination), (0, 1), "{stats:?}");
    every_held_user_is_released(&env, &summary).await;
}

/// The continuation queue as the template has it (a 90-minute visibility timeout): a record
/// that fails there comes back after its first backoff (30 s) and releases the slot, where it
/// used to stay hidden for the visibility timeout, past this drain's ten minutes.
#[tokio::test(flavor = "multi_thread")]
async fn a_continuation_record_that_fails_comes_back_after_its_backoff() {
    let (env, switch, pipeline) = tokyo("continuation-backoff", 30, |_| {}).await;
    let continuation = env.stack.template.queue(names::CONTINUATION_QUEUE).unwrap();
    assert_eq!(continuation.visibility_timeout, 5400);
    let summary = pipeline.start(local_time_run()).await.unwrap();
    assert_eq!(summary["complete"], true, "{summary}");
    // The release's three attempts and the first try of Lambda's record from the
    // continuation queue fail (the table cannot be read for 10 s of the simulator's clock
    // after Lambda gave up); the second try, after the record's 30 s backoff, reads it.
    let release = pipeline.get_users_async();
    let failed_before = release.stats().failed_attempts;
    let clock = pipeline.clock.clone();
    let gave_up_at: Mutex<Option<i64>> = Mutex::default();
    switch.set_while(
        "dynamodb",
        "Query",
        waiting_table_fault(),
        Arc::new(move || {
            if release.stats().failed_attempts < failed_before + 3 {
                return true;
            }
            let now = clock.now_ms();
            let since = *gave_up_at.lock().unwrap().get_or_insert(now);
            now < since + 10_000
        }),
    );
    let stats = pipeline.drain(Duration::from_secs(600)).await.unwrap();
    let get_users = &stats[names::GET_USERS];
    assert_eq!(get_users.failures_reported, 1, "{get_users:?}");
    let stats = pipeline.async_stats();
    assert_eq!((stats.dropped, stats.to_destination), (0, 1), "{stats:?}");
    every_held_user_is_released(&env, &summary).await;
}

/// Everyone held for the slot was released: each has an email job, none is left waiting or
/// in progress, the sent ones were sent once, and nothing is in the continuation DLQ.
async fn every_held_user_is_released(env: &TestEnv, summary: &serde_json::Value) {
    let held: u64 = mailflow_tests::total(&summary["localTime"]["waiting"]);
    let records = env.records("weekly-2026-W47").await.unwrap();
    assert_eq!(records.len() as u64, held, "{summary} {records:?}");
    use mailflow::domain::ledger::SendStatus;
    let count = |s: SendStatus| records.values().filter(|r| r.status == Some(s)).count();
    // The seed's invalid addresses fail at SES; everyone else is sent, once.
    let (sent, failed) = (count(SendStatus::Sent), count(SendStatus::Failed));
    assert!(sent > failed, "{records:?}");
    assert_eq!((sent + failed) as u64, held, "{records:?}");
    assert_eq!(env.sent().await.unwrap().len(), sent);
    let dlq = env.stack.queue_url(names::CONTINUATION_DLQ).unwrap();
    let depth = mailflow_local::queues::depth(&env.sqs(), dlq)
        .await
        .unwrap();
    assert_eq!(depth, (0, 0), "nothing left in the continuation DLQ");
}

#[tokio::test(flavor = "multi_thread")]
async fn provisioning_again_keeps_the_release_schedules_a_campaign_waits_on() {
    use aws_sdk_scheduler::types::{FlexibleTimeWindow, FlexibleTimeWindowMode, Target};
    let env = test_env("reprovision", |_| {}).await.unwrap();
    let group = env.stack.names[names::RELEASE_SCHEDULE_GROUP].clone();
    let scheduler = aws_sdk_scheduler::Client::new(&env.stack.sdk);
    scheduler
        .create_schedule()
        .name("release-1")
        .group_name(&group)
        .schedule_expression("at(2026-11-23T00:00:00)")
        .flexible_time_window(
            FlexibleTimeWindow::builder()
                .mode(FlexibleTimeWindowMode::Off)
                .build()
                .unwrap(),
        )
        .target(
            Target::builder()
                .arn("arn:aws:lambda:us-east-1:000000000000:function:get-users")
                .role_arn("arn:aws:iam::000000000000:role/scheduler")
                .input(r#"{"releaseWaiting": {"campaignId": "weekly-2026-W47", "slotMs": 0}}"#)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    // As on AWS, a group that exists is not created again (the emulator replaced it with an
    // empty one, and every pending release of a waiting campaign was gone).
    let again = scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .unwrap_err();
    assert!(
        again
            .as_service_error()
            .is_some_and(|e| e.is_conflict_exception()),
        "{again:?}"
    );
    // Every `mailctl --prefix` command provisions the stack again first.
    let options = mailflow_local::provision::StackOptions {
        prefix: env.stack.prefix.clone(),
        parameters: env.stack.parameters.clone(),
        ..Default::default()
    };
    mailflow_local::provision::provision(&env.stack.sdk, env.stack.template.clone(), options)
        .await
        .unwrap();
    let listed = scheduler
        .list_schedules()
        .group_name(&group)
        .send()
        .await
        .unwrap();
    let names: Vec<_> = listed.schedules().iter().filter_map(|s| s.name()).collect();
    assert_eq!(names, ["release-1"]);
}
