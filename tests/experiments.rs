//! A/B experiments end to end on the local stack (docs/experiments.md): a seeded audience
//! with a holdout, three variants clicked by simulated people at known rates (the SES
//! events' clicks, with a link scanner clicking every email of one variant), a pause over
//! the decision's time that holds the rest, then the winner chosen by the rule and sent to
//! the rest: each user one email, the losers never sent to the rest.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::experiment::{Assignment, DecidedBy, Experiment};
use mailflow::domain::guardrails::held_out;
use mailflow::domain::ledger::SendStatus;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_local::ses_event_source::event;
use mailflow_tests::{ses, test_env};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const WEEK: &str = "weekly-2026-W47";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36";
const SCANNER: &str = "Mozilla/5.0 (compatible; Barracuda Sentinel)";

/// Each variant's subject marks it; `plain` keeps the templates' own.
fn experiment() -> serde_json::Value {
    let subject = |mark: &str| {
        json!({"en": format!("[{mark}] {{{{ data.followers.count }}}} new followers"),
               "fr": format!("[{mark}] {{{{ data.followers.count }}}} nouveaux abonnés"),
               "de": format!("[{mark}] {{{{ data.followers.count }}}} neue Follower")})
    };
    json!({
        "variants": [
            {"name": "plain"},
            {"name": "count", "subject": subject("count")},
            {"name": "short", "subject": subject("short"), "template": "short"},
        ],
        "testPercent": 60,
        "waitHours": 3,
        "minDelivered": 25,
        "minPeople": 20,
    })
}

