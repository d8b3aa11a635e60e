//! Local-time delivery on the local stack: a campaign at 09:00 in every user's own zone,
//! over every UTC offset from +14 to -12, through the waiting table and the release
//! schedules, on the simulator's clock (it jumps to the next schedule when the queues are
//! quiet, so a day of slots runs in minutes).

use aws_sdk_dynamodb::types::AttributeValue;
use mailflow::domain::campaign::{Campaign, Window};
use mailflow::domain::ledger::SendStatus;
use mailflow::domain::local_time::{
    parse_date, Delivery, LocalDelivery, PassedTime, ZoneField, ZoneName,
};
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_local::seed::assign_timezones;
use mailflow_tests::{ses, test_env, TestEnv};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How late a slot may be released (the tolerance of docs/local-time.md).
const TOLERANCE_MS: i64 = 30 * 60 * 1000;

fn ms(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn delivery(started: &str) -> LocalDelivery {
    LocalDelivery {
        local_time: "09:00".parse().unwrap(),
        send_date: parse_date("2026-11-23").unwrap(),
        fallback_zone: ZoneName::parse("America/Sao_Paulo").unwrap(),
        passed_time: PassedTime::SendNow,
        started_at_ms: ms(started),
        window_until_ms: None,
    }
}

/// The waiting table's items of `campaign`: user id -> slot instant.
async fn held(env: &TestEnv, campaign: &str) -> BTreeMap<String, i64> {
    let table = env.stack.table_name(names::WAITING_TABLE).unwrap();
    let mut out = BTreeMap::new();
    let mut start = None;
    loop {
        let page = env
            .dynamo()
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let (Some(AttributeValue::S(slot)), Some(AttributeValue::S(user))) =
                (item.get("slot"), item.get("userId"))
            else {
                continue;
            };
            let mut parts = slot.split('#');
            if parts.next() != Some(campaign) {
                continue;
            }
            if let Some(Ok(at)) = parts.next().map(str::parse::<i64>) {
                out.insert(user.clone(), at);
            }
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return out;
        }
    }
}

/// A stack with `users` seeded for W47, each given a zone (or none, or an unusable one).
struct Zoned {
    env: TestEnv,
    campaign: Campaign,
    seeded: mailflow_local::seed::SeedReport,
    zones: BTreeMap<String, ZoneField>,
    pipeline: mailflow_local::pipeline::LocalPipeline<mailflow::adapters::ses::SesMailer>,
    target: mailctl::ops::Target,
}

