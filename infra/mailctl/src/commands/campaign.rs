//! `run` and `resend`: start a campaign, and on the local stack run it to its end and say
//! how it ended (exit status 1 when users are FAILED, dead-lettered or left in a DLQ).

use super::{provision_local, CampaignArgs, GuardrailArgs, LocalTimeArgs, TargetArgs};
use anyhow::{bail, Context, Result};
use mailctl::ops::{self, Target};
use mailflow::adapters::ses::SesMailer;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::local_time::PassedTime;
use mailflow_local::pipeline::{lock, LocalPipeline, PipelineOptions};
use std::time::Duration;

/// What `run --definition` names: a pushed definition and its version.
#[derive(Clone, Debug, Default)]
pub struct RunDefinition {
    pub name: Option<String>,
    /// The version to run (None: the pinned one, or the latest for a first run).
    pub version: Option<u32>,
    /// Run with `version` although the campaign is pinned to another.
    pub repin: bool,
}

/// `run`: the campaign the schedule would run now, or `campaign`; with a definition, the
/// campaign its window rule makes now (`Campaign::for_definition`), or `campaign`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: Option<String>,
    window: &CampaignArgs,
    definition: &RunDefinition,
    local: &LocalTimeArgs,
    guardrails: &GuardrailArgs,
    t: &TargetArgs,
) -> Result<()> {
    let mut event = match &definition.name {
        Some(name) => {
            definition_start(sdk, template, campaign, window, name, definition, t).await?
        }
        None => {
            let campaign = match campaign {
                Some(id) => super::resolve_campaign(sdk, t, &id, window).await?,
                None => Campaign::for_schedule(time::OffsetDateTime::now_utc()),
            };
            super::start_event(&campaign)
        }
    };
    local.apply(&mut event);
    guardrails.apply(&mut event)?;
    start(sdk, template, t, event).await
}

/// GetUsers' event for a run of pushed definition `name`: the campaign id known before the
/// start (the version's window rule, read from the stack's store: the one the campaign is
/// pinned to, the one named, or the latest), its window and topic, and the definition as
/// GetUsers takes it (`definition`, `definitionVersion`, `repin`).
async fn definition_start(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: Option<String>,
    window: &CampaignArgs,
    name: &str,
    definition: &RunDefinition,
    t: &TargetArgs,
) -> Result<serde_json::Value> {
    if matches!(
        mailctl::definition_source::Source::parse(name, None)?,
        mailctl::definition_source::Source::Folder(_)
    ) {
        bail!(
            "run takes a pushed definition's name, not a folder ({name}): `mailctl campaign push {name}` first, then `mailctl run --definition NAME`"
        );
    }
    if let Some(prefix) = &t.prefix {
        // The store is the stack's campaigns table (provisioning is idempotent).
        provision_local(sdk, template, prefix, &t.database).await?;
    }
    let target = super::target(sdk, t).await?;
    let dynamo = mailflow::adapters::dynamodb_client(sdk);
    let pinned = match &campaign {
        Some(id) => {
            mailflow::domain::campaign::CampaignId::parse(id)?;
            ops::campaigns_table(&dynamo, &target)
                .record(id)
                .await?
                .and_then(|r| r.definition)
                .filter(|pin| pin.name == name)
        }
        None => None,
    };
    let version = definition.version.or(pinned.map(|pin| pin.version));
    let table =
        mailflow::adapters::definitions::DefinitionsTable::new(dynamo, &target.campaigns_table);
    let chosen = mailctl::definition_source::Chosen::pushed(table, name, version).await?;
    let rule = &chosen.loaded.definition;
    let campaign = match campaign {
        Some(id) => super::resolve_campaign_of(sdk, t, &id, window, Some(rule)).await?,
        None => super::new_definition_campaign(rule, window)?,
    };
    eprintln!(
        "{}: definition {} (version {} of {})",
        campaign.id,
        name,
        chosen.pinned.version,
        if definition.version.is_some() {
            "the one named"
        } else if version.is_some() {
            "the campaign's pin"
        } else {
            "the latest"
        }
    );
    let mut event = super::start_event(&campaign);
    event["definition"] = name.into();
    if let Some(version) = definition.version {
        event["definitionVersion"] = version.into();
    }
    if definition.repin {
        event["repin"] = true.into();
    }
    Ok(event)
}

