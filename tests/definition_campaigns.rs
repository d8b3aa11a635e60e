//! Campaigns that run a pushed definition, through every stage on the local stack: the
//! orders example (customers with ObjectId ids and nested fields, Decimal128 prices, dates)
//! pushed, seeded and sent exactly once; its skips counted by reason; a re-run sends
//! nothing twice; a definition that cannot run fails its run once, with the reason; a
//! definition that declares picks sends open-time slots that open.

use mailctl::definition_store::{self, Loaded, Stack};
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_local::seed::{seed_orders, OrdersOptions};
use mailflow_tests::{ses, test_env, TestEnv};
use std::path::Path;
use std::time::Duration;

pub(crate) const CAMPAIGN: &str = "orders-2026-W47";

/// The example `campaigns/<name>`, read and checked as `mailctl campaign push` does, and
/// pushed.
pub(crate) async fn push_example(env: &TestEnv, name: &str) -> Stack {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../campaigns")
        .join(name);
    let files = mailctl::definition::read_dir(&dir).unwrap_or_else(|e| panic!("{e:?}"));
    let definition = mailctl::definition::checked(&files).unwrap_or_else(|e| panic!("{e:?}"));
    let stack = Stack::connect(&env.stack.sdk, Some(&env.stack.prefix))
        .await
        .unwrap();
    let loaded = Loaded {
        name: definition.name.clone(),
        schedule: definition.schedule.clone(),
        files,
    };
    definition_store::push(&stack, &loaded, Some("test"), 1)
        .await
        .unwrap();
    stack
}