async fn zoned(test: &str, users: usize) -> Zoned {
    let env = test_env(test, |_| {}).await.unwrap();
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let seeded = env.seed(users, &campaign).await.unwrap();
    let ids: Vec<String> = seeded.addresses.keys().cloned().collect();
    let zones = assign_timezones(&env.db, &ids).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    Zoned {
        env,
        campaign,
        seeded,
        zones,
        pipeline,
        target,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_at_nine_in_every_zone_goes_out_slot_by_slot_exactly_once() {
    let Zoned {
        env,
        campaign,
        seeded,
        zones,
        pipeline,
        target,
    } = zoned("local-time", 200).await;
    let id = campaign.id.as_str();

    // Thirty seconds before Kiritimati's 09:00 (UTC+14, the first): its users go with an
    // SQS delay, everyone else waits for their slot, the last (UTC-12) 26 hours later.
    let start = "2026-11-22T18:59:30Z";
    pipeline.clock.set(ms(start));
    let event =
        json!({"campaignId": id, "localTime": "09:00", "fallbackZone": "America/Sao_Paulo"});
    let summary = pipeline.start(event.clone()).await.unwrap();
    let counts = &summary["localTime"];
    assert_eq!(summary["complete"], true, "{summary}");

    // What each audience user should wait for, by the rules (the domain's, unit-tested
    // table by table), and why their zone was replaced.
    let rules = delivery(start);
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let (mut missing, mut invalid, mut delayed) = (0, 0, 0);
    for user in seeded.audience.keys() {
        let (Delivery::At(at), source) = rules.delivery(&zones[user]) else {
            panic!("{user}: nothing has passed at the start");
        };
        match source {
            mailflow::domain::local_time::ZoneSource::FallbackMissing => missing += 1,
            mailflow::domain::local_time::ZoneSource::FallbackInvalid => invalid += 1,
            mailflow::domain::local_time::ZoneSource::Own => {}
        }
        // Due within SQS's longest delay (15 minutes): enqueued with it, not held.
        if at - ms(start) <= 900_000 {
            delayed += 1;
        } else {
            expected.insert(user.clone(), at);
        }
    }
    assert!(missing > 0 && invalid > 0 && delayed > 0);
    assert_eq!(counts["timezoneMissing"], missing, "{summary}");
    assert_eq!(counts["timezoneInvalid"], invalid, "{summary}");
    assert_eq!(counts["delayed"], delayed, "{summary}");
    // Everyone else waits in their own slot.
    assert_eq!(held(&env, id).await, expected);
    let slots: BTreeSet<i64> = expected.values().copied().collect();
    assert!(slots.len() >= 30, "{} slots", slots.len());
    let status = mailctl::ops::status(&env.stack.sdk, &target, id)
        .await
        .unwrap();
    let local = status.local_time.clone().unwrap();
    assert_eq!(local.still_waiting as usize, expected.len());
    assert_eq!(
        local.waiting_by_hour.first().unwrap().utc_hour,
        "2026-11-22T19:00Z"
    );
    assert_eq!(
        local.waiting_by_hour.last().unwrap().utc_hour,
        "2026-11-23T21:00Z"
    );

    // The whole day, slot after slot.
    pipeline.drain(Duration::from_secs(900)).await.unwrap();

    let sent = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        assert_eq!(
            sent.get(&seeded.addresses[user]).map_or(0, Vec::len),
            1,
            "{user}"
        );
    }
    let records = env.records(id).await.unwrap();
    assert!(records
        .values()
        .all(|r| matches!(r.status, Some(SendStatus::Sent) | Some(SendStatus::Failed))));
    // Each email went no earlier than its user's 09:00, and within the tolerance.
    for (user, record) in records
        .iter()
        .filter(|(_, r)| r.status == Some(SendStatus::Sent))
    {
        let late = record
            .late_ms
            .unwrap_or_else(|| panic!("{user}: no lateness recorded"));
        assert!(
            (0..TOLERANCE_MS).contains(&late),
            "{user}: sent {late} ms after"
        );
    }
    let status = mailctl::ops::status(&env.stack.sdk, &target, id)
        .await
        .unwrap();
    assert_eq!(status.state, "finished", "{status:?}");
    let local = status.local_time.clone().unwrap();
    assert_eq!(local.still_waiting, 0);
    assert_eq!(local.slots_released, slots.len());
    assert_eq!(local.held as usize, expected.len());
    let run = &local.latest_run.as_ref().unwrap().counts;
    assert_eq!(
        (run.timezone_missing, run.timezone_invalid),
        (missing, invalid)
    );
    let late = local.lateness.clone().unwrap();
    assert!(late.p50_ms <= late.p99_ms && late.p99_ms <= late.max_ms && late.max_ms < TOLERANCE_MS);
    // Never before the slot's instant, never later than the tolerance.
    let report = mailflow::adapters::waiting::read_report(
        &env.dynamo(),
        &target.waiting_table,
        &campaign.id,
    )
    .await
    .unwrap()
    .unwrap();
    for release in &report.releases {
        let late = release.released_at_ms - release.slot_ms;
        assert!((0..TOLERANCE_MS).contains(&late), "{release:?}");
    }
    let released: u64 = report.releases.iter().map(|r| r.users).sum();
    assert_eq!(released as usize, expected.len());
    eprintln!("{}", local.describe());
    // The campaign as `mailctl report` draws it, in a real browser: lateness by zone, one
    // bar for each of the ten zones with the most emails, nothing fetched.
    let html = mailctl::report::render(&status, &records.values().cloned().collect::<Vec<_>>());
    let args = ["--name", "local-time-report"];
    let page = mailflow_tests::browse("report.mjs", "local-time-report", &html, &args).await;
    assert_eq!(page["requests"], json!([]), "the report fetches nothing");
    let zones: BTreeSet<_> = records
        .values()
        .filter(|r| r.late_ms.is_some())
        .map(|r| r.zone.clone().expect("each claim records its zone"))
        .collect();
    assert!(zones.len() >= 30, "{zones:?}");
    let lateness = page["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["caption"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Local-time lateness")
        })
        .unwrap_or_else(|| panic!("no lateness plot: {page}"));
    assert_eq!(lateness["bars"], 10, "{lateness}");
    assert_eq!(page["counts"]["sent"], status.sent);
    for dlq in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq}");
    }

    // A re-run and a resend of the same campaign, after the window closed: every local time
    // has passed now (send now, the default) or, east of where 09:00 came before the close,
    // is the next day's; the ledger sends nobody twice.
    let emails = |sent: &std::collections::HashMap<String, Vec<_>>| -> usize {
        sent.values().map(Vec::len).sum()
    };
    let before = emails(&sent);
    for again in [event.clone(), {
        let mut resend = event.clone();
        resend["includeFailed"] = json!(true);
        resend
    }] {
        let summary = pipeline.start(again).await.unwrap();
        let counted = |field: &str| summary["localTime"][field].as_u64().unwrap();
        assert_eq!(
            counted("passedSentNow") + counted("nextDayAfterWindow"),
            seeded.audience.len() as u64,
            "{summary}"
        );
        pipeline.drain(Duration::from_secs(900)).await.unwrap();
        assert_eq!(emails(&env.sent().await.unwrap()), before);
    }
}