/// What a resend does besides sending to users without a SENT record.
pub struct Resend<'a> {
    /// Also users whose send FAILED (after their data was fixed).
    pub include_failed: bool,
    /// Reopen a cancelled campaign first (who reopens it), and include its CANCELLED users.
    pub reopen: Option<&'a str>,
    /// Local-time delivery given for this resend.
    pub local: LocalTimeArgs,
    /// Everyone now, even a campaign whose run started with a local time.
    pub at_once: bool,
    /// A later deadline (the others are fixed when the campaign first starts).
    pub guardrails: GuardrailArgs,
}

/// `resend`: the campaign again; only users without a SENT record get an email. With
/// `reopen` (who), a cancelled campaign is reopened first and its CANCELLED users included.
pub async fn resend(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: &str,
    window: &CampaignArgs,
    options: Resend<'_>,
    t: &TargetArgs,
) -> Result<()> {
    let resolved = super::resolve_campaign(sdk, t, campaign, window).await?;
    if let Some(by) = options.reopen {
        let target = super::target(sdk, t).await?;
        eprintln!(
            "{}",
            mailctl::control::reopen(sdk, campaign, by, &target).await?
        );
    }
    let mut event = super::start_event(&resolved);
    event["includeFailed"] = options.include_failed.into();
    event["includeCancelled"] = options.reopen.is_some().into();
    options.guardrails.apply(&mut event)?;
    if options.local.local_time.is_some() {
        options.local.apply(&mut event);
    } else if !options.at_once {
        if let Some(recorded) = recorded_delivery(sdk, template, t, &resolved).await? {
            // The users a resend exists for are mostly past their local time by now: the
            // run's skip (or next-day) would pass them by again, so they go at once.
            eprintln!(
                "resending at the local time its run started with: {} on {} (fallback {}); users whose local time has passed are sent at once (the run's policy was {}); --at-once sends everyone now",
                recorded.local_time,
                recorded.send_date,
                recorded.fallback_zone.as_str(),
                recorded.passed_time.as_str()
            );
            LocalTimeArgs {
                local_time: Some(recorded.local_time.to_string()),
                send_date: Some(recorded.send_date.to_string()),
                fallback_zone: Some(recorded.fallback_zone.as_str().to_owned()),
                passed_time: Some(PassedTime::SendNow.as_str().to_owned()),
            }
            .apply(&mut event);
        }
    }
    start(sdk, template, t, event).await
}

