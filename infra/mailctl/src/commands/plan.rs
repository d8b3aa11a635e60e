//! `mailctl plan`: what a campaign would send, counted and sampled, with its guardrails,
//! experiment and local-time delivery as a start would settle them; nothing is sent.

use super::preview::function_envs;
use super::{provision_local, DefinitionArgs, TargetArgs};
use anyhow::Result;
use mailflow::config::{CreateEmailsConfig, RateControlConfig, SendEmailConfig};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::render::check_experiment;
use mailflow::domain::experiment::ExperimentError;
use mailflow::domain::send_rate::SendRate;
use mailflow::ports::{DefinitionCampaign, UserDirectory};
use std::collections::BTreeMap;

/// What `plan` shows besides the counts.
pub struct PlanOptions {
    /// Emails shown in full.
    pub samples: usize,
    pub json: bool,
    pub local: super::LocalTimeArgs,
    /// The guardrails a first start would give (a started campaign keeps its own).
    pub guardrails: super::GuardrailArgs,
    /// The definition it plans (None: the one the campaign is pinned to, or the digest).
    pub definition: DefinitionArgs,
}

/// What `campaign` would send, counted and sampled; nothing is enqueued, claimed or sent.
pub async fn plan(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    campaign: Option<String>,
    window: &super::CampaignArgs,
    options: &PlanOptions,
    t: &TargetArgs,
) -> Result<()> {
    let envs = function_envs(sdk, template, t).await?;
    let config = CreateEmailsConfig::from_source(&|k: &str| envs.create.get(k).cloned())?;
    let chosen = super::definition_campaign(
        sdk,
        t,
        &config.campaigns_table_name,
        campaign.as_deref(),
        window,
        &options.definition,
    )
    .await?;
    let mut stage = mailctl::compose::create_emails(sdk, &envs.create).await?;
    let (campaign, chosen, scheduled) = match (chosen, campaign) {
        (Some((campaign, chosen)), _) => {
            stage = stage.with_definitions(chosen.loader.clone());
            (campaign, Some(chosen), false)
        }
        (None, Some(id)) => (
            super::resolve_campaign(sdk, t, &id, window).await?,
            None,
            false,
        ),
        (None, None) => (
            Campaign::for_schedule(time::OffsetDateTime::now_utc()),
            None,
            true,
        ),
    };
    let delivery = local_delivery(sdk, template, t, &campaign, &options.local, scheduled).await?;
    let directory = mailflow::adapters::mongo_directory::MongoDirectory::new(
        mailflow::adapters::mongo::connect(&config.mongo, sdk, "mailctl").await?,
    );
    // The index the audience scan needs, checked as GetUsers checks it at its cold start.
    directory.check_indexes().await?;
    let control = RateControlConfig::from_source(&|k: &str| envs.control.get(k).cloned())?;
    let quota = mailflow::adapters::ses::send_quota(sdk).await;
    let send = SendEmailConfig::from_source(&|k: &str| envs.send.get(k).cloned())?;
    let guardrails = mailctl::guardrails::Guardrails {
        experiment: plan_experiment(
            sdk,
            template,
            t,
            &campaign,
            chosen.as_ref(),
            &options.guardrails,
        )
        .await?,
        campaign: campaign_guardrails(sdk, template, t, &campaign, &options.guardrails).await?,
        caps: send.caps.clone(),
        quiet: send.quiet_hours,
        fallback_zone: send.fallback_zone.clone(),
        history: mailflow::adapters::sends::SendsLedger::new(
            aws_sdk_dynamodb::Client::new(sdk),
            &send.sends_table_name,
            send.retention_days,
        ),
    };
    let topic = mailflow::domain::topics::Topics::builtin().get(campaign.topic.as_str())?;
    let definition = chosen.as_ref().map(|chosen| DefinitionCampaign {
        loaded: chosen.loaded.clone(),
        campaign: campaign.id.to_string(),
        window: campaign.window,
        topic: topic.clone(),
    });
    let mut plan = mailctl::plan::plan(
        &stage,
        &directory,
        &campaign,
        definition.as_ref(),
        options.samples,
        mailctl::send_rate::Sending {
            rate: SendRate::with_quota_share(
                control.send_rate_per_second,
                control.ses_quota_share,
                &quota,
            ),
            environment: control.send_email,
            composer: control.create_emails,
            composers_ceiling: control.create_emails_ceiling,
            quota,
            public_urls: control.public_urls,
            stack: control.stack(),
            account: mailctl::capacity::account(sdk, &send.sends_table_name).await,
        },
        delivery.as_ref(),
        guardrails,
    )
    .await?;
    if let Some(chosen) = &chosen {
        plan.definition = Some(chosen.describe());
    }
    if options.json {
        println!("{}", serde_json::to_string(&plan)?);
    } else {
        print!("{}", mailctl::plan::view::describe(&plan));
    }
    Ok(())
}

