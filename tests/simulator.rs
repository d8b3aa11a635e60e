//! The simulator as strict as Lambda where the difference changes an outcome: a failed
//! invocation's batch comes back whole (its releases: `simulator_releases`). The fault switch (a proxy in front of the AWS emulator) makes the chosen calls fail or
//! slow down. A Function URL's function is throttled (429) beyond its reserved concurrency.
//! docs/local-stack.md keeps the table of what matches Lambda and what does not.

use aws_lambda_events::event::sqs::SqsBatchResponse;
use mailflow::domain::campaign::Campaign;
use mailflow_local::fault_switch::{Fault, FaultSwitch};
use mailflow_local::names;
use mailflow_local::pipeline::{consumer, SEND_EMAIL};
use mailflow_local::runner;
use mailflow_tests::test_env;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) fn ms(rfc3339: &str) -> i64 {
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
