//! The function binaries, run as Lambda runs them, under three Runtime API implementations:
//! ours (`function_host`, which also measures), AWS's own emulator (`aws-lambda-rie`, from the
//! SAM CLI's wheel) and `sam local invoke` of template.yaml (AWS's emulator inside the Lambda
//! base image, run by `infra/sam-local.sh`, hence ignored here). Each gets the sample events
//! of `infra/events/` and must answer and act as documented. This covers `main.rs` wiring,
//! configuration from template.yaml and init.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::campaign_state::Hold;
use mailflow::domain::send_rate::SendRate;
use mailflow::ports::RateBucket;
use mailflow_local::aws_emulator::EmulatedFunction;
use mailflow_local::function_host::{FunctionProcess, Outcome};
use mailflow_local::names;
use mailflow_local::pipeline::{
    CREATE_EMAILS, GET_USERS, OPEN_CONTENT, SEND_EMAIL, SES_EVENTS, UNSUBSCRIBE,
};
use mailflow_local::sam_local::SamLocal;
use mailflow_local::seed::SeedReport;
use mailflow_local::template::Template;
use mailflow_tests::{test_env, TestEnv};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

fn sample(name: &str) -> Value {
    let path = mailctl::repo_root().join("infra/events").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Which Runtime API runs the function.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Host {
    Ours,
    AwsEmulator,
    SamLocal,
}

struct Run {
    outcomes: Vec<Outcome>,
    /// How the process ended by itself (our host only: the others keep it to themselves).
    exit: Option<std::process::ExitStatus>,
    /// Everything written (the function's logs and errors, and the emulator's own lines).
    stderr: String,
    /// What the function posted to the Runtime API's `/init/error` (our host only).
    init_error: Option<String>,
}

/// Runs `bin` (template function `function`) with `env` under `host`, hands it `events` one
/// by one (until it exits), then stops it.
async fn run_function(
    host: Host,
    bin: &str,
    function: &str,
    env: BTreeMap<String, String>,
    events: Vec<Value>,
) -> Run {
    let template = Template::load(&mailctl::repo_root().join("template.yaml")).unwrap();
    let spec = template.function(function).unwrap();
    let timeout = Duration::from_secs(spec.timeout.into());
    let mut outcomes = Vec::new();
    let mut stop = |outcome: Outcome| {
        let exited = outcome == Outcome::Exited;
        outcomes.push(outcome);
        exited
    };
    match host {
        Host::Ours => {
            let bin = mailflow_tests::binary(bin);
            let process = FunctionProcess::spawn(function, &bin, &env, timeout, spec.memory_size)
                .await
                .unwrap();
            for event in events {
                if stop(process.invoke(event).await) {
                    break;
                }
            }
            // Peak memory, for choosing MemorySize (printed, never asserted: machines differ).
            if let Some(peak) = process.peak_rss() {
                eprintln!("{function}: peak RSS {} KiB", peak / 1024);
            }
            let exit = process.exit_status();
            let init_error = process.init_error();
            let logs = process.finish().await;
            Run {
                outcomes,
                exit,
                stderr: logs.lines.join("\n"),
                init_error,
            }
        }
        Host::AwsEmulator => {
            let bin = mailflow_tests::binary(bin);
            let mut emulated =
                EmulatedFunction::spawn(function, &bin, &env, timeout, spec.memory_size)
                    .await
                    .unwrap();
            for event in events {
                if stop(emulated.invoke(&event).await.unwrap()) {
                    break;
                }
            }
            Run {
                outcomes,
                exit: None,
                stderr: emulated.finish().await.join("\n"),
                init_error: None,
            }
        }
        Host::SamLocal => {
            let sam = SamLocal::from_env().unwrap();
            let mut stderr = String::new();
            for event in events {
                let invocation = sam.invoke(function, &env, &event).await.unwrap();
                stderr.push_str(&invocation.logs);
                if stop(invocation.outcome) {
                    break;
                }
            }
            Run {
                outcomes,
                exit: None,
                stderr,
                init_error: None,
            }
        }
    }
}

/// Runs `bin` on the sample batch `file` and checks that the record `failed` alone failed.
async fn only_failure(
    host: Host,
    env: &TestEnv,
    bin: &str,
    function: &str,
    file: &str,
    failed: &str,
) -> Run {
    let run = run_function(
        host,
        bin,
        function,
        env.stack.env(function).unwrap(),
        vec![sample(file)],
    )
    .await;
    assert_eq!(
        response(&run)["batchItemFailures"],
        serde_json::json!([{ "itemIdentifier": failed }]),
        "{host:?} {file}; stderr: {}",
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
async fn our_runtime_api_serves_the_sample_events() {
    serves_the_sample_events(Host::Ours).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_emulator_serves_the_sample_events() {
    serves_the_sample_events(Host::AwsEmulator).await;
}

/// Run by `infra/sam-local.sh test` (it needs Docker and the SAM CLI it prepares).
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn sam_local_invoke_serves_the_sample_events() {
    serves_the_sample_events(Host::SamLocal).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn our_runtime_api_sees_a_function_refuse_to_start() {
    refuses_to_start(Host::Ours).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_emulator_sees_a_function_refuse_to_start() {
    refuses_to_start(Host::AwsEmulator).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn sam_local_invoke_sees_a_function_refuse_to_start() {
    refuses_to_start(Host::SamLocal).await;
}

/// Every function with every sample event of `infra/events/`, and what each must do.
async fn serves_the_sample_events(host: Host) {
    let test = format!("runtime-{host:?}").to_lowercase();
    // The sends table pre-warmed as docs/deploying.md has an operator do for 20,000/s.
    let env = test_env(&test, |o| {
        o.parameters
            .insert("SendsTableWarmWrites".into(), "60200".into());
        o.parameters
            .insert("SendsIndexWarmWrites".into(), "40200".into());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let seeded = env.seed(30, &campaign).await.unwrap();

    get_users_fans_out_and_fails_a_bad_checkpoint_alone(host, &env, &seeded).await;
    create_and_send_fail_a_bad_record_alone(host, &env).await;
    ses_events_suppress_the_bounce(host, &env).await;
    unsubscribe_refuses_the_placeholder_and_takes_a_signed_link(host, &env, &campaign).await;
    open_content_refuses_the_placeholder_and_freezes_a_sealed_slot(host, &env, &campaign).await;
    rate_control_sizes_both_mappings(host, &env).await;
    // Last: a paused campaign sends nothing.
    reputation_guard_pauses_the_campaign(host, &env, &campaign).await;
}

/// GetUsers with each of its sample events: a manual run, the schedule, a resend, and a
/// continuation batch with a malformed checkpoint.
async fn get_users_fans_out_and_fails_a_bad_checkpoint_alone(
    host: Host,
    env: &TestEnv,
    seeded: &SeedReport,
) {
    // GetUsers, invoked by hand with infra/events/manual-run.json: its summary, and one
    // message per audience user on the users queue.
    let run = run_function(
        host,
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("manual-run.json")],
    )
    .await;
    let summary = response(&run);
    assert_eq!(summary["campaignId"], "weekly-2026-W47");
    assert_eq!(summary["complete"], true);
    assert_eq!(
        summary["usersEnqueued"],
        seeded.audience.len(),
        "{}",
        run.stderr
    );
    let mut enqueued = queued_user_ids(env).await;
    enqueued.sort();
    let audience: Vec<String> = seeded.audience.keys().cloned().collect();
    assert_eq!(enqueued, audience);

    // GetUsers with the schedule's event and with the manual resend: the same campaign
    // starts again (the sends ledger, not GetUsers, keeps anyone from a second email).
    for event in ["schedule.json", "manual-resend.json"] {
        let run = run_function(
            host,
            "get-users",
            GET_USERS,
            env.stack.env(GET_USERS).unwrap(),
            vec![sample(event)],
        )
        .await;
        let summary = response(&run);
        assert_eq!(
            summary["campaignId"], "weekly-2026-W47",
            "{event}: {}",
            run.stderr
        );
        assert_eq!(summary["usersEnqueued"], seeded.audience.len(), "{event}");
    }

    // GetUsers with a local-time run (infra/events/manual-local-time.json) and a send
    // slot's release (release-slot.json), as their one-time schedule invokes it. Whether
    // 2026-11-30 09:00 is still ahead depends on the day this runs: every user is counted
    // either way, the seeded ones (no `timezone`) in the fallback zone.
    let run = run_function(
        host,
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("manual-local-time.json")],
    )
    .await;
    let local = &response(&run)["localTime"];
    let count = |field: &str| {
        local[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {}", run.stderr))
    };
    let waiting: u64 = local["waiting"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(
        waiting + count("delayed") + count("passedSentNow") + count("passedSkipped"),
        seeded.audience.len() as u64,
        "{local}"
    );
    assert_eq!(count("timezoneMissing"), seeded.audience.len() as u64);
    // Its metrics: the users held, as the summary counts them.
    if host != Host::SamLocal {
        let doc = emf_of(&run.stderr, "GetUsers");
        // None held (the slot within SQS's delay, or passed): a count of 0 is not written.
        let held = doc["usersHeld"].as_f64().unwrap_or(0.0);
        assert_eq!(held, waiting as f64, "{doc}");
    }
    let run = run_function(
        host,
        "get-users",
        GET_USERS,
        env.stack.env(GET_USERS).unwrap(),
        vec![sample("release-slot.json")],
    )
    .await;
    let release = response(&run);
    assert_eq!(release["campaignId"], "weekly-2026-W47", "{}", run.stderr);
    assert!(
        release["early"] == true || release["complete"] == true,
        "{release}"
    );

    // GetUsers from the continuation queue: the malformed checkpoint fails alone.
    only_failure(
        host,
        env,
        "get-users",
        GET_USERS,
        "continuation-batch.json",
        "c0ffee00-0000-4000-8000-000000000002",
    )
    .await;
}

/// CreateEmails and SendEmail with their sample batches, each with one malformed record.
async fn create_and_send_fail_a_bad_record_alone(host: Host, env: &TestEnv) {
    // CreateEmails with a batch whose second record is malformed: only that one fails.
    only_failure(
        host,
        env,
        "create-emails",
        CREATE_EMAILS,
        "users-batch.json",
        "9f1c1d5e-0000-4000-8000-000000000002",
    )
    .await;

    // SendEmail sends the sample job and records it SENT; the malformed job fails alone.
    let run = only_failure(
        host,
        env,
        "send-email",
        SEND_EMAIL,
        "emails-batch.json",
        "4b7e0b7a-0000-4000-8000-000000000002",
    )
    .await;
    let records = env.records("weekly-2026-W47").await.unwrap();
    assert_eq!(records.len(), 1);
    let sent = &records["u0000001"];
    assert_eq!(
        sent.status,
        Some(mailflow::domain::ledger::SendStatus::Sent)
    );
    // The email in SES's record is the sample job's, under the id the ledger holds.
    let ses_id = sent
        .ses_message_id
        .clone()
        .expect("a SENT record has its SES id");
    let email = mailflow_local::ses_record::sent_messages(&env.endpoint)
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.id == ses_id)
        .expect("the SENT record's email is in SES's record");
    assert_eq!(email.to, ["u0000001@example.com"]);
    assert_eq!(
        email.subject.as_deref(),
        Some("You have 2 new followers this week")
    );
    assert_eq!(email.text.as_deref().map(str::trim), Some("Hi Ada,"));
    assert!(
        !run.stderr.contains("u0000001@example.com"),
        "logs must not carry addresses"
    );
    // Its metrics, one EMF document per invocation on stdout (SAM's log attach is left out:
    // it has lost lines before).
    if host != Host::SamLocal {
        let send = emf_of(&run.stderr, "SendEmail");
        assert_eq!(send["Invocations"], 1.0);
        assert_eq!(send["sent"], 1.0, "{send}");
        // The malformed job is handed back for a retry (its batch item failure).
        assert_eq!(send["retried"], 1.0, "{send}");
        assert!(send["BackendRequests"].as_f64().unwrap() >= 3.0, "{send}");
        // The shared rate it sent at, not held at its floor.
        assert!(
            send["sharedRatePerSecond"].as_f64().unwrap() > 0.0,
            "{send}"
        );
        assert_eq!(send["rateAtFloor"], 0.0, "{send}");
        let directive = &send["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], mailflow::runtime::emf::NAMESPACE);
        let declared: Vec<&str> = directive["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["Name"].as_str())
            .collect();
        for name in declared {
            assert!(
                send.get(name).is_some_and(|v| v.is_number()),
                "{name} in {send}"
            );
        }
    }
}

/// `function`'s EMF document among its log lines (the last, one per invocation).
fn emf_of(logs: &str, function: &str) -> serde_json::Value {
    logs.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|doc| doc.get("_aws").is_some() && doc["Function"] == function)
        .unwrap_or_else(|| panic!("no EMF line of {function} in:\n{logs}"))
}

/// SesEvents with its sample batch.
async fn ses_events_suppress_the_bounce(host: Host, env: &TestEnv) {
    // SesEvents with infra/events/ses-events-batch.json: the permanent bounce suppresses
    // u0000001 and is noted on its record; the malformed event fails alone.
    only_failure(
        host,
        env,
        "ses-events",
        SES_EVENTS,
        "ses-events-batch.json",
        "5e5e0000-0000-4000-8000-000000000002",
    )
    .await;
    let bounced = user(env, "u0000001").await;
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
        .contains_key(&mailflow::domain::ledger::Engagement::Bounced));
}

/// Unsubscribe with its sample Function URL events.
async fn unsubscribe_refuses_the_placeholder_and_takes_a_signed_link(
    host: Host,
    env: &TestEnv,
    campaign: &Campaign,
) {
    // Unsubscribe through its Function URL event: the sample's placeholder token is refused;
    // a one-click POST with a token the stack's key signed leaves the campaign's topic. The
    // sample's body is RFC 8058's own example, multipart/form-data as the RFC says it SHOULD be.
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
    let token = signer.token(&campaign.id, &campaign.topic, "u0000003");
    let placeholder = one_click.clone();
    one_click["rawQueryString"] = format!("token={token}").into();
    let run = run_function(
        host,
        "unsubscribe",
        UNSUBSCRIBE,
        unsubscribe_env.clone(),
        vec![placeholder, one_click],
    )
    .await;
    let pages: Vec<(&Value, &str)> = run
        .outcomes
        .iter()
        .map(|o| match o {
            Outcome::Response(v) => (&v["statusCode"], v["body"].as_str().unwrap_or_default()),
            other => panic!("{other:?}: {}", run.stderr),
        })
        .collect();
    assert_eq!(pages.len(), 2, "{}", run.stderr);
    assert_eq!(pages[0].0, &Value::from(400));
    assert_eq!(pages[1].0, &Value::from(200));
    assert!(
        pages[1].1.contains("<h1>You are unsubscribed from “"),
        "{}",
        pages[1].1
    );
    let after = user(env, "u0000003").await;
    let digest = after
        .get_document("topics")
        .and_then(|t| t.get_document("digest"))
        .unwrap_or_else(|_| panic!("{after}"));
    assert_eq!(digest.get_bool("subscribed").ok(), Some(false), "{after}");
    assert!(!run.stderr.contains(&token), "logs must not carry tokens");
}

/// OpenContent with its sample Function URL event: the placeholder token gets a transparent
/// image (404); a slot sealed with the stack's key gets its pick's card, frozen in the table,
/// and its link a redirect to the configured profile page.
async fn open_content_refuses_the_placeholder_and_freezes_a_sealed_slot(
    host: Host,
    env: &TestEnv,
    campaign: &Campaign,
) {
    // A follower u0000004 does not follow back, newer than any seeded follow: the first pick.
    let picked = mongodb::bson::doc! { "_id": "picked-1", "name": "Runtime Pick", "email": "p@x.example", "subscribed": true };
    env.db.collection("users").insert_one(picked).await.unwrap();
    let follow = mongodb::bson::doc! { "followerId": "picked-1", "followeeId": "u0000004", "createdAt": mongodb::bson::DateTime::now() };
    env.db
        .collection("follows")
        .insert_one(follow)
        .await
        .unwrap();
    let function_env = env.stack.env(OPEN_CONTENT).unwrap();
    let signer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap();
    let urls = mailflow::domain::open_content::SlotUrls::for_email(
        &signer.slot_sealer(),
        "https://o.example/",
        &campaign.id,
        "u0000004",
        mailflow::domain::open_content::Language::En,
        3,
    );
    let placeholder = sample("open-content-pick.json");
    let mut pick = placeholder.clone();
    pick["rawQueryString"] = urls[0].image.split_once('?').unwrap().1.into();
    let mut link = placeholder.clone();
    link["rawPath"] = "/go".into();
    link["requestContext"]["http"]["path"] = "/go".into();
    link["rawQueryString"] = urls[0].link.split_once('?').unwrap().1.into();
    let run = run_function(
        host,
        "open-content",
        OPEN_CONTENT,
        function_env.clone(),
        vec![placeholder, pick, link],
    )
    .await;
    let answers: Vec<&Value> = run
        .outcomes
        .iter()
        .map(|o| match o {
            Outcome::Response(v) => v,
            other => panic!("{other:?}: {}", run.stderr),
        })
        .collect();
    assert_eq!(answers.len(), 3, "{}", run.stderr);
    assert_eq!(answers[0]["statusCode"], 404);
    assert_eq!(answers[0]["headers"]["content-type"], "image/png");
    assert_eq!(answers[1]["statusCode"], 200, "{}", run.stderr);
    assert_eq!(answers[1]["isBase64Encoded"], true);
    assert_eq!(answers[2]["statusCode"], 307);
    let location = answers[2]["headers"]["location"].as_str().unwrap();
    let template = &function_env["PROFILE_URL_TEMPLATE"];
    let prefix = template.split("{id}").next().unwrap();
    assert!(location.starts_with(prefix), "{location}");
    let picks = env
        .frozen_picks(campaign.id.as_str(), "u0000004")
        .await
        .unwrap()
        .expect("frozen by the card's request");
    assert!(!picks.fallback, "{picks:?}");
    assert_eq!(picks.items[0].id, "picked-1");
    assert_eq!(location, template.replace("{id}", "picked-1"));
    assert!(
        !run.stderr.contains(&urls[0].image),
        "logs must not carry tokens"
    );
}

/// RateControl with the scheduler's event: SES's quota read, the rate item given its rate,
/// SendEmail's event source mapping set to the environments that rate needs and
/// CreateEmails' to those that keep it fed.
async fn rate_control_sizes_both_mappings(host: Host, env: &TestEnv) {
    let control_env = env.stack.env(names::RATE_CONTROL).unwrap();
    let run = run_function(
        host,
        "rate-control",
        names::RATE_CONTROL,
        control_env.clone(),
        vec![sample("rate-control.json")],
    )
    .await;
    // The local stack has no SESv2 GetAccount (the quota is unknown, the ceiling is the
    // configured rate), and SendEmail set the rate earlier in this test: nothing to write.
    let summary = response(&run);
    // The account's limits read (its role may call GetAccountSettings, DescribeLimits and
    // DescribeTable, and the local emulator answers as AWS does an account without a
    // raise), not assumed: the sends table is on demand, so the quota is its ceiling.
    let account = &summary["account"];
    assert_eq!(
        (
            &account["lambdaConcurrency"],
            &account["read"],
            &account["sendsTableWriteUnits"],
            &account["sendsIndexWriteUnits"],
        ),
        (
            &serde_json::json!(1000),
            &serde_json::json!([
                "lambda concurrency",
                "dynamodb per-table write quota",
                "sends table throughput"
            ]),
            &serde_json::json!(40000.0),
            &serde_json::json!(40000.0),
        ),
        "{summary}"
    );
    // The table's and its index's warm throughput, as the template's parameters set them:
    // only DescribeTable could say so (the defaults know none).
    assert_eq!(
        (
            &account["sendsTableWarmWriteUnits"],
            &account["sendsIndexWarmWriteUnits"]
        ),
        (&serde_json::json!(60200.0), &serde_json::json!(40200.0)),
        "{summary}"
    );
    // What is left unreserved is read too (the local stack's functions run outside the
    // emulator's Lambda, so none of them holds a reservation there).
    assert_eq!(account["lambdaUnreserved"], 1000, "{summary}");
    let environments = summary["environments"].as_u64().unwrap();
    let config =
        mailflow::config::RateControlConfig::from_source(&|k: &str| control_env.get(k).cloned())
            .unwrap();
    let ceiling = summary["ceiling"].as_f64().unwrap();
    assert!(ceiling <= config.send_rate_per_second, "{summary}");
    assert_eq!(
        environments,
        u64::from(SendRate::configured(ceiling).environments(&config.send_email)),
        "{summary}"
    );
    let mapping = aws_sdk_lambda::Client::new(&env.stack.sdk)
        .get_event_source_mapping()
        .uuid(&config.emails_event_source_mapping_id)
        .send()
        .await
        .unwrap();
    let max = mapping
        .scaling_config()
        .and_then(|s| s.maximum_concurrency());
    assert_eq!(max, Some(environments as i32), "{mapping:?}");
    let composers = summary["createEmails"]["environments"].as_u64().unwrap();
    assert_eq!(
        composers,
        u64::from(
            mailflow::domain::fan_out::composers_for(
                ceiling,
                &config.create_emails,
                config.create_emails_ceiling
            )
            .environments
        ),
        "{summary}"
    );
    let users_mapping = aws_sdk_lambda::Client::new(&env.stack.sdk)
        .get_event_source_mapping()
        .uuid(&config.users_event_source_mapping_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        users_mapping
            .scaling_config()
            .and_then(|s| s.maximum_concurrency()),
        Some(composers as i32),
        "{users_mapping:?}"
    );
    let handlers = summary["sesEvents"].as_u64().unwrap();
    assert_eq!(
        handlers,
        u64::from(config.stack().demand(ceiling).ses_events),
        "{summary}"
    );
    let events_mapping = aws_sdk_lambda::Client::new(&env.stack.sdk)
        .get_event_source_mapping()
        .uuid(&config.ses_events_event_source_mapping_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        events_mapping
            .scaling_config()
            .and_then(|s| s.maximum_concurrency()),
        Some(handlers as i32),
        "{events_mapping:?}"
    );
    let item = mailflow::adapters::rate_item::RateItem::new(
        env.dynamo(),
        env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap(),
    );
    let rate = item.read().await.unwrap().rate.expect("a rate written");
    assert_eq!(rate.ceiling, ceiling);
}

/// ReputationGuard with its sample alarm.
async fn reputation_guard_pauses_the_campaign(host: Host, env: &TestEnv, campaign: &Campaign) {
    // ReputationGuard with infra/events/reputation-alarm.json, the SNS delivery of a
    // CloudWatch alarm on SES's Reputation.BounceRate: the campaign GetUsers registered above
    // is paused by the guard, with the alarm as its reason, and the campaign queues'
    // event source mappings are disabled. (Last: a paused campaign sends nothing.)
    let run = run_function(
        host,
        "reputation-guard",
        names::REPUTATION_GUARD,
        env.stack.env(names::REPUTATION_GUARD).unwrap(),
        vec![sample("reputation-alarm.json")],
    )
    .await;
    let summary = response(&run);
    assert_eq!(summary["alarms"], 1, "{}", run.stderr);
    assert_eq!(summary["consumersStopped"], 3, "{}", run.stderr);
    assert_eq!(summary["paused"], serde_json::json!([campaign.id.as_str()]));
    let table = mailflow::adapters::campaigns::CampaignsTable::new(
        env.dynamo(),
        env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap(),
    );
    match table
        .record(campaign.id.as_str())
        .await
        .unwrap()
        .and_then(|r| r.hold)
    {
        Some(Hold::Paused(change)) => {
            assert_eq!(change.by, mailflow::stages::reputation_guard::GUARD);
            assert!(
                change
                    .reason
                    .contains("Reputation.BounceRate (threshold 0.04)"),
                "{}",
                change.reason
            );
        }
        other => panic!("not paused by the guard: {other:?}"),
    }
    let mappings = mailflow::adapters::event_sources::EventSourceMappings::new(
        aws_sdk_lambda::Client::new(&env.stack.sdk),
        env.stack
            .event_source_mappings()
            .unwrap()
            .split(',')
            .map(str::to_owned)
            .collect(),
    );
    for (id, state) in mappings.states().await.unwrap() {
        assert_eq!(state, "Disabled", "{id}");
    }
    assert!(
        run.stderr.contains("SES reputation alarm: sending paused"),
        "the guard's warning: {}",
        run.stderr
    );
}

/// One seeded user's document.
async fn user(env: &TestEnv, id: &str) -> mongodb::bson::Document {
    let users = env.db.collection::<mongodb::bson::Document>("users");
    users
        .find_one(mongodb::bson::doc! {"_id": id})
        .await
        .unwrap()
        .unwrap()
}

/// The user ids of the messages on the users queue (received, then left to come back).
async fn queued_user_ids(env: &TestEnv) -> Vec<String> {
    let sqs = env.sqs();
    let url = env.stack.queue_url(names::USERS_QUEUE).unwrap();
    let mut ids = Vec::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .send()
            .await
            .unwrap();
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return ids;
        }
        for m in messages {
            let body: Value = serde_json::from_str(m.body().unwrap_or_default()).unwrap();
            assert_eq!(body["campaignId"], "weekly-2026-W47");
            ids.push(body["userId"].as_str().unwrap().to_owned());
        }
    }
}

/// A function whose configuration is wrong does not start, and says why: in one log line,
/// and to the Runtime API, whose host answers the invocation with it (as Lambda does; AWS's
/// emulator run alone still answers nothing).
async fn refuses_to_start(host: Host) {
    let test = format!("refuse-{host:?}").to_lowercase();
    let env = test_env(&test, |_| {}).await.unwrap();
    let mut vars = env.stack.env(SEND_EMAIL).unwrap();
    vars.insert("VISIBILITY_TIMEOUT_SECONDS".into(), "30".into());
    let why = |text: &str| {
        text.contains("VISIBILITY_TIMEOUT_SECONDS")
            && text.contains("must be greater than FUNCTION_TIMEOUT_SECONDS")
    };
    let run = run_function(
        host,
        "send-email",
        SEND_EMAIL,
        vars,
        vec![sample("emails-batch.json")],
    )
    .await;
    // It serves no event: the invocation meets the failed init.
    let answered = match run.outcomes.as_slice() {
        [Outcome::Exited] => None,
        [Outcome::Error(reason)] => Some(reason.clone()),
        other => panic!("it must not serve any event: {other:?}\n{}", run.stderr),
    };
    if let Some(exit) = run.exit {
        assert!(!exit.success());
    }
    if matches!(host, Host::Ours) {
        // What the function posted to the Runtime API, where Lambda takes it.
        let reported: Value =
            serde_json::from_str(run.init_error.as_deref().unwrap_or("null")).unwrap();
        assert_eq!(reported["errorType"], "Runtime.ConfigError", "{reported}");
        assert!(
            reported["errorMessage"].as_str().is_some_and(why),
            "{reported}"
        );
    }
    if matches!(host, Host::SamLocal) {
        // The Lambda emulator in SAM's image answers with the reported reason. (Its log line
        // can be lost: SAM attaches to the container's output after the start, and a process
        // that exits within milliseconds may be gone by then.)
        let answered = answered.unwrap_or_else(|| panic!("no answer said why: {}", run.stderr));
        assert!(why(&answered), "{answered}");
        return;
    }
    let reasons: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("cannot start"))
        .collect();
    assert_eq!(reasons.len(), 1, "one line says why: {}", run.stderr);
    assert!(why(reasons[0]), "{}", reasons[0]);
}
