//! The function binaries, run as Lambda runs them: each talks to a local Lambda Runtime API
//! endpoint (served here), gets a sample event from `infra/events/`, and must post
//! the documented response. This covers `main.rs` wiring, config from template.yaml and init.

use mailflow::campaign::Campaign;
use mailflow_local::function_host::{FunctionProcess, Outcome};
use mailflow_local::names;
use mailflow_local::pipeline::{CREATE_EMAILS, GET_USERS, SEND_EMAIL, SES_EVENTS, UNSUBSCRIBE};
use mailflow_local::template::Template;
use mailflow_tests::{test_env, TestEnv};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

fn sample(name: &str) -> Value {
    let path = mailctl::repo_root().join("infra/events").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

struct Run {
    outcomes: Vec<Outcome>,
    init_error: Option<String>,
    exit: Option<std::process::ExitStatus>,
    /// Everything the process wrote (logs and errors), as CloudWatch shows them.
    stderr: String,
}

/// Runs `bin` with `env` as Lambda would, hands it `events` one by one (until it exits), then
/// stops it.
async fn run_function(
    bin: &str,
    function: &str,
    env: BTreeMap<String, String>,
    events: Vec<Value>,
) -> Run {
    let template = Template::load(&mailctl::repo_root().join("template.yaml")).unwrap();
    let spec = template.function(function).unwrap();
    let process = FunctionProcess::spawn(
        bin,
        &mailflow_tests::binary(bin),
        &env,
        Duration::from_secs(spec.timeout.into()),
        spec.memory_size,
    )
    .await
    .unwrap();
    let mut outcomes = Vec::new();
    for event in events {
        let outcome = process.invoke(event).await;
        let exited = outcome == Outcome::Exited;
        outcomes.push(outcome);
        if exited {
            break;
        }
    }
    // Peak memory, for choosing MemorySize (printed, never asserted: machines differ).
    if let Some(peak) = process.peak_rss() {
        eprintln!("{bin}: peak RSS {} KiB", peak / 1024);
    }
    let init_error = process.init_error();
    let exit = process.exit_status();
    let logs = process.finish().await;
    Run {
        outcomes,
        init_error,
        exit,
        stderr: logs.lines.join("\n"),
    }
}

/// Runs `bin` on the sample batch `file` and checks that the record `failed` alone failed.
async fn only_failure(env: &TestEnv, bin: &str, function: &str, file: &str, failed: &str) -> Run {
    let run = run_function(
        bin,
        function,
        env.stack.env(function).unwrap(),
        vec![sample(file)],
    )
    .await;
    assert_eq!(
        response(&run)["batchItemFailures"],
        serde_json::json!([{ "itemIdentifier": failed }]),
        "{file}; stderr: {}",
        run.stderr
    );
    run
}

fn response(run: &Run) -> &Value {
    match run.outcomes.first() {
        Some(Outcome::Response(v)) => v,
        other => panic!("expected a response, got {other:?}; stderr: {}", run.stderr),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binaries_serve_the_sample_events_through_the_runtime_api() {
    let env = test_env("runtime-api", |_| {}).await.unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let seeded = env.seed(30, &campaign).await.unwrap();

    // GetUsers, invoked by hand with infra/events/manual-run.json.
    let run = run_function(
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("manual-run.json")],
    )
    .await;
    let summary = response(&run);
    assert_eq!(summary["campaignId"], "weekly-2026-W47");
    assert_eq!(
        summary["usersEnqueued"],
        seeded.audience.len(),
        "{}",
        run.stderr
    );
    assert_eq!(
        env.depth(names::USERS_QUEUE).await.unwrap(),
        seeded.audience.len() as u64
    );

    // GetUsers from the continuation queue: the malformed checkpoint fails alone.
    only_failure(
        &env,
        "get-users",
        GET_USERS,
        "continuation-batch.json",
        "c0ffee00-0000-4000-8000-000000000002",
    )
    .await;

    // CreateEmails with a batch whose second record is malformed: only that one fails.
    only_failure(
        &env,
        "create-emails",
        CREATE_EMAILS,
        "users-batch.json",
        "9f1c1d5e-0000-4000-8000-000000000002",
    )
    .await;

    // SendEmail sends the sample job and records it SENT; the malformed job fails alone.
    let run = only_failure(
        &env,
        "send-email",
        SEND_EMAIL,
        "emails-batch.json",
        "4b7e0b7a-0000-4000-8000-000000000002",
    )
    .await;
    let records = env.records("weekly-2026-W47").await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records["u0000001"].status,
        Some(mailflow::ledger::SendStatus::Sent)
    );
    assert!(
        !run.stderr.contains("u0000001@example.com"),
        "logs must not carry addresses"
    );

    // SesEvents with infra/events/ses-events-batch.json: the permanent bounce suppresses
    // u0000001 and is noted on its record; the malformed event fails alone.
    only_failure(
        &env,
        "ses-events",
        SES_EVENTS,
        "ses-events-batch.json",
        "5e5e0000-0000-4000-8000-000000000002",
    )
    .await;
    let users = env.db.collection::<mongodb::bson::Document>("users");
    let user = |id: &'static str| {
        let users = users.clone();
        async move {
            users
                .find_one(mongodb::bson::doc! {"_id": id})
                .await
                .unwrap()
                .unwrap()
        }
    };
    let bounced = user("u0000001").await;
    assert_eq!(
        bounced
            .get_document("suppression")
            .unwrap()
            .get_str("reason")
            .ok(),
        Some("bounce")
    );
    let records = env.records("weekly-2026-W47").await.unwrap();
    assert!(records["u0000001"]
        .engagement
        .contains_key(&mailflow::ledger::Engagement::Bounced));

    // Unsubscribe through its Function URL event: the sample's placeholder token is refused;
    // a one-click POST with a token the stack's key signed unsubscribes.
    let unsubscribe_env = env.stack.env(UNSUBSCRIBE).unwrap();
    let mut one_click = sample("unsubscribe-one-click.json");
    let signer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| {
            unsubscribe_env.get(k).cloned()
        })
        .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap();
    let token = signer.token(&campaign.id, "u0000003");
    let placeholder = one_click.clone();
    one_click["rawQueryString"] = format!("token={token}").into();
    let run = run_function(
        "unsubscribe",
        UNSUBSCRIBE,
        unsubscribe_env.clone(),
        vec![placeholder, one_click],
    )
    .await;
    let statuses: Vec<&Value> = run
        .outcomes
        .iter()
        .map(|o| match o {
            Outcome::Response(v) => &v["statusCode"],
            other => panic!("{other:?}: {}", run.stderr),
        })
        .collect();
    assert_eq!(statuses, [&Value::from(400), &Value::from(200)]);
    assert_eq!(
        user("u0000003").await.get_bool("subscribed").ok(),
        Some(false)
    );
    assert!(!run.stderr.contains(&token), "logs must not carry tokens");
}

#[tokio::test(flavor = "multi_thread")]
async fn send_email_refuses_to_start_when_visibility_is_not_above_the_timeout() {
    let env = test_env("refuse-start", |_| {}).await.unwrap();
    let mut vars = env.stack.env(SEND_EMAIL).unwrap();
    vars.insert("VISIBILITY_TIMEOUT_SECONDS".into(), "30".into());
    let run = run_function(
        "send-email",
        SEND_EMAIL,
        vars,
        vec![sample("emails-batch.json")],
    )
    .await;
    assert_eq!(
        run.outcomes,
        [Outcome::Exited],
        "it must not serve any event"
    );
    let exit = run.exit.expect("the process exits at init");
    assert!(!exit.success());
    let reported = format!("{} {}", run.stderr, run.init_error.unwrap_or_default());
    assert!(
        reported.contains("VISIBILITY_TIMEOUT_SECONDS")
            && reported.contains("must be greater than FUNCTION_TIMEOUT_SECONDS"),
        "{reported}"
    );
}
