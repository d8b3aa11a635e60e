//! Pushed campaign definitions against the local stack: versions in the campaigns table,
//! the recurring schedule each definition's push keeps in step, the pin a campaign's first
//! run writes, and `mailctl campaign push|list|show` end to end.

use mailctl::definition_store::{self, Loaded, Stack};
use mailflow::adapters::campaigns::RUNNING;
use mailflow::adapters::definitions::{schedule_name, ScheduleChange};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow::domain::definition::Files;
use mailflow::ports::definitions::{Push, Pushed};
use mailflow::ports::{CampaignStates, DefinitionError, DefinitionStore};
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{binary, ses, test_env, TestEnv};
use std::time::Duration;

const WEEKLY: &str = "cron(0 9 ? * MON *)";

fn folder(body: &str, schedule: Option<&str>) -> Loaded {
    let schedule_line = schedule.map_or(String::new(), |s| format!("schedule = \"{s}\"\n"));
    Loaded {
        name: "digest".into(),
        schedule: schedule.map(str::to_owned),
        files: Files::from([
            (
                "campaign.toml".to_owned(),
                format!("name = \"digest\"\n{schedule_line}topic = \"digest\"\n"),
            ),
            ("templates/en/body.txt.j2".to_owned(), body.to_owned()),
            (
                "templates/fr/subject.txt.j2".to_owned(),
                "Vos nouveaux abonnés · <b>{{ user.name }}</b> ✓\r\n".to_owned(),
            ),
        ]),
    }
}

/// The digest example (`campaigns/digest`), its description marked with `n`: version `n`.
fn digest_example(n: u32) -> Loaded {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaigns/digest");
    let mut files = mailctl::definition::read_dir(&dir).unwrap();
    let toml = files.get_mut("campaign.toml").unwrap();
    *toml = toml.replacen("description = \"", &format!("description = \"v{n} "), 1);
    Loaded {
        name: "digest".into(),
        schedule: None,
        files,
    }
}

async fn stack(env: &TestEnv) -> Stack {
    Stack::connect(&env.stack.sdk, Some(&env.stack.prefix))
        .await
        .unwrap()
}