/// `customers` customers and their orders (`seed`), in the week of `CAMPAIGN`: what each
/// should get.
pub(crate) async fn seed_week(
    env: &TestEnv,
    customers: usize,
    seed: u64,
) -> mailflow_local::seed::OrdersReport {
    let options = OrdersOptions {
        customers,
        seed,
        domain: env.domain.clone(),
        window: Campaign::definition_window(CAMPAIGN, "orders", 7).unwrap(),
    };
    seed_orders(&env.db, &options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_orders_example_runs_through_every_stage_exactly_once() {
    let env = test_env("def_orders", |_| {}).await.unwrap();
    let stack = push_example(&env, "orders").await;
    let expected = seed_week(&env, 80, 11).await;
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();

    // Named by the definition alone, with the campaign id of its window rule.
    let event = serde_json::json!({"definition": "orders", "campaignId": CAMPAIGN});
    let report = pipeline
        .run(event.clone(), Duration::from_secs(600))
        .await
        .unwrap();
    let with_orders: Vec<(&String, &Vec<i64>)> = expected
        .audience
        .iter()
        .filter_map(|(id, e)| e.as_ref().ok().map(|totals| (id, totals)))
        .collect();
    assert!(with_orders.len() >= 10, "{}", with_orders.len());
    let created = &report.totals.create_emails;
    assert_eq!(created.rendered, with_orders.len(), "{created:?}");
    // Every skip by its reason, the definition's own (`no_orders`) among ours.
    let mut skipped = std::collections::BTreeMap::new();
    for e in expected.audience.values() {
        if let Err(reason) = e {
            *skipped.entry(reason.to_string()).or_insert(0usize) += 1;
        }
    }
    let counted: std::collections::BTreeMap<String, usize> = created
        .skipped
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(counted, skipped);
    assert_eq!(report.totals.send_email.sent, with_orders.len());

    // What the customers got: their orders, newest first, with prices and dates, in their
    // language; a hostile item name stays text.
    let sent = env.sent().await.unwrap();
    let messages: usize = sent.values().map(Vec::len).sum();
    assert_eq!(messages, with_orders.len());
    let mut german = 0;
    for message in sent.values().flatten() {
        let text = message.text.as_deref().unwrap_or_default();
        let html = message.html.as_deref().unwrap_or_default();
        assert!(text.contains("Total: ") || text.contains("Summe"), "{text}");
        assert!(
            !html.contains("<b>mug</b>"),
            "an item's markup reached the HTML"
        );
        if text.contains("Zoë's <b>mug</b>") {
            assert!(html.contains("Zoë&#x27;s &lt;b&gt;mug&lt;"), "{html}");
        }
        german += usize::from(
            message
                .subject
                .as_deref()
                .unwrap_or_default()
                .contains("Deine"),
        );
        let unsubscribe = message
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("List-Unsubscribe"));
        assert!(
            unsubscribe.is_some(),
            "every email has its one-click header"
        );
    }
    assert!(german > 0, "the German customers get the German templates");

    // The campaign is pinned to the version it ran; a re-run sends nothing twice.
    let record = stack.campaigns.record(CAMPAIGN).await.unwrap().unwrap();
    assert_eq!(
        record.definition,
        Some(PinnedDefinition {
            name: "orders".into(),
            version: 1
        })
    );
    let again = pipeline.run(event, Duration::from_secs(600)).await.unwrap();
    // (The totals add up since the pipeline was built.)
    assert_eq!(again.totals.send_email.sent, report.totals.send_email.sent);
    let sent_again: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(sent_again, with_orders.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_definition_whose_query_fails_fails_its_run_once_with_the_reason() {
    let env = test_env("def_fails", |_| {}).await.unwrap();
    let stack = Stack::connect(&env.stack.sdk, Some(&env.stack.prefix))
        .await
        .unwrap();
    // A pipeline MongoDB refuses at run time (an unknown expression operator), which the
    // offline check cannot know.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaigns/orders");
    let mut files = mailctl::definition::read_dir(&dir).unwrap();
    let toml = files.get_mut("campaign.toml").unwrap();
    *toml = toml.replacen(
        "\"$lt\": [\"$signedUpAt\"",
        "\"$noSuchOperator\": [\"$signedUpAt\"",
        1,
    );
    let loaded = Loaded {
        name: "orders".into(),
        schedule: None,
        files,
    };
    definition_store::push(&stack, &loaded, None, 1)
        .await
        .unwrap();
    seed_week(&env, 10, 3).await;
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let err = pipeline
        .start(serde_json::json!({"definition": "orders", "campaignId": CAMPAIGN}))
        .await
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("the campaign's definition failed"), "{text}");
    assert!(text.contains("noSuchOperator"), "{text}");
    assert!(env.sent().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_schedule_starts_the_campaign_of_its_period() {
    let env = test_env("def_schedule", |_| {}).await.unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaigns/orders");
    let mut files = mailctl::definition::read_dir(&dir).unwrap();
    let toml = files.get_mut("campaign.toml").unwrap();
    *toml = format!("schedule = \"cron(0 9 ? * MON *)\"\n{toml}");
    let stack = Stack::connect(&env.stack.sdk, Some(&env.stack.prefix))
        .await
        .unwrap();
    let loaded = Loaded {
        name: "orders".into(),
        schedule: Some("cron(0 9 ? * MON *)".into()),
        files,
    };
    definition_store::push(&stack, &loaded, None, 1)
        .await
        .unwrap();
    // The schedule is enabled, and what it invokes GetUsers with is what a firing sends.
    let schedule = stack
        .schedules
        .scheduler
        .get_schedule()
        .name(mailflow::adapters::definitions::schedule_name("orders"))
        .group_name(&stack.schedules.group)
        .send()
        .await
        .unwrap();
    assert_eq!(
        schedule.state(),
        Some(&aws_sdk_scheduler::types::ScheduleState::Enabled)
    );
    let input = schedule.target().unwrap().input().unwrap().to_owned();
    let template: serde_json::Value = serde_json::from_str(&input).unwrap();
    assert_eq!(
        template,
        serde_json::json!({"definition": "orders", "at": "<aws.scheduler.scheduled-time>"})
    );
    // Scheduler puts the firing's time in. A firing of Monday 2026-11-30 runs the week
    // before, whenever it arrives (a retry days later included).
    let event: serde_json::Value = serde_json::from_str(
        &input.replace("<aws.scheduler.scheduled-time>", "2026-11-30T09:00:00Z"),
    )
    .unwrap();
    let topic = mailflow::domain::topics::Topics::builtin()
        .resolve(Some("product-news"))
        .unwrap()
        .id
        .clone();
    let fired = time::macros::datetime!(2026-11-30 09:00 UTC);
    let campaign = Campaign::for_definition("orders", 7, topic, fired);
    assert_eq!(campaign.id.as_str(), "orders-2026-W48");
    let options = OrdersOptions {
        customers: 30,
        seed: 5,
        domain: env.domain.clone(),
        window: campaign.window,
    };
    let expected = seed_orders(&env.db, &options).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let report = pipeline.run(event, Duration::from_secs(600)).await.unwrap();
    assert_eq!(report.get_users["campaignId"], campaign.id.as_str());
    let with_orders = expected.audience.values().filter(|e| e.is_ok()).count();
    assert_eq!(report.totals.send_email.sent, with_orders);
    let record = stack
        .campaigns
        .record(campaign.id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.definition.map(|d| d.version), Some(1));
}

/// Milliseconds since the epoch of an RFC 3339 instant.
fn ms(at: &str) -> i64 {
    let t =
        time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).unwrap();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_definitions_campaign_goes_out_at_each_customers_local_time() {
    let env = test_env("def_local", |_| {}).await.unwrap();
    push_example(&env, "orders").await;
    let expected = seed_week(&env, 60, 13).await;
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    // 07:00 in Berlin, where the customers' `prefs.tz` puts them; those without one go at
    // 09:00 in the fallback zone.
    pipeline.clock.set(ms("2026-11-23T06:00:00Z"));
    let event = serde_json::json!({"definition": "orders", "campaignId": CAMPAIGN,
        "localTime": "09:00", "fallbackZone": "America/Sao_Paulo"});
    let summary = pipeline.start(event).await.unwrap();
    let counts = &summary["localTime"];
    assert!(counts["timezoneMissing"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(pipeline.totals.lock().unwrap().send_email.sent, 0);
    assert!(
        env.sent().await.unwrap().is_empty(),
        "nobody before their slot"
    );

    // The slots' releases render with the version the run pinned.
    pipeline.drain(Duration::from_secs(900)).await.unwrap();
    let with_orders = expected.audience.values().filter(|e| e.is_ok()).count();
    let sent: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    assert_eq!(sent, with_orders);
    let records = env.records(CAMPAIGN).await.unwrap();
    let late = records
        .values()
        .filter(|r| r.status == Some(mailflow::domain::ledger::SendStatus::Sent))
        .count();
    assert_eq!(late, with_orders);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_definitions_campaigns_share_the_frequency_caps() {
    let env = test_env("def_caps", |o| {
        o.parameters.insert("FrequencyCaps".into(), "1/16h".into());
    })
    .await
    .unwrap();
    push_example(&env, "digest").await;
    push_example(&env, "announcement").await;
    let digest = "digest-2026-W47";
    let announcement = "announcement-2026-W47";
    let week = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let seeded = env.seed(80, &week).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    // Both start together: their emails to one user race for the one the cap allows.
    for (name, id) in [("digest", digest), ("announcement", announcement)] {
        pipeline
            .start(serde_json::json!({"definition": name, "campaignId": id}))
            .await
            .unwrap();
    }
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    let records = |id: &'static str| {
        let env = &env;
        async move { env.records(id).await.unwrap() }
    };
    let (d, a) = (records(digest).await, records(announcement).await);
    let sent = |r: Option<&SendRecord>| {
        r.is_some_and(|r| r.status == Some(mailflow::domain::ledger::SendStatus::Sent))
    };
    let (mut capped, mut both_audiences) = (0, 0);
    for user in d.keys().chain(a.keys()) {
        let (in_d, in_a) = (d.get(user), a.get(user));
        assert!(!(sent(in_d) && sent(in_a)), "{user} got both emails");
        if in_d.is_some() && in_a.is_some() {
            both_audiences += 1;
        }
        for r in [in_d, in_a].into_iter().flatten() {
            capped += usize::from(r.skip_reason.as_deref() == Some("frequency_cap"));
        }
    }
    assert!(both_audiences > 10, "{both_audiences}");
    assert!(capped > 0);
    let emails: usize = env.sent().await.unwrap().values().map(Vec::len).sum();
    let sent_records = d
        .values()
        .chain(a.values())
        .filter(|r| sent(Some(r)))
        .count();
    assert_eq!(emails, sent_records, "one email per SENT record");
    assert!(!seeded.audience.is_empty());
}

/// A definition that declares a source of picks (the digest's `[open_content]`) gets the
/// open-time slots: its emails carry three cards, and the first fetch of one freezes the
/// picks under the definition's campaign, as the compiled digest's do.
#[tokio::test(flavor = "multi_thread")]
async fn a_definition_with_picks_sends_open_time_slots_that_open() {
    let mut env = test_env("def_picks", |_| {}).await.unwrap();
    push_example(&env, "digest").await;
    let campaign = "digest-2026-W47";
    let week = Campaign::from_id("weekly-2026-W47", None).unwrap();
    env.seed(30, &week).await.unwrap();
    let clock: std::sync::Arc<dyn mailflow::ports::Clock> =
        std::sync::Arc::new(mailflow::ports::SystemClock);
    let open_content = mailflow_local::pipeline::serve_open_content(&env.stack, 0, clock)
        .await
        .unwrap();
    env.stack
        .set_function_url(mailflow_local::names::OPEN_CONTENT, open_content.url());
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    pipeline
        .run(
            serde_json::json!({"definition": "digest", "campaignId": campaign}),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let sent = env.sent().await.unwrap();
    let html = sent
        .values()
        .flatten()
        .find_map(|m| m.html.clone())
        .expect("an email was sent");
    let cards: Vec<String> = html
        .match_indices(&format!("{}pick?t=", open_content.url()))
        .map(|(i, _)| {
            let rest = &html[i..];
            rest[..rest.find('"').unwrap()].replace("&amp;", "&")
        })
        .collect();
    assert_eq!(cards.len(), 3, "{html}");
    let fetch = |url: String| async move {
        mailflow_local::http::request(&url, "GET", &[("User-Agent", "Mozilla/5.0")], b"")
            .await
            .unwrap()
    };
    let first = fetch(cards[0].clone()).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    // The first fetch froze the picks: a second draws the same card.
    let again = fetch(cards[0].clone()).await;
    assert_eq!(again.body, first.body);
    use mailflow::ports::OpenContentStore;
    let table = env
        .stack
        .table_name(mailflow_local::names::OPEN_CONTENT_TABLE)
        .unwrap();
    let counters = mailflow::adapters::open_content::OpenContentTable::new(env.dynamo(), table)
        .counters(&mailflow::domain::campaign::CampaignId::parse(campaign).unwrap())
        .await
        .unwrap();
    assert_eq!(counters.picks_frozen, 1, "{counters:?}");
}