/// Three runs of one campaign: the first skips the users whose 09:00 had passed, a re-run
/// and a resend send them at once. `status` then counts the campaign, never the runs added
/// up: sent and held as the sends and waiting tables have them, the first run's skips
/// shown as that run's only.
#[tokio::test(flavor = "multi_thread")]
async fn status_counts_the_campaign_not_its_runs_added_up() {
    let Zoned {
        env,
        campaign,
        seeded,
        pipeline,
        target,
        ..
    } = zoned("local-time-runs", 200).await;
    let id = campaign.id.as_str();
    // 10:16 UTC: 09:00 has passed from UTC-1 east; the next slot (UTC-2) is 44 minutes
    // away, so nobody goes with an SQS delay (it runs at real pace on this stack).
    pipeline.clock.set(ms("2026-11-23T10:16:00Z"));
    let run = |policy: &str, resend: bool| {
        let mut event = json!({"campaignId": id, "localTime": "09:00",
            "fallbackZone": "America/Sao_Paulo", "passedTime": policy});
        if resend {
            event["includeFailed"] = json!(true);
        }
        event
    };
    let first = pipeline.start(run("skip", false)).await.unwrap();
    let skipped = first["localTime"]["passedSkipped"].as_u64().unwrap();
    assert!(skipped > 0, "{first}");
    pipeline.drain(Duration::from_secs(900)).await.unwrap();
    for again in [run("send-now", false), run("send-now", true)] {
        let summary = pipeline.start(again).await.unwrap();
        assert_eq!(summary["localTime"]["passedSkipped"], 0, "{summary}");
        pipeline.drain(Duration::from_secs(900)).await.unwrap();
    }

    // Every deliverable user has their one email: the first run's skips were sent later.
    let sent = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        let emails = sent.get(&seeded.addresses[user]).map_or(0, Vec::len);
        assert_eq!(emails, 1, "{user}");
    }
    let records = env.records(id).await.unwrap();
    let sent_records = (records.values())
        .filter(|r| r.status == Some(SendStatus::Sent))
        .count();
    assert_eq!(sent_records, seeded.deliverable().count());

    let status = mailctl::ops::status(&env.stack.sdk, &target, id)
        .await
        .unwrap();
    assert_eq!(status.state, "finished", "{status:?}");
    assert_eq!(status.sent, sent_records);
    let local = status.local_time.clone().unwrap();
    assert_eq!(local.sent as usize, sent_records);
    assert_eq!(local.still_waiting, 0);
    assert_eq!(local.runs.len(), 3, "{local:?}");
    // Held: the users the waiting table had, each once a slot, all released.
    let report = mailflow::adapters::waiting::read_report(
        &env.dynamo(),
        &target.waiting_table,
        &campaign.id,
    )
    .await
    .unwrap()
    .unwrap();
    let released: u64 = report.releases.iter().map(|r| r.users).sum();
    assert_eq!(local.held, released, "{local:?}");
    assert!(local.held as usize <= sent_records);
    let held_by = |run: &mailctl::local_time::RunCounts| run.counts.waiting.values().sum::<u64>();
    if local.runs[1..].iter().all(|r| held_by(r) == 0) {
        assert_eq!(local.held, held_by(&local.runs[0]), "{local:?}");
    }
    // The latest run's decisions are its own; the first run's skips are labelled as its.
    let latest = &local.latest_run.as_ref().unwrap().counts;
    assert_eq!(latest.passed_skipped, 0);
    let text = mailctl::status::view::describe(&status);
    eprintln!("{text}");
    assert!(
        text.contains(&format!(
            "  local time, the campaign: {sent_records} sent, "
        )),
        "{text}"
    );
    for line in text
        .lines()
        .filter(|l| l.contains(&format!("{skipped} skipped")))
    {
        assert!(line.starts_with("    earlier run (started "), "{line}");
    }
    for dlq in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_holds_every_slot_until_the_resume_and_a_cancel_releases_nobody_more() {
    let Zoned {
        env,
        campaign: week,
        seeded,
        zones,
        pipeline,
        target,
    } = zoned("local-time-control", 200).await;
    let sdk = &env.stack.sdk;
    let window: Window = week.window;
    let event = |id: &str| {
        json!({
            "campaignId": id,
            "since": mailflow::domain::campaign::rfc3339(window.since),
            "until": mailflow::domain::campaign::rfc3339(window.until),
            "localTime": "09:00",
            "fallbackZone": "America/Sao_Paulo",
        })
    };
    let start = "2026-11-22T12:00:00Z";
    let rules = delivery(start);
    let slot_of = |user: &String| match rules.delivery(&zones[user]).0 {
        Delivery::At(at) => at,
        other => panic!("{user}: {other:?}"),
    };
    let sent_to =
        |sent: &std::collections::HashMap<String, Vec<mailflow_local::ses_record::SentMessage>>,
         user: &String| { sent.get(&seeded.addresses[user]).map_or(0, Vec::len) };

    // Paused after the first slot; three more slots come and go while it is paused.
    pipeline.clock.set(ms(start));
    pipeline.start(event("local-pause")).await.unwrap();
    let first = pipeline.release_next().await.unwrap().unwrap();
    pipeline
        .drain_queues(Duration::from_secs(300))
        .await
        .unwrap();
    mailctl::control::pause(
        sdk,
        "local-pause",
        "test",
        "checking the first slot",
        &target,
    )
    .await
    .unwrap();
    let mut paused_slots = Vec::new();
    for _ in 0..3 {
        paused_slots.push(pipeline.release_next().await.unwrap().unwrap());
    }
    let status = mailctl::ops::status(sdk, &target, "local-pause")
        .await
        .unwrap();
    assert_eq!(status.state, "paused");
    let local = status.local_time.unwrap();
    let waiting_in_paused: u64 = seeded
        .audience
        .keys()
        .filter(|u| paused_slots.contains(&slot_of(u)))
        .count() as u64;
    assert!(waiting_in_paused > 0);
    assert!(local.still_waiting >= waiting_in_paused, "{local:?}");
    // However long the pause: no held user carries a TTL attribute, so none expires.
    let table = env.stack.table_name(names::WAITING_TABLE).unwrap();
    let items = env.dynamo().scan().table_name(table).send().await.unwrap();
    assert!(items.count() > 0);
    assert!(
        items.items().iter().all(|i| !i.contains_key("expiresAt")),
        "{items:?}"
    );
    let sent = env.sent().await.unwrap();
    for user in seeded.audience.keys().filter(|u| slot_of(u) != first) {
        assert_eq!(
            sent_to(&sent, user),
            0,
            "{user} sent while paused or before their slot"
        );
    }
    mailctl::control::resume(sdk, "local-pause", "test", &target)
        .await
        .unwrap();
    // The rest of the day at once (slot by slot is the test above): every remaining slot is
    // due, fires and sends its users, however late.
    let last_slot = seeded.audience.keys().map(slot_of).max().unwrap();
    pipeline.clock.set(last_slot);
    pipeline.drain(Duration::from_secs(900)).await.unwrap();
    let sent = env.sent().await.unwrap();
    for (user, _) in seeded.deliverable() {
        assert_eq!(sent_to(&sent, user), 1, "{user}");
    }
    let status = mailctl::ops::status(sdk, &target, "local-pause")
        .await
        .unwrap();
    assert_eq!(status.local_time.unwrap().still_waiting, 0);

    // Cancelled after its first slot: nobody of a later slot is released or sent to.
    let records_before = env.records("local-cancel").await.unwrap().len();
    assert_eq!(records_before, 0);
    // A campaign of its own, two days on, with a send date two days later too.
    pipeline.clock.set(ms(start) + 2 * 86_400_000);
    let mut cancel_event = event("local-cancel");
    cancel_event["sendDate"] = json!("2026-11-25");
    pipeline.start(cancel_event).await.unwrap();
    pipeline.release_next().await.unwrap().unwrap();
    pipeline
        .drain_queues(Duration::from_secs(300))
        .await
        .unwrap();
    let after_first = env.records("local-cancel").await.unwrap().len();
    assert!(after_first > 0);
    mailctl::control::cancel(sdk, "local-cancel", "test", "wrong content", &target)
        .await
        .unwrap();
    // Every later slot fires, and releases nobody (its waiting users are dropped).
    let fired_before = pipeline.releases_fired().len();
    pipeline.clock.set(last_slot + 2 * 86_400_000);
    pipeline.drain(Duration::from_secs(600)).await.unwrap();
    assert!(pipeline.releases_fired().len() > fired_before + 20);
    assert_eq!(
        env.records("local-cancel").await.unwrap().len(),
        after_first
    );
    let status = mailctl::ops::status(sdk, &target, "local-cancel")
        .await
        .unwrap();
    assert_eq!(status.state, "cancelled");
    // Their slots' releases dropped them from the waiting room: nobody waits for ever.
    assert_eq!(status.stranded(), 0);
    assert_eq!(status.local_time.unwrap().still_waiting, 0);
    for dlq in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq}");
    }
}