/// The experiment `plan` counts with: the one recorded with the first start, else the one
/// given, refused as GetUsers would refuse its start: without consent to tracking (no click
/// would ever be noted), or when it does not fit the templates that would render it (the
/// definition's, `chosen`, else the bundled digest's). A recorded one is checked again when `chosen`
/// is another version than the campaign's pin, as GetUsers checks it on a repin.
async fn plan_experiment(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    campaign: &Campaign,
    chosen: Option<&mailctl::definition_source::Chosen>,
    args: &super::GuardrailArgs,
) -> Result<Option<mailflow::domain::experiment::Experiment>> {
    let target = super::target(sdk, t).await?;
    let record = mailctl::ops::campaigns_table(&aws_sdk_dynamodb::Client::new(sdk), &target)
        .record(campaign.id.as_str())
        .await?;
    if let Some(record) = record.filter(|r| r.experiment.is_some()) {
        let repinned = chosen.filter(|c| record.definition.as_ref() != Some(&c.pinned));
        if let (Some(recorded), Some(chosen)) = (&record.experiment, repinned) {
            check_experiment(recorded, &chosen.loaded.definition, &chosen.loaded.files)
                .map_err(anyhow::Error::msg)?;
        }
        return Ok(record.experiment);
    }
    let Some(given) = args.experiment()? else {
        return Ok(None);
    };
    let env = get_users_env(sdk, template, t).await?;
    let consent = mailflow::config::var::TRACK_OPENS_AND_CLICKS;
    if env.get(consent).map(String::as_str) != Some("true") {
        return Err(ExperimentError::NoConsent(campaign.id.clone()).into());
    }
    let bundled;
    let loaded = match chosen {
        Some(chosen) => &chosen.loaded,
        None => {
            bundled = mailflow::ports::LoadedDefinition::bundled()?;
            &bundled
        }
    };
    check_experiment(&given, &loaded.definition, &loaded.files).map_err(anyhow::Error::msg)?;
    Ok(Some(given))
}

/// The campaign's guardrails as recorded when it first started, or as a start now would
/// record them (the arguments, then GetUsers' defaults).
async fn campaign_guardrails(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    campaign: &Campaign,
    args: &super::GuardrailArgs,
) -> Result<mailflow::domain::guardrails::CampaignGuardrails> {
    let target = super::target(sdk, t).await?;
    let record = mailctl::ops::campaigns_table(&aws_sdk_dynamodb::Client::new(sdk), &target)
        .record(campaign.id.as_str())
        .await?;
    let request = args.request()?;
    let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    if let Some(recorded) = record.as_ref().and_then(|r| r.guardrails) {
        // As GetUsers would settle a start with these arguments.
        let moved = request.settle(&campaign.id, recorded, now)?;
        return Ok(moved.unwrap_or(recorded));
    }
    // Started before guardrails were recorded: GetUsers gives it none of the defaults.
    if record.is_some_and(|r| r.started_at_ms.is_some()) {
        return Ok(request.initial(Default::default(), now));
    }
    let env = get_users_env(sdk, template, t).await?;
    let defaults = mailflow::config::guardrail_defaults(&|k: &str| env.get(k).cloned())?;
    Ok(request.initial(defaults, now))
}

/// GetUsers' environment: template.yaml's for a local stack, the deployed function's
/// otherwise.
async fn get_users_env(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
) -> Result<BTreeMap<String, String>> {
    Ok(match &t.prefix {
        Some(prefix) => provision_local(sdk, template, prefix, &t.database)
            .await?
            .env(mailflow_local::pipeline::GET_USERS)?,
        None => {
            let function = mailctl::stack_outputs::GET_USERS_FUNCTION.read()?;
            mailctl::compose::deployed_env(sdk, &function).await?
        }
    })
}

/// The local-time delivery `plan` counts with, decided as GetUsers decides it (the same
/// parser, its configuration, a campaign starting now): `--local-time`, or for the
/// schedule's campaign the stack's LOCAL_SEND_TIME.
async fn local_delivery(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    campaign: &Campaign,
    local: &super::LocalTimeArgs,
    scheduled: bool,
) -> Result<Option<mailflow::domain::local_time::LocalDelivery>> {
    use mailflow::stages::get_users::{parse_request, Request};
    let env = get_users_env(sdk, template, t).await?;
    let config = mailflow::config::LocalTimeConfig::from_source(&|k: &str| env.get(k).cloned())?;
    let mut event = super::start_event(campaign);
    local.apply(&mut event);
    if local.local_time.is_none() {
        match (scheduled, config.send_at) {
            (true, Some(at)) => event["localTime"] = at.to_string().into(),
            _ => return Ok(None),
        }
    }
    let now = mailflow::ports::Clock::now_ms(&mailflow::ports::SystemClock);
    match parse_request(event, &config, now)? {
        // Previewed before its window closes, a campaign is judged as it will run: from
        // the close, when a local time before it moves to the next day.
        Request::Run(run) => Ok(run.delivery.map(|mut d| {
            if let Some(until) = d.window_until_ms {
                d.started_at_ms = d.started_at_ms.max(until);
            }
            d
        })),
        _ => Ok(None),
    }
}