async fn schedule(
    stack: &Stack,
    name: &str,
) -> Option<aws_sdk_scheduler::operation::get_schedule::GetScheduleOutput> {
    stack
        .schedules
        .scheduler
        .get_schedule()
        .name(schedule_name(name))
        .group_name(&stack.schedules.group)
        .send()
        .await
        .ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn pushes_make_versions_and_keep_the_schedule_in_step() {
    let env = test_env("def_versions", |_| {}).await.unwrap();
    let stack = stack(&env).await;
    assert!(definition_store::list(&stack).await.unwrap().is_empty());

    let one = folder("Hello {{ user.name }}", Some(WEEKLY));
    let first = definition_store::push(&stack, &one, Some("ana"), 1_000)
        .await
        .unwrap();
    assert!(
        matches!(&first.pushed, Pushed::Stored(i) if i.version == 1),
        "{first:?}"
    );
    assert_eq!(first.schedule, Ok(ScheduleChange::Created));
    assert!(
        first.lines()[0].starts_with("digest: version 1 (sha256 "),
        "{:?}",
        first.lines()
    );
    let created = schedule(&stack, "digest").await.expect("schedule created");
    assert_eq!(created.schedule_expression(), Some(WEEKLY));
    let target = created.target().unwrap();
    assert_eq!(target.arn(), stack.schedules.target_arn);
    assert_eq!(target.role_arn(), stack.schedules.role_arn);
    let input: serde_json::Value = serde_json::from_str(target.input().unwrap()).unwrap();
    assert_eq!(
        input,
        serde_json::json!({"definition": "digest", "at": "<aws.scheduler.scheduled-time>"})
    );

    // The same files again: nothing stored.
    let again = definition_store::push(&stack, &one, Some("bo"), 2_000)
        .await
        .unwrap();
    assert_eq!(again.lines()[0], "digest: unchanged (version 1)");
    assert_eq!(again.pushed.info().pushed_by.as_deref(), Some("ana"));

    // Other files and another schedule: version 2, the schedule updated.
    let two = folder("Bonjour {{ user.name }}", Some("cron(0 7 ? * TUE *)"));
    let second = definition_store::push(&stack, &two, None, 3_000)
        .await
        .unwrap();
    assert_eq!(second.pushed.info().version, 2);
    assert_eq!(second.schedule, Ok(ScheduleChange::Updated));
    let updated = schedule(&stack, "digest").await.unwrap();
    assert_eq!(updated.schedule_expression(), Some("cron(0 7 ? * TUE *)"));

    // Version 1 is what was pushed, byte for byte (CRLF, non-ASCII and markup included).
    let v1 = stack.definitions.get("digest", 1).await.unwrap();
    assert_eq!(v1.files, one.files);
    assert_eq!(v1.info.schedule.as_deref(), Some(WEEKLY));
    assert_eq!(
        stack.definitions.get("digest", 2).await.unwrap().files,
        two.files
    );
    let err = stack.definitions.get("digest", 3).await.unwrap_err();
    assert_eq!(
        err,
        DefinitionError::NoVersion {
            name: "digest".into(),
            version: 3,
            latest: 2
        }
    );
    assert_eq!(
        stack.definitions.get("nope", 1).await.unwrap_err(),
        DefinitionError::Unknown("nope".into())
    );

    let versions = stack.definitions.versions("digest").await.unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        [1, 2]
    );
    let listed = definition_store::list(&stack).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].latest_version, 2);
    assert_eq!(listed[0].schedule.as_deref(), Some("cron(0 7 ? * TUE *)"));
    let shown = definition_store::show(&stack, "digest", Some(1), true)
        .await
        .unwrap();
    assert!(
        shown.contains(&"==> templates/en/body.txt.j2 <==".to_owned()),
        "{shown:?}"
    );

    // No schedule any more: its schedule goes, and nothing else in the group or elsewhere.
    let other = Loaded {
        name: "promo".into(),
        ..folder("Promo", Some(WEEKLY))
    };
    definition_store::push(&stack, &other, None, 4_000)
        .await
        .unwrap();
    let three = definition_store::push(&stack, &folder("Hello", None), None, 5_000)
        .await
        .unwrap();
    assert_eq!(three.schedule, Ok(ScheduleChange::Removed));
    assert!(schedule(&stack, "digest").await.is_none());
    assert!(schedule(&stack, "promo").await.is_some());
    let four = definition_store::push(&stack, &folder("Hello!", None), None, 6_000)
        .await
        .unwrap();
    assert_eq!(four.schedule, Ok(ScheduleChange::None));

    // The definitions' items never pass for campaigns.
    assert!(stack
        .campaigns
        .campaigns_in(RUNNING)
        .await
        .unwrap()
        .is_empty());
    assert!(stack.campaigns.pinned_campaigns().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pushes_at_once_never_share_a_version_and_a_push_too_big_stores_nothing() {
    let env = test_env("def_race", |_| {}).await.unwrap();
    let stack = std::sync::Arc::new(stack(&env).await);
    let pushes = (0..6).map(|i| {
        let stack = stack.clone();
        tokio::spawn(async move {
            let files = folder(&format!("body {i}"), None).files;
            let push = Push {
                name: "digest",
                files: &files,
                schedule: None,
                at_ms: i,
                by: None,
            };
            stack.definitions.push(push).await
        })
    });
    let mut versions = Vec::new();
    for result in futures::future::join_all(pushes).await {
        match result.unwrap() {
            Ok(pushed) => versions.push(pushed.info().version),
            // Five attempts may all lose under six pushes at once: refused whole, never shared.
            Err(DefinitionError::Contended { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    versions.sort_unstable();
    let stored = stack.definitions.versions("digest").await.unwrap();
    assert_eq!(
        versions,
        stored.iter().map(|v| v.version).collect::<Vec<_>>()
    );
    assert_eq!(versions, (1..=versions.len() as u32).collect::<Vec<_>>());
    assert!(versions.len() >= 2, "{versions:?}");

    // Noise deflate cannot shrink: over one item's 400 KB.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let noise: String = (0..600_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect();
    let big = Loaded {
        name: "big".into(),
        ..folder(&noise, Some(WEEKLY))
    };
    let err = definition_store::push(&stack, &big, None, 1)
        .await
        .unwrap_err();
    assert!(matches!(err, DefinitionError::TooBig { .. }), "{err}");
    assert_eq!(stack.definitions.latest("big").await.unwrap(), None);
    assert!(schedule(&stack, "big").await.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_keeps_its_pinned_version_after_a_new_push() {
    let env = test_env("def_pin", |_| {}).await.unwrap();
    let stack = stack(&env).await;
    definition_store::push(&stack, &digest_example(1), None, 1)
        .await
        .unwrap();
    // A campaign of the digest's definition: its id starts with the definition's name.
    let window = Campaign::from_id("weekly-2026-W47", None).unwrap().window;
    let campaign = Campaign::from_id("digest-2026-W47", Some(window)).unwrap();
    let id = campaign.id.as_str();
    env.seed(3, &campaign).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    // GetUsers, under its own role, pins version 1 on the first run.
    pipeline
        .run(
            serde_json::json!({"campaignId": id, "definition": "digest", "definitionVersion": 1}),
            Duration::from_secs(300),
        )
        .await
        .unwrap();
    let v1 = PinnedDefinition {
        name: "digest".into(),
        version: 1,
    };
    let record = || async { stack.campaigns.record(id).await.unwrap().unwrap() };
    assert_eq!(record().await.definition, Some(v1.clone()));

    definition_store::push(&stack, &digest_example(2), None, 2)
        .await
        .unwrap();
    // A resend naming the definition but no version, and a registration offering version 2
    // (as a later start would): the record keeps 1.
    pipeline
        .run(
            serde_json::json!({"campaignId": id, "definition": "digest"}),
            Duration::from_secs(300),
        )
        .await
        .unwrap();
    let v2 = PinnedDefinition {
        name: "digest".into(),
        version: 2,
    };
    let after = stack
        .campaigns
        .register(&campaign, &Default::default(), None, Some(&v2), 3)
        .await
        .unwrap();
    assert_eq!(after.definition, Some(v1.clone()));
    assert_eq!(record().await.definition, Some(v1));

    let listed = definition_store::list(&stack).await.unwrap();
    assert_eq!(listed[0].latest_version, 2);
    assert_eq!(listed[0].last_campaign.as_deref(), Some(id));
    assert_eq!(listed[0].last_campaign_version, Some(1));
    let shown = definition_store::show(&stack, "digest", None, false)
        .await
        .unwrap();
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("v1 ") && l.contains(&format!("ran {id}"))),
        "{shown:?}"
    );
}

fn mailctl(args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("mailctl"))
        .args(args)
        .output()
        .expect("mailctl runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_refuses_a_bad_folder_and_pushes_lists_and_shows_a_good_one() {
    let env = test_env("def_cli", |_| {}).await.unwrap();
    let prefix = env.stack.prefix.as_str();
    let dir = std::env::temp_dir().join(format!("{prefix}-definition"));
    std::fs::create_dir_all(dir.join("templates/en")).unwrap();
    let dir_arg = dir.to_str().unwrap();

    // No campaign.toml: refused, exit 2, nothing stored.
    std::fs::write(dir.join("templates/en/body.txt.j2"), "Hello").unwrap();
    let out = mailctl(&["campaign", "push", dir_arg, "--prefix", prefix]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("campaign.toml: missing"), "{stderr}");
    assert!(stderr.contains("nothing was pushed"), "{stderr}");
    let stack = stack(&env).await;
    assert!(stack.definitions.list().await.unwrap().is_empty());

    // The digest example (weekly): a definition that passes every check.
    std::fs::remove_dir_all(&dir).unwrap();
    let example = mailctl::repo_root().join("campaigns/digest");
    let copied = std::process::Command::new("cp")
        .args(["-r", example.to_str().unwrap(), dir_arg])
        .status()
        .unwrap();
    assert!(copied.success());
    let toml = std::fs::read_to_string(dir.join("campaign.toml")).unwrap();
    assert!(
        toml.contains(&format!("schedule = \"{WEEKLY}\"\n")),
        "{toml}"
    );
    let push = || {
        mailctl(&[
            "campaign", "push", dir_arg, "--prefix", prefix, "--by", "ana",
        ])
    };
    let out = push();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("digest: version 1 (sha256 "), "{stdout}");
    assert!(
        stdout.contains(&format!("schedule {WEEKLY} created")),
        "{stdout}"
    );
    let out = push();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("digest: unchanged (version 1)"));

    let out = mailctl(&["campaign", "list", "--prefix", prefix]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("digest") && l.contains("v1") && l.contains(WEEKLY)),
        "{stdout}"
    );

    let out = mailctl(&[
        "campaign",
        "show",
        "digest",
        "--version",
        "1",
        "--files",
        "--prefix",
        prefix,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("by ana"), "{stdout}");
    let subject = std::fs::read_to_string(example.join("templates/en/subject.txt.j2")).unwrap();
    assert!(
        stdout.contains(&format!("==> templates/en/subject.txt.j2 <==\n{subject}")),
        "{stdout}"
    );
    let out = mailctl(&[
        "campaign",
        "show",
        "digest",
        "--version",
        "9",
        "--prefix",
        prefix,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no version 9 (its latest is 1)"));
    std::fs::remove_dir_all(&dir).ok();
}