/// Users whose slot's schedules are lost (deleted as soon as GetUsers makes them) stay held:
/// `status` calls them stranded once the sweep would have run, and `mailctl release`'s
/// events (each slot's sweep, now) send them, once each, leaving nobody waiting.
#[tokio::test(flavor = "multi_thread")]
async fn users_stranded_by_lost_schedules_are_released_by_mailctl_release() {
    let Zoned {
        env,
        campaign,
        seeded,
        pipeline,
        target,
        ..
    } = zoned("local-stranded", 24).await;
    let sdk = &env.stack.sdk;
    pipeline.clock.set(ms("2026-11-22T12:00:00Z"));
    let event = json!({"campaignId": "weekly-2026-W47", "localTime": "09:00", "fallbackZone": "America/Sao_Paulo"});
    let summary = pipeline.start(event).await.unwrap();
    let held: u64 = mailflow_tests::total(&summary["localTime"]["waiting"]);
    assert!(held > 0, "{summary}");
    // Every schedule gone.
    let scheduler = aws_sdk_scheduler::Client::new(sdk);
    let group = env.stack.names[names::RELEASE_SCHEDULE_GROUP].clone();
    let listed = scheduler
        .list_schedules()
        .group_name(&group)
        .send()
        .await
        .unwrap();
    for schedule in listed.schedules() {
        scheduler
            .delete_schedule()
            .group_name(&group)
            .name(schedule.name().unwrap_or_default())
            .send()
            .await
            .unwrap();
    }
    pipeline.clock.set(ms("2026-11-25T12:00:00Z"));
    pipeline.drain(Duration::from_secs(300)).await.unwrap();
    let status = mailctl::ops::status(sdk, &target, "weekly-2026-W47")
        .await
        .unwrap();
    let local = status.local_time.clone().unwrap();
    assert_eq!(local.still_waiting, held, "{local:?}");
    assert_eq!(status.stranded(), held, "{local:?}");

    let report = mailflow::adapters::waiting::read_report(
        &env.dynamo(),
        &target.waiting_table,
        &campaign.id,
    )
    .await
    .unwrap()
    .unwrap();
    let now_ms = mailflow::ports::Clock::now_ms(pipeline.clock.as_ref());
    let events = mailctl::local_time::release_events("weekly-2026-W47", &report, now_ms);
    assert!(!events.is_empty());
    for event in events {
        pipeline.start(event).await.unwrap();
    }
    pipeline.drain(Duration::from_secs(300)).await.unwrap();
    let status = mailctl::ops::status(sdk, &target, "weekly-2026-W47")
        .await
        .unwrap();
    assert_eq!(status.stranded(), 0);
    assert_eq!(status.local_time.unwrap().still_waiting, 0);
    let sent = env.sent().await.unwrap();
    let emails: usize = sent.values().map(Vec::len).sum();
    assert!(emails > 0);
    assert!(sent.values().all(|m| m.len() == 1), "nobody twice");
    assert!(emails <= seeded.audience.len());
}