/// The simulated people's click rates per variant, in basis points.
fn click_rate(variant: &str) -> u32 {
    match variant {
        "count" => 4_500,
        "short" => 1_000,
        _ => 500,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_variant_people_click_goes_to_the_rest_once_each_and_a_pause_holds_the_rest() {
    // Consent to per-recipient tracking: without it no click is noted, and GetUsers refuses
    // the experiment.
    let env = test_env("experiments", |o| {
        o.parameters
            .insert("TrackOpensAndClicks".into(), "true".into());
    })
    .await
    .unwrap();
    let week = Campaign::from_id(WEEK, None).unwrap();
    env.seed(400, &week).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let sdk = &env.stack.sdk;
    let target = mailctl::ops::Target::from_prefix(sdk, &env.stack.prefix)
        .await
        .unwrap();
    let start = json!({"campaignId": WEEK, "holdoutPercent": "10", "experiment": experiment()});
    pipeline.start(start).await.unwrap();
    // The test group is sent; the rest waits for the decision's schedule (not fired here).
    pipeline
        .drain_queues(Duration::from_secs(600))
        .await
        .unwrap();
    let status = mailctl::ops::status(sdk, &target, WEEK).await.unwrap();
    let recorded: Experiment = serde_json::from_value(experiment()).unwrap();
    let test_group = env.records(WEEK).await.unwrap();
    assert!(test_group.len() > 90, "{}", test_group.len());
    for (user, r) in &test_group {
        let Assignment::Test(i) = recorded.assign(WEEK, user) else {
            panic!("{user} of the rest was claimed before the decision: {r:?}");
        };
        assert_eq!(
            r.variant.as_deref(),
            Some(recorded.variants[i].name.as_str())
        );
        if held_out(WEEK, user, 1000) {
            assert_eq!(r.skip_reason.as_deref(), Some("held_out"), "{user}");
        }
    }
    let waiting = status.local_time.as_ref().map_or(0, |l| l.still_waiting);
    assert!(waiting > 60, "the rest waits: {waiting}");

    // People click at each variant's rate, a while after delivery; a link scanner clicks
    // every `plain` email at delivery (not a person: it must not make `plain` win).
    let mut events = Vec::new();
    for (user, r) in &test_group {
        let (Some(SendStatus::Sent), Some(id), Some(variant)) =
            (r.status, &r.ses_message_id, &r.variant)
        else {
            continue;
        };
        let who = Some((WEEK, user.as_str()));
        events.push(event("Delivery", who, id, json!({})));
        let later = mailflow::domain::campaign::rfc3339(
            time::OffsetDateTime::now_utc() + time::Duration::minutes(5),
        );
        if held_out(&format!("click-{variant}"), user, click_rate(variant)) {
            let click = json!({"userAgent": CHROME, "timestamp": later, "link": "https://o.example/go?t=x"});
            events.push(event("Click", who, id, json!({ "click": click })));
        }
        if variant == "plain" {
            let click = json!({"userAgent": SCANNER, "link": "https://o.example/go?t=x"});
            events.push(event("Click", who, id, json!({ "click": click })));
        }
    }
    env.deliver_ses_events(&pipeline, &events).await.unwrap();
    let before = mailctl::ops::status(sdk, &target, WEEK).await.unwrap();
    let undecided = before.experiment.as_ref().unwrap();
    assert!(undecided.decision.is_none());
    assert!(
        undecided
            .would_decide
            .as_deref()
            .unwrap()
            .contains("count is the best"),
        "{undecided:?}"
    );
    let plain = &undecided.variants[0];
    assert!(
        plain.human_clicks * 4 < plain.delivered,
        "the scanner's clicks are not people's: {plain:?}"
    );
    let emails_before: usize = env.sent().await.unwrap().values().map(Vec::len).sum();

    // Paused over the decision's time: the release waits, nothing is decided or sent.
    mailctl::control::pause(sdk, WEEK, "test", "checking the variants", &target)
        .await
        .unwrap();
    let fired_at = pipeline.release_next().await.unwrap();
    assert_eq!(fired_at, Some(recorded_decide_at(&env, &target).await));
    let paused = mailctl::ops::status(sdk, &target, WEEK).await.unwrap();
    assert!(paused.experiment.as_ref().unwrap().decision.is_none());
    assert_eq!(
        paused.local_time.as_ref().unwrap().still_waiting,
        waiting,
        "the rest is still held"
    );
    let emails_paused: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(emails_paused, emails_before);

    // Resumed: the waiting release comes back, decides and lets the rest go with `count`.
    mailctl::control::resume(sdk, WEEK, "test", &target)
        .await
        .unwrap();
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    let done = mailctl::ops::status(sdk, &target, WEEK).await.unwrap();
    // As `status` prints it (docs/experiments.md shows a run of this test).
    eprint!("{}", done.experiment.as_ref().unwrap().describe());
    let decision = done.experiment.as_ref().unwrap().decision.clone().unwrap();
    assert_eq!(
        (decision.winner.as_str(), decision.by),
        ("count", DecidedBy::Rule)
    );
    assert_eq!(done.local_time.as_ref().unwrap().still_waiting, 0);
    for queue in [names::USERS_QUEUE, names::EMAILS_QUEUE] {
        assert_eq!(env.depth(queue).await.unwrap(), 0, "{queue} is empty");
    }

    // Every user one email at most, the rest only `count`'s; one email per SENT record.
    let records = env.records(WEEK).await.unwrap();
    let sent = env.sent().await.unwrap();
    let mut rest_sent = 0;
    let mut by_variant: BTreeMap<String, usize> = BTreeMap::new();
    for (user, r) in &records {
        if r.status != Some(SendStatus::Sent) {
            continue;
        }
        *by_variant
            .entry(r.variant.clone().unwrap_or_default())
            .or_default() += 1;
        if recorded.assign(WEEK, user) == Assignment::Rest {
            rest_sent += 1;
            assert_eq!(r.variant.as_deref(), Some("count"), "{user}: {r:?}");
        }
    }
    assert!(rest_sent > 40, "{rest_sent} of the rest sent");
    // Every user held for the decision was let go and decided: sent `count`, held out, or
    // failed for their address; none of the rest is left without a record.
    let rest: Vec<_> = records
        .iter()
        .filter(|(user, _)| recorded.assign(WEEK, user) == Assignment::Rest)
        .collect();
    assert_eq!(rest.len() as u64, waiting, "every held user has a record");
    for (user, r) in rest {
        let ok = match r.status {
            Some(SendStatus::Sent) => r.variant.as_deref() == Some("count"),
            Some(SendStatus::Skipped) => r.skip_reason.as_deref() == Some("held_out"),
            Some(SendStatus::Failed) => true,
            _ => false,
        };
        assert!(ok, "{user}: {r:?}");
    }
    let emails: usize = sent.values().map(Vec::len).sum();
    assert_eq!(emails, by_variant.values().sum::<usize>(), "{by_variant:?}");
    for (to, messages) in &sent {
        assert_eq!(messages.len(), 1, "{to} got {} emails", messages.len());
    }
    // The campaign as `mailctl report` draws it, in a real browser: every plot drawn, nothing
    // fetched, the counts those of `status`.
    let html = mailctl::report::render(&done, &records.values().cloned().collect::<Vec<_>>());
    let page = mailflow_tests::browse("report.mjs", "campaign-report", &html, &[]).await;
    assert_eq!(page["requests"], json!([]), "the report fetches nothing");
    let figures = page["figures"].as_array().unwrap();
    // The rest, held for the decision, is let go with its lateness: a lateness plot too.
    assert_eq!(
        figures.len(),
        5,
        "rate, outcomes, lateness, opens and clicks, the experiment: {page}"
    );
    for figure in figures {
        assert!(figure["width"].as_f64().unwrap() > 300.0, "{figure}");
        let drawn = figure["lines"].as_u64().unwrap() + figure["bars"].as_u64().unwrap();
        assert!(drawn > 0, "{figure}");
    }
    assert_eq!(figures[4]["bars"], 3, "one bar per variant");
    assert_eq!(page["counts"]["sent"], done.sent);
    assert_eq!(
        page["counts"]["clicked by people"],
        done.engagement["humanClicked"]
    );
    let count_subjects = sent
        .values()
        .flatten()
        .filter(|m| {
            m.subject
                .as_deref()
                .is_some_and(|s| s.starts_with("[count]"))
        })
        .count();
    assert_eq!(count_subjects, by_variant["count"], "{by_variant:?}");
}

async fn recorded_decide_at(env: &mailflow_tests::TestEnv, target: &mailctl::ops::Target) -> i64 {
    let dynamo = aws_sdk_dynamodb::Client::new(&env.stack.sdk);
    mailctl::ops::campaigns_table(&dynamo, target)
        .record(WEEK)
        .await
        .unwrap()
        .and_then(|r| r.experiment)
        .and_then(|e| e.decide_at_ms)
        .unwrap()
}
