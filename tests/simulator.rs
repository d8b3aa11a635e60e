//! The simulator as strict as Lambda where the difference changes an outcome: a failed
//! invocation's batch comes back whole; a release schedule fires at its instant even while
//! GetUsers is still holding users for its slot; an asynchronous invocation that fails on
//! every attempt is retried twice, then goes to the on-failure destination or is dropped.
//! The fault switch (a proxy in front of the AWS emulator) makes the chosen calls fail or
//! slow down. A Function URL's function is throttled (429) beyond its reserved concurrency.
//! docs/local-stack.md keeps the table of what matches Lambda and what does not.

use aws_lambda_events::event::sqs::SqsBatchResponse;
use mailflow::domain::campaign::Campaign;
use mailflow::ports::Clock;
use mailflow_local::fault_switch::{Fault, FaultSwitch};
use mailflow_local::names;
use mailflow_local::pipeline::{consumer, LocalPipeline, PipelineOptions, SEND_EMAIL};
use mailflow_local::runner;
use mailflow_tests::{ses, test_env, TestEnv};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

/// Three jobs on the emails queue (2 s visibility) through one poller whose invocation
/// number `n` ends as `outcome(n)` (0 is the first); the message ids each invocation got.
async fn invocations(
    test: &str,
    outcome: impl Fn(usize) -> runner::Outcome + Send + Sync + 'static,
) -> (runner::ConsumerStats, Vec<Vec<String>>) {
    let env = test_env(test, |o| {
        o.visibility_timeouts.insert(names::EMAILS_QUEUE.into(), 2);
    })
    .await
    .unwrap();
    let url = env.stack.queue_url(names::EMAILS_QUEUE).unwrap().to_owned();
    for i in 0..3 {
        env.sqs()
            .send_message()
            .queue_url(&url)
            .message_body(format!("job {i}"))
            .send()
            .await
            .unwrap();
    }
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let outcome = Arc::new(outcome);
    let handler = {
        let seen = seen.clone();
        runner::handler(move |event: aws_lambda_events::event::sqs::SqsEvent, _| {
            let (seen, outcome) = (seen.clone(), outcome.clone());
            async move {
                let ids: Vec<String> = event
                    .records
                    .iter()
                    .filter_map(|r| r.message_id.clone())
                    .collect();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(ids);
                    seen.len() - 1
                };
                outcome(n)
            }
        })
    };
    let mut emails = consumer(
        &env.stack,
        SEND_EMAIL,
        vec![handler],
        Duration::from_secs(1),
    )
    .unwrap();
    emails.concurrency = 1;
    emails.batching_window = Duration::from_secs(1);
    let stats = runner::run_until_drained(&env.sqs(), vec![emails], Duration::from_secs(120))
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    (stats[SEND_EMAIL].clone(), seen)
}

