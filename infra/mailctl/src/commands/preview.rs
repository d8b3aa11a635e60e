//! `preview`, `test-send`, `plan`, `serve-unsubscribe` and `serve-open-content`: a user's email exactly as
//! CreateEmails composes it, shown or sent to a test address; every user's, counted before a
//! campaign; and the local stack's unsubscribe links served.

use super::{provision_local, CampaignArgs, DefinitionArgs, TargetArgs};
use anyhow::{bail, Context, Result};
use mailflow::config::{CreateEmailsConfig, RateControlConfig, SendEmailConfig};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow::domain::experiment::ExperimentError;
use mailflow::domain::send_rate::SendRate;
use mailflow::ports::{DefinitionCampaign, UserDirectory};
use std::collections::BTreeMap;

#[allow(clippy::too_many_arguments)]
pub async fn preview(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    user: &str,
    campaign: Option<String>,
    topic: Option<String>,
    definition: &DefinitionArgs,
    out: Option<std::path::PathBuf>,
    t: &TargetArgs,
) -> Result<()> {
    let env = match &t.prefix {
        Some(prefix) => {
            let stack = provision_local(sdk, template, prefix, &t.database).await?;
            mailctl::compose::local_env(&stack)?
        }
        None => {
            let function = mailctl::stack_outputs::CREATE_EMAILS_FUNCTION.read()?;
            mailctl::compose::deployed_env(sdk, &function).await?
        }
    };
    let window = CampaignArgs {
        topic: topic.clone(),
        ..Default::default()
    };
    let (resolved, stage, pinned) =
        composer(sdk, &env, t, campaign.as_deref(), &window, definition).await?;
    let campaign = match (resolved, campaign) {
        (Some(resolved), _) => resolved,
        (None, id) => {
            let mut campaign = match id {
                Some(id) => Campaign::from_id(&id, None)?,
                None => Campaign::for_schedule(time::OffsetDateTime::now_utc()),
            };
            if let Some(topic) = topic {
                let topic = mailflow::domain::topics::Topics::builtin().get(&topic)?;
                campaign = campaign.with_topic(topic.id.clone());
            }
            campaign
        }
    };
    let job = mailctl::compose::compose(&stage, user, &campaign, pinned.as_ref()).await?;
    print!("{}", mailctl::compose::describe(&job));
    if let Some(path) = out {
        std::fs::write(&path, &job.html).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("HTML written to {}", path.display());
    }
    Ok(())
}

/// CreateEmails as configured by `env`, and for a campaign of a definition (`--definition`,
/// or the one campaign `id` is pinned to) the campaign and the version its users' messages
/// name, the stage reading that definition (said on stderr). `(None, stage, None)`: the
/// weekly digest.
async fn composer(
    sdk: &aws_config::SdkConfig,
    env: &BTreeMap<String, String>,
    t: &TargetArgs,
    id: Option<&str>,
    window: &CampaignArgs,
    definition: &DefinitionArgs,
) -> Result<(
    Option<Campaign>,
    mailflow::assemble::LambdaCreateEmails,
    Option<PinnedDefinition>,
)> {
    let stage = mailctl::compose::create_emails(sdk, env).await?;
    let config = CreateEmailsConfig::from_source(&|k: &str| env.get(k).cloned())?;
    let chosen =
        super::definition_campaign(sdk, t, &config.campaigns_table_name, id, window, definition)
            .await?;
    Ok(match chosen {
        Some((campaign, chosen)) => {
            eprintln!("{}: definition {}", campaign.id, chosen.describe());
            (
                Some(campaign),
                stage.with_definitions(chosen.loader),
                Some(chosen.pinned),
            )
        }
        None => (None, stage, None),
    })
}

/// Sends `user`'s email in campaign `id` to `to` through SES, marked as a test, with
/// SendEmail's sender and configuration set; no send record, count or user is touched.
#[allow(clippy::too_many_arguments)]
pub async fn test_send(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    user: &str,
    id: &str,
    window: &CampaignArgs,
    definition: &DefinitionArgs,
    to: &str,
    t: &TargetArgs,
) -> Result<()> {
    let to = mailflow::domain::address::parse(to)
        .map_err(|e| anyhow::anyhow!("--to {to:?}: {e}"))?
        .as_str()
        .to_owned();
    let envs = function_envs(sdk, template, t).await?;
    let (campaign, stage, pinned) =
        composer(sdk, &envs.create, t, Some(id), window, definition).await?;
    let campaign = match campaign {
        Some(campaign) => campaign,
        None => super::resolve_campaign(sdk, t, id, window).await?,
    };
    let job = mailctl::compose::compose(&stage, user, &campaign, pinned.as_ref()).await?;
    let config = SendEmailConfig::from_source(&|k: &str| envs.send.get(k).cloned())?;
    let email = mailflow::ports::OutgoingEmail {
        key: job.key(),
        to: to.clone(),
        subject: job.subject,
        html: job.html,
        text: job.text,
        unsubscribe_url: job.unsubscribe_url,
    };
    let id = mailflow::assemble::ses_mailer(&config, sdk)
        .send_test(&email)
        .await
        .map_err(|e| anyhow::anyhow!("SES did not take the test email: {e}"))?;
    println!(
        "sent a test of {user}'s email in {} to {to} (SES message id {id}); no send record or count changed",
        campaign.id
    );
    Ok(())
}

