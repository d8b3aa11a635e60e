//! `plan` and a run agree user by user: the same audience, started the same way, is run by
//! GetUsers over the in-memory ports and predicted by `plan`'s `Prediction`, and every user
//! is placed alike (now, delayed to the same second, held for the same slot, or never), on
//! mixed campaigns: local time with the next-day policy, quiet hours that defer, a holdout
//! and an A/B experiment whose rest waits for its decision.

use super::*;
use mailflow::config::GetUsersConfig;
use mailflow::ports::memory::directory::{MemoryDirectory, User};
use mailflow::ports::memory::{
    MemoryCampaigns, MemoryClock, MemoryOutbox, MemoryResults, MemoryWaitingRoom,
};
use mailflow::ports::MAX_DELAY_SECONDS;
use mailflow::runtime::Invocation;
use mailflow::stages::get_users::{parse_request, GetUsers, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Where a user ended up, as a run leaves them and as `plan` predicts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    Now,
    /// On the users queue with this SQS delay (seconds).
    Delayed(u32),
    Slot(i64),
    Never,
}

const ZONES: [Option<&str>; 10] = [
    Some("Asia/Tokyo"),
    Some("America/New_York"),
    Some("Europe/London"),
    Some("Asia/Kathmandu"),
    Some("Europe/Berlin"),
    Some("America/Los_Angeles"),
    Some("Pacific/Kiritimati"),
    Some("Mars/Olympus_Mons"),
    Some(""),
    None,
];

/// 300 users with new followers in the campaign's week, in every zone above, half with
/// ObjectId-shaped ids.
fn audience(campaign: &Campaign) -> MemoryDirectory {
    let at = campaign.window.since + time::Duration::hours(1);
    (0..300).fold(MemoryDirectory::default(), |d, i| {
        let id = match i % 2 {
            0 => format!("{:024x}", 0x6560_0000_0000_0000_0000_0000u128 + i as u128),
            _ => format!("user-{i}"),
        };
        let mut user = User::named("Ada", "ada@example.com");
        user.timezone = ZONES[i % ZONES.len()].map(str::to_owned);
        d.user(&id, user).follow("f1", &id, at)
    })
}

fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        ("MONGODB_URI", "mongodb://127.0.0.1:1"),
        ("USERS_QUEUE_URL", "http://users"),
        ("CONTINUATION_QUEUE_URL", "http://continuation"),
        ("CAMPAIGNS_TABLE_NAME", "campaigns"),
        ("SENDS_TABLE_NAME", "sends"),
        ("WAITING_TABLE_NAME", "waiting"),
        ("RELEASE_SCHEDULE_GROUP", "releases"),
        (
            "RELEASE_SCHEDULER_ROLE_ARN",
            "arn:aws:iam::000000000000:role/scheduler",
        ),
        (
            "RELEASE_DEAD_LETTER_ARN",
            "arn:aws:sqs:us-east-1:000000000000:dlq",
        ),
        ("TRACK_OPENS_AND_CLICKS", "true"),
        ("HOLDOUT_PERCENT", "10"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// Runs `start` through GetUsers at `now_ms` and through `plan`'s prediction, and compares
/// every user. Returns how many users each place got, and how many the plan holds out.
async fn agree(
    start: Value,
    extra: &[(&str, &str)],
    now_ms: i64,
) -> (BTreeMap<&'static str, u32>, u32) {
    let campaign = Campaign::from_id("weekly-2026-W47", None).unwrap();
    let env = env(extra);
    let source = |k: &str| env.get(k).cloned();
    let config = GetUsersConfig::from_source(&source).unwrap();
    let (users, waiting) = (
        Arc::new(MemoryOutbox::default()),
        Arc::new(MemoryWaitingRoom::default()),
    );
    let stage = GetUsers::new(
        audience(&campaign),
        users.clone(),
        Arc::new(MemoryOutbox::default()),
        MemoryCampaigns::default(),
        waiting.clone(),
        Arc::new(MemoryResults::default()),
        config.clone(),
    )
    .with_clock(MemoryClock::at(now_ms));
    let invocation = Invocation::with_timeout("r1", Duration::from_secs(900));
    stage.handle(start.clone(), &invocation).await.unwrap();

    // What the run did with each user.
    let user_of = |body: &str| serde_json::from_str::<UserMessage>(body).unwrap().user_id;
    let mut run: BTreeMap<String, Placed> = BTreeMap::new();
    for body in users.bodies() {
        run.insert(user_of(&body), Placed::Now);
    }
    for (delay, body) in users.delayed.lock().unwrap().iter() {
        run.insert(user_of(body), Placed::Delayed(*delay));
    }
    for ((_, slot), held) in waiting.held.lock().unwrap().iter() {
        for user in held.keys() {
            run.insert(user.clone(), Placed::Slot(*slot));
        }
    }

    // What `plan` predicts, from the same start as `mailctl plan` reads it.
    let delivery = match parse_request(start, &config.local_time, now_ms).unwrap() {
        Request::Run(run) => run.delivery,
        _ => unreachable!("a start"),
    };
    let request = mailflow::domain::guardrails::GuardrailRequest::default();
    let defaults = mailflow::config::guardrail_defaults(&source).unwrap();
    let guardrails = Guardrails {
        campaign: request.initial(defaults, now_ms),
        caps: Default::default(),
        quiet: config.quiet_hours,
        fallback_zone: config.local_time.fallback_zone.clone(),
        history: (),
        experiment: Some(Experiment::parse(EXPERIMENT).unwrap()),
    };
    let predict = Prediction::new(&campaign, delivery.as_ref(), &guardrails, now_ms);
    let digest = mailflow::ports::DefinitionCampaign {
        loaded: mailflow::ports::LoadedDefinition::bundled().unwrap(),
        campaign: campaign.id.to_string(),
        window: campaign.window,
        topic: Topics::builtin()
            .get(campaign.topic.as_str())
            .unwrap()
            .clone(),
    };
    let mut members = audience(&campaign).definition_audience(&digest, None);
    let (mut places, mut held_out) = (BTreeMap::new(), 0);
    while let Some(member) = members.next().await.unwrap() {
        let decision = predict.of(&member, now_ms);
        held_out += u32::from(decision.held_out);
        let predicted = match decision.place {
            Place::Now { .. } => Placed::Now,
            Place::Delayed(at) => {
                let seconds = ((at - now_ms).max(0) + 999) / 1000;
                Placed::Delayed(seconds.min(i64::from(MAX_DELAY_SECONDS)) as u32)
            }
            Place::Slot(at) => Placed::Slot(at),
            Place::Never => Placed::Never,
        };
        let user = member.id.to_string();
        let done = run.get(&user).copied().unwrap_or(Placed::Never);
        assert_eq!(done, predicted, "user {user} in {:?}", member.zone);
        let kind = match predicted {
            Placed::Now => "now",
            Placed::Delayed(_) => "delayed",
            Placed::Slot(_) => "slot",
            Placed::Never => "never",
        };
        *places.entry(kind).or_default() += 1;
    }
    (places, held_out)
}

const EXPERIMENT: &str =
    r#"{"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 30, "waitHours": 2}"#;

fn start(local_time: bool) -> Value {
    let experiment: Value = serde_json::from_str(EXPERIMENT).unwrap();
    let mut start = json!({"campaignId": "weekly-2026-W47", "experiment": experiment});
    if local_time {
        start["localTime"] = "09:00".into();
        start["sendDate"] = "2026-12-01".into();
        start["passedTime"] = "next-day".into();
    }
    start
}

#[tokio::test]
async fn plan_and_a_local_time_run_place_every_user_alike() {
    // 08:50 UTC: London's and the fallback zone's 09:00 are 10 minutes away (delayed),
    // Tokyo's, Berlin's and Kathmandu's have passed (the next day's), New York's and Los
    // Angeles' are hours away. With quiet hours 08:45-09:20 every local time moves to 09:20
    // (the rest's too, after the decision); without them, the near ones are delayed.
    let now = at("2026-12-01T08:50:00Z");
    let quiet = [
        ("QUIET_HOURS", "08:45-09:20"),
        ("QUIET_HOURS_POLICY", "defer"),
    ];
    let (places, held_out) = agree(start(true), &quiet, now).await;
    assert!(places.get("slot").is_some_and(|n| *n > 100), "{places:?}");
    assert!(held_out > 10, "{held_out} of 300 in a 10 % holdout");
    let (places, _) = agree(start(true), &[], now).await;
    assert!(places.get("delayed").is_some_and(|n| *n > 20), "{places:?}");
}

#[tokio::test]
async fn plan_and_a_run_without_local_time_place_every_user_alike() {
    // 20:00 UTC: quiet hours (22:00-07:00) are on in Tokyo, Kathmandu and Kiritimati, whose
    // users wait for their end; the rest of the experiment waits for its decision.
    let now = at("2026-12-01T20:00:00Z");
    let quiet = [
        ("QUIET_HOURS", "22:00-07:00"),
        ("QUIET_HOURS_POLICY", "defer"),
    ];
    let (places, _) = agree(start(false), &quiet, now).await;
    assert!(places.get("now").is_some_and(|n| *n > 50), "{places:?}");
    assert!(places.get("slot").is_some_and(|n| *n > 100), "{places:?}");
}