/// Whether every record of invocation `k` was handed over again to a later one.
fn all_came_back(seen: &[Vec<String>], k: usize) -> bool {
    !seen[k].is_empty()
        && seen[k]
            .iter()
            .all(|id| seen[k + 1..].iter().flatten().any(|s| s == id))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_invocation_returns_its_whole_batch_whatever_it_answered() {
    // The first invocation fails (an unhandled error on Lambda); the rest succeed.
    let (stats, seen) = invocations("failed-batch", |n| match n {
        0 => Err("the function failed".to_string()),
        _ => Ok(SqsBatchResponse::default()),
    })
    .await;
    assert_eq!(stats.errors, 1, "{stats:?}");
    // Every record of the failed invocation was handed over again, none acknowledged.
    assert!(all_came_back(&seen, 0), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panic_or_a_response_naming_a_record_not_in_the_batch_returns_the_whole_batch() {
    let (stats, seen) = invocations("bad-response", |n| match n {
        // An identifier Lambda cannot match: the whole batch fails.
        0 => {
            let mut response = SqsBatchResponse::default();
            let mut failure = aws_lambda_events::event::sqs::BatchItemFailure::default();
            failure.item_identifier = "not-a-message-of-this-batch".into();
            response.batch_item_failures.push(failure);
            Ok(response)
        }
        1 => panic!("a handler that panics (expected by this test)"),
        _ => Ok(SqsBatchResponse::default()),
    })
    .await;
    assert_eq!(stats.errors, 1, "the panic: {stats:?}");
    assert!(
        all_came_back(&seen, 0) && all_came_back(&seen, 1),
        "{seen:?}"
    );
}

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

/// The waiting table cannot be read (every Query fails as DynamoDB's 500), `times` times or
/// from now on.
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
    let held: u64 = summary["localTime"]["waiting"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
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

#[tokio::test(flavor = "multi_thread")]
async fn the_fault_switch_fails_or_hangs_a_chosen_mongodb_command() {
    use mailflow_local::fault_switch::MONGODB;
    use mongodb::bson::{doc, Document};
    let env = test_env("mongo-switch", |_| {}).await.unwrap();
    let (_, uri) = mailflow_tests::endpoints();
    let server = uri
        .trim_start_matches("mongodb://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let switch = FaultSwitch::start_mongodb(server).await.unwrap();
    let client = mongodb::Client::with_uri_str(switch.mongodb_uri())
        .await
        .unwrap();
    let users = client
        .database(env.db.name())
        .collection::<Document>("switched");
    users.insert_one(doc! {"_id": "a"}).await.unwrap();

    // An error the driver does not retry, answered by the switch for one find.
    let bad_value = Fault::Fail {
        status: 2,
        code: "BadValue".into(),
    };
    switch.set(MONGODB, "find", bad_value, Some(1));
    let err = users.find_one(doc! {}).await.unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    // A find that is never answered.
    switch.set(MONGODB, "find", Fault::Hang, Some(1));
    let hung = tokio::time::timeout(Duration::from_secs(2), users.find_one(doc! {})).await;
    assert!(hung.is_err(), "the find was answered: {hung:?}");
    // Everything else, and the next find, passes.
    users.insert_one(doc! {"_id": "b"}).await.unwrap();
    assert_eq!(users.count_documents(doc! {}).await.unwrap(), 2);
    assert!(users.find_one(doc! {"_id": "b"}).await.unwrap().is_some());
    let hits: Vec<String> = switch.hits().into_iter().map(|h| h.operation).collect();
    assert_eq!(hits, ["find", "find"]);
}

/// The local Function URL holds a function to its ReservedConcurrentExecutions from
/// template.yaml as Lambda does: with its one environment busy (a one-click whose MongoDB
/// write the switch delays), the next request is refused with 429 before the function sees
/// it, whatever it is; once the environment is free, requests are served again.
#[tokio::test(flavor = "multi_thread")]
async fn a_function_url_answers_429_beyond_its_reserved_concurrency() {
    use mailflow_local::fault_switch::MONGODB;
    use mailflow_local::http;
    use mongodb::bson::{doc, Document};
    let (_, uri) = mailflow_tests::endpoints();
    let server = uri
        .trim_start_matches("mongodb://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let switch = FaultSwitch::start_mongodb(server).await.unwrap();
    let mut env = test_env("url-throttle", |o| {
        o.parameters
            .insert("UnsubscribeConcurrency".into(), "1".into());
        o.mongodb_uri = Some(switch.mongodb_uri());
    })
    .await
    .unwrap();
    env.db
        .collection::<Document>("users")
        .insert_one(doc! {"_id": "ada", "email": "ada@example.com", "subscribed": true})
        .await
        .unwrap();
    let url_server = env.serve_unsubscribe().await.unwrap();
    assert_eq!(url_server.reserved(), Some(1));
    let function_env = env.stack.env(names::UNSUBSCRIBE).unwrap();
    let signer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let token = signer.token(&campaign.id, &campaign.topic, "ada");
    let link = format!("{}?token={token}", url_server.url());
    // The one-click's first MongoDB command is held long enough to be seen busy (and less
    // than the function's 3 s bound on MongoDB, past which it would be recorded as pending).
    switch.set(MONGODB, "*", Fault::Delay(Duration::from_secs(2)), Some(1));
    let one_click = tokio::spawn({
        let link = link.clone();
        async move {
            http::request(&link, "POST", &[], b"List-Unsubscribe=One-Click")
                .await
                .unwrap()
                .status
        }
    });
    while switch.hits().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let junk = http::request(url_server.url(), "GET", &[], b"")
        .await
        .unwrap();
    assert_eq!(junk.status, 429, "{}", junk.text());
    let page = http::request(&link, "GET", &[], b"").await.unwrap();
    assert_eq!(page.status, 429);
    assert_eq!(url_server.throttled(), 2);
    assert_eq!(one_click.await.unwrap(), 200);
    // Free again: junk gets its own answer, the page is shown.
    let junk = http::request(url_server.url(), "GET", &[], b"")
        .await
        .unwrap();
    assert_eq!(junk.status, 400);
    assert_eq!(
        http::request(&link, "GET", &[], b"").await.unwrap().status,
        200
    );
    assert_eq!(url_server.throttled(), 2);
}

/// IAM on the local stack (infra/moto_iam.py): a request signed with a function's role key
/// is allowed only where template.yaml's policy allows it, conditions included, and refused
/// as AWS refuses it otherwise; requests with the tests' own key are not checked.
#[tokio::test(flavor = "multi_thread")]
async fn a_functions_role_may_do_what_its_policy_allows_and_nothing_else() {
    use aws_sdk_dynamodb::types::AttributeValue::S;
    let env = test_env("iam", |_| {}).await.unwrap();
    let stack = &env.stack;
    let sdk = mailflow_local::iam::function_sdk(&stack.sdk, stack, names::SEND_EMAIL).unwrap();
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let sends = stack.table_name(names::SENDS_TABLE).unwrap();
    let campaigns = stack.table_name(names::CAMPAIGNS_TABLE).unwrap();
    let waiting = stack.table_name(names::WAITING_TABLE).unwrap();
    let denied = |err: &dyn std::error::Error| format!("{err:?}").contains("AccessDenied");

    // Allowed: its ledger's items, and the rate item of the campaigns table.
    dynamo
        .get_item()
        .table_name(sends)
        .key("userId", S("u1".into()))
        .key("campaignId", S("c1".into()))
        .send()
        .await
        .unwrap();
    dynamo
        .update_item()
        .table_name(campaigns)
        .key("campaignId", S("#send-rate".into()))
        .update_expression("SET probe = :v")
        .expression_attribute_values(":v", S("1".into()))
        .send()
        .await
        .unwrap();
    // Refused: another item of the campaigns table (the LeadingKeys condition), and a table
    // it has no grant on.
    let other_item = dynamo
        .update_item()
        .table_name(campaigns)
        .key("campaignId", S("weekly-2026-W47".into()))
        .update_expression("SET probe = :v")
        .expression_attribute_values(":v", S("1".into()))
        .send()
        .await
        .unwrap_err();
    assert!(denied(&other_item), "{other_item:?}");
    let other_table = dynamo
        .put_item()
        .table_name(waiting)
        .item("slot", S("x".into()))
        .item("userId", S("u1".into()))
        .send()
        .await
        .unwrap_err();
    assert!(denied(&other_table), "{other_table:?}");
    // The tests' own key is an administrator's: not checked.
    env.dynamo()
        .put_item()
        .table_name(waiting)
        .item("slot", S("x".into()))
        .item("userId", S("u1".into()))
        .send()
        .await
        .unwrap();

    let denials = mailflow_local::iam::denials(stack).await.unwrap();
    let refused: Vec<(&str, &str)> = denials
        .iter()
        .map(|d| (d.role.as_str(), d.action.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("SendEmailRole", "dynamodb:UpdateItem"),
            ("SendEmailRole", "dynamodb:PutItem")
        ]
    );
    let err = mailflow_local::iam::ensure_no_denials(stack)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("SendEmailRole may not dynamodb:PutItem"),
        "{err:#}"
    );
}
