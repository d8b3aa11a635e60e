//! `preview`, `test-send`, `plan`, `serve-unsubscribe` and `serve-open-content`: a user's email exactly as
//! CreateEmails composes it, shown or sent to a test address; every user's, counted before a
//! campaign; and the local stack's unsubscribe links served.

use super::{provision_local, CampaignArgs, DefinitionArgs, TargetArgs};
use anyhow::{bail, Context, Result};
use mailflow::config::{CreateEmailsConfig, SendEmailConfig};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::pin::PinnedDefinition;
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