/// `release`: sweeps now every slot of the campaign whose sweep time (slot + 15 min) has
/// passed and that still has users waiting (GetUsers' release event, as the slot's sweep
/// schedule sends it: it enqueues them and takes them out of the waiting table; the ledger
/// sends each once). On AWS it invokes GetUsers per slot; with --prefix it runs the
/// pipeline to the end.
pub async fn release(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: &str,
    t: &TargetArgs,
) -> Result<()> {
    let id = mailflow::domain::campaign::CampaignId::parse(campaign)?;
    if let Some(prefix) = &t.prefix {
        provision_local(sdk, template, prefix, &t.database).await?;
    }
    let target = super::target(sdk, t).await?;
    // Paused: the releases wait for the resume; cancelled: a sweep would drop them unsent.
    mailctl::control::refuse_if_held(sdk, &target, campaign).await?;
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let report = mailflow::adapters::waiting::read_report(&dynamo, &target.waiting_table, &id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_context(|| format!("{campaign} is not a local-time campaign: nobody waits"))?;
    let now_ms = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    let events = mailctl::local_time::release_events(campaign, &report, now_ms);
    if events.is_empty() {
        println!(
            "{campaign}: no slot whose sweep time has passed has users waiting; nothing to release"
        );
        return Ok(());
    }
    let Some(prefix) = &t.prefix else {
        for event in &events {
            println!("{}", invoke_get_users(sdk, &target, event).await?);
        }
        return Ok(());
    };
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let pipeline =
        LocalPipeline::build(stack, PipelineOptions::default(), SesMailer::from_config).await?;
    for event in events {
        println!("{}", pipeline.start(event).await?);
    }
    pipeline.drain(Duration::from_secs(3600)).await?;
    let status = ops::status(sdk, &target, campaign).await?;
    let still = status.local_time.as_ref().map_or(0, |l| l.still_waiting);
    eprintln!("{campaign}: released; {still} users still waiting");
    fail_on_problems(&status)
}

/// The local-time delivery the campaign's latest run started with (the waiting table), if
/// it was one.
async fn recorded_delivery(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    campaign: &Campaign,
) -> Result<Option<mailflow::domain::local_time::LocalDelivery>> {
    if let Some(prefix) = &t.prefix {
        // A prefix not provisioned yet has no waiting table (provisioning is idempotent).
        provision_local(sdk, template, prefix, &t.database).await?;
    }
    let target = super::target(sdk, t).await?;
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let report =
        mailflow::adapters::waiting::read_report(&dynamo, &target.waiting_table, &campaign.id)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(report.and_then(|r| r.delivery))
}

/// Invokes the deployed GetUsers with `event` and waits for its answer (its summary).
pub(super) async fn invoke_get_users(
    sdk: &aws_config::SdkConfig,
    target: &Target,
    event: &serde_json::Value,
) -> Result<String> {
    let function = match target.get_users_function.clone() {
        Some(function) => function,
        None => mailctl::stack_outputs::GET_USERS_FUNCTION.read()?,
    };
    let out = aws_sdk_lambda::Client::new(sdk)
        .invoke()
        .function_name(&function)
        .payload(aws_sdk_lambda::primitives::Blob::new(serde_json::to_vec(
            event,
        )?))
        .send()
        .await
        .with_context(|| format!("invoking {function}"))?;
    let payload = out
        .payload
        .map(|p| String::from_utf8_lossy(p.as_ref()).into_owned())
        .unwrap_or_default();
    if let Some(error) = out.function_error {
        bail!("{function} failed ({error}): {payload}");
    }
    Ok(payload)
}

/// Starts GetUsers with `event`: on AWS by invoking the function, locally by running the
/// whole pipeline to completion.
async fn start(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    event: serde_json::Value,
) -> Result<()> {
    let campaign_id = event["campaignId"].as_str().unwrap_or_default().to_owned();
    let Some(prefix) = &t.prefix else {
        let target = Target::from_env()?;
        mailctl::control::refuse_if_held(sdk, &target, &campaign_id).await?;
        println!("{}", invoke_get_users(sdk, &target, &event).await?);
        return Ok(());
    };
    let started = std::time::Instant::now();
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let target = Target::from_prefix(sdk, prefix).await?;
    mailctl::control::refuse_if_held(sdk, &target, &campaign_id).await?;
    let pipeline =
        LocalPipeline::build(stack, PipelineOptions::default(), SesMailer::from_config).await?;
    let campaign = campaign_id;
    let get_users = pipeline.start(event).await?;
    drain_with_progress(&pipeline, &get_users).await?;
    let totals = lock(&pipeline.totals).clone();
    // The ledger and the queues, not this run's counters, say how the campaign ended.
    let status = ops::status(sdk, &target, &campaign).await?;
    // A local-time run ends once nothing is queued and no release schedule is pending: a
    // user still held then has nothing left to release them (a cancelled campaign's are
    // dropped by design; a run at once holds nobody and is not asked).
    let local_time_run = get_users.get("localTime").is_some();
    let still_held = match &status.local_time {
        Some(l) if local_time_run && status.state != "cancelled" => l.still_waiting,
        _ => 0,
    };
    let send = &totals.send_email;
    println!(
        "{}",
        serde_json::json!({
            "getUsers": get_users,
            "rendered": totals.create_emails.rendered,
            "skipped": totals.create_emails.skipped,
            "sent": send.sent,
            "suppressedDuplicates": send.duplicates,
            "failed": send.failed,
            "previouslyFailed": send.previously_failed,
            "skippedByGuardrails": send.skipped,
            "wallTimeSeconds": started.elapsed().as_secs(),
            "campaign": {
                "sent": status.sent,
                "failed": status.failed,
                "failedByReason": status.failed_by_reason,
                "deadLettered": status.dead_lettered,
                "deadLetteredByReason": status.dead_lettered_by_reason,
                "skipped": status.skipped,
                "usersDlq": status.users_dlq,
                "emailsDlq": status.emails_dlq,
                "continuationDlq": status.continuation_dlq,
                "stillHeld": still_held,
            },
        })
    );
    let problems = fail_on_problems(&status);
    if still_held > 0 {
        if let Err(err) = &problems {
            eprintln!("mailctl: {err}");
        }
        bail!(
            "campaign {campaign}: {still_held} users are still held for their local time with no release pending (their slots' schedules are gone); `mailctl release --campaign {campaign}` releases them now"
        );
    }
    problems
}

/// Runs the campaign's consumers to the end, with its progress on stderr: users decided
/// (rendered and sent, failed or skipped) of those GetUsers enqueued or held for their local
/// time, known in full once its first run was complete.
async fn drain_with_progress(
    pipeline: &LocalPipeline<SesMailer>,
    get_users: &serde_json::Value,
) -> Result<()> {
    let enqueued = get_users["usersEnqueued"].as_u64().unwrap_or(0);
    let held: u64 = get_users["localTime"]["waiting"]
        .as_object()
        .map_or(0, |slots| slots.values().filter_map(|n| n.as_u64()).sum());
    let total = (get_users["complete"] == true).then_some(enqueued + held);
    let progress = mailctl::progress::Progress::new("run");
    let watch = async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let totals = lock(&pipeline.totals).clone();
            let send = &totals.send_email;
            // Left out by CreateEmails (no email) or by a guardrail (recorded SKIPPED).
            let skipped: usize = totals.create_emails.skipped.values().sum::<usize>()
                + send.skipped.values().sum::<usize>()
                + send.previously_skipped;
            let decided = send.sent
                + send.failed
                + send.previously_failed
                + send.duplicates
                + send.cancelled
                + skipped;
            let detail = format!(
                "{} sent, {} failed, {skipped} skipped",
                send.sent, send.failed
            );
            // A user SQS delivered twice is counted twice (a suppressed duplicate): never
            // more than the total.
            let decided = total.map_or(decided as u64, |t| t.min(decided as u64));
            progress.report(decided, total, "users", &detail);
        }
    };
    let drained = tokio::select! {
        drained = pipeline.drain(Duration::from_secs(24 * 3600)) => drained,
        () = watch => unreachable!("the watch never ends"),
    };
    progress.finish();
    drained.map(|_| ())
}

/// Exit status 1 (with the counts) when a campaign ended with users not sent to: FAILED,
/// dead-lettered, or messages left in a DLQ.
pub fn fail_on_problems(s: &mailctl::status::CampaignStatus) -> Result<()> {
    if s.problems() == 0 {
        return Ok(());
    }
    bail!(
        "campaign {} ended with {} FAILED, {} dead-lettered, {} messages in the users DLQ, {} in the emails DLQ, {} in the continuation DLQ and {} users stranded in the waiting room after their slot's sweep (reasons above; `mailctl status` lists them)",
        s.campaign_id,
        s.failed,
        s.dead_lettered,
        s.users_dlq,
        s.emails_dlq,
        s.continuation_dlq.unwrap_or(0),
        s.stranded()
    )
}