/// Release schedules invoke GetUsers as their own role, checked on the local stack against
/// template.yaml's policies with GetUsers named as CloudFormation names it, under a short
/// stack name and a 40-character one. (Past 34 characters CloudFormation shortens the
/// generated function name to Lambda's 64, so a `${AWS::StackName}-GetUsersFunction*`
/// grant stops matching and every release is refused.)
#[tokio::test(flavor = "multi_thread")]
async fn releases_reach_get_users_under_a_short_and_a_40_character_stack_name() {
    for long in [false, true] {
        let env = test_env("release-iam", |options| {
            // The unique part ("t<time>p<pid>n<count>"), alone or padded to 40.
            let unique = options.prefix.split('-').next().unwrap().to_owned();
            options.prefix = match long {
                false => unique,
                true => format!("{unique}-{}", "long-stack-name-".repeat(3))
                    .chars()
                    .take(40)
                    .collect(),
            };
        })
        .await
        .unwrap();
        let length = env.stack.prefix.len();
        assert!(if long { length == 40 } else { length <= 34 }, "{length}");
        let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
        let seeded = env.seed(12, &campaign).await.unwrap();
        let ids: Vec<String> = seeded.addresses.keys().cloned().collect();
        assign_timezones(&env.db, &ids).await.unwrap();
        let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
        pipeline.clock.set(ms("2026-11-22T18:59:30Z"));
        let event = json!({"campaignId": campaign.id.as_str(), "localTime": "09:00",
            "fallbackZone": "America/Sao_Paulo"});
        pipeline.start(event).await.unwrap();
        // Fails with the refused request if the schedules' role may not invoke GetUsers.
        pipeline.drain(Duration::from_secs(600)).await.unwrap();
        assert!(
            !pipeline.releases_fired().is_empty(),
            "{length}: no release"
        );
        let sent = env.sent().await.unwrap();
        for (user, _) in seeded.deliverable() {
            let emails = sent.get(&seeded.addresses[user]).map_or(0, Vec::len);
            assert_eq!(emails, 1, "{length}-character stack name: {user}");
        }
    }
}