/// The environments of CreateEmails, SendEmail and RateControl: template.yaml's for a local
/// stack, the deployed functions' otherwise.
pub struct FunctionEnvs {
    pub create: BTreeMap<String, String>,
    pub send: BTreeMap<String, String>,
    pub control: BTreeMap<String, String>,
}

pub async fn function_envs(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
) -> Result<FunctionEnvs> {
    use mailctl::stack_outputs::{
        CREATE_EMAILS_FUNCTION, RATE_CONTROL_FUNCTION, SEND_EMAIL_FUNCTION,
    };
    Ok(match &t.prefix {
        Some(prefix) => {
            let stack = provision_local(sdk, template, prefix, &t.database).await?;
            FunctionEnvs {
                create: mailctl::compose::local_env(&stack)?,
                send: stack.env(mailflow_local::names::SEND_EMAIL)?,
                control: stack.env(mailflow_local::names::RATE_CONTROL)?,
            }
        }
        None => FunctionEnvs {
            create: mailctl::compose::deployed_env(sdk, &CREATE_EMAILS_FUNCTION.read()?).await?,
            send: mailctl::compose::deployed_env(sdk, &SEND_EMAIL_FUNCTION.read()?).await?,
            control: mailctl::compose::deployed_env(sdk, &RATE_CONTROL_FUNCTION.read()?).await?,
        },
    })
}

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
/// definition's, `chosen`, else the digest's).
async fn plan_experiment(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    campaign: &Campaign,
    chosen: Option<&mailctl::definition_source::Chosen>,
    args: &super::GuardrailArgs,
) -> Result<Option<mailflow::domain::experiment::Experiment>> {
    let target = super::target(sdk, t).await?;
    let recorded = mailctl::ops::campaigns_table(&aws_sdk_dynamodb::Client::new(sdk), &target)
        .record(campaign.id.as_str())
        .await?
        .and_then(|r| r.experiment);
    if recorded.is_some() {
        return Ok(recorded);
    }
    let Some(given) = args.experiment()? else {
        return Ok(None);
    };
    let env = get_users_env(sdk, template, t).await?;
    let consent = mailflow::config::var::TRACK_OPENS_AND_CLICKS;
    if env.get(consent).map(String::as_str) != Some("true") {
        return Err(ExperimentError::NoConsent(campaign.id.clone()).into());
    }
    match chosen {
        Some(chosen) => mailflow::domain::definition::render::check_experiment(
            &given,
            &chosen.loaded.definition,
            &chosen.loaded.files,
        )
        .map_err(anyhow::Error::msg)?,
        None => given.check_for_digest()?,
    }
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

/// The local stack's Function URL functions, each served on 127.0.0.1 until Ctrl-C.
#[derive(Clone, Copy, Debug)]
pub enum Served {
    Unsubscribe,
    OpenContent,
}

pub async fn serve(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    served: Served,
    port: u16,
    t: &TargetArgs,
) -> Result<()> {
    let (command, function, what) = match served {
        Served::Unsubscribe => ("serve-unsubscribe", "Unsubscribe", "one-click unsubscribe"),
        Served::OpenContent => ("serve-open-content", "OpenContent", "open-time content"),
    };
    let Some(prefix) = &t.prefix else {
        bail!("{command} serves a local stack: pass --prefix (on AWS, the {function} function's URL serves it)");
    };
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let server = match served {
        Served::Unsubscribe => mailflow_local::pipeline::serve_unsubscribe(&stack, port).await?,
        Served::OpenContent => {
            let clock = std::sync::Arc::new(mailflow::ports::SystemClock);
            mailflow_local::pipeline::serve_open_content(&stack, port, clock).await?
        }
    };
    eprintln!(
        "serving {what} for {prefix} at {} (Ctrl-C stops it)",
        server.url()
    );
    server.wait().await;
    Ok(())
}
