//! The command line: the global options and the commands, one file per group of commands
//! holding their arguments and their dispatch to `commands/`.

mod campaign;
mod control;
mod definitions;
mod inspect;
mod lab;
mod preview;
mod setup;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mailctl",
    version,
    about = "Run and inspect mailflow campaigns"
)]
pub struct Cli {
    /// The SAM template that declares the stack.
    #[arg(long, global = true, default_value_os_t = mailflow_local::repo_root().join("template.yaml"))]
    template: std::path::PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    #[command(flatten)]
    Lab(lab::LabCommand),
    #[command(flatten)]
    Setup(setup::SetupCommand),
    #[command(flatten)]
    Campaign(campaign::CampaignCommand),
    /// Campaign definitions: check a folder offline, push it, list what is deployed, show a
    /// version, print the schema of campaign.toml.
    #[command(name = "campaign", subcommand, display_order = 7)]
    Definitions(definitions::DefinitionCommand),
    #[command(flatten)]
    Control(control::ControlCommand),
    #[command(flatten)]
    Inspect(inspect::InspectCommand),
    #[command(flatten)]
    Preview(preview::PreviewCommand),
}

impl Cli {
    pub async fn run(self) -> Result<()> {
        let template = self.template.as_path();
        match self.command {
            Command::Lab(lab) => {
                if lab.needs_aws() {
                    aws_environment()?;
                }
                lab.run(template).await
            }
            Command::Setup(setup) => setup.run(&aws_sdk().await?, template).await,
            Command::Campaign(campaign) => campaign.run(&aws_sdk().await?, template).await,
            Command::Definitions(definitions) => match definitions.needs_aws() {
                true => definitions.run(Some(&aws_sdk().await?)).await,
                false => definitions.run(None).await,
            },
            Command::Control(control) => control.run(&aws_sdk().await?).await,
            Command::Inspect(inspect) => inspect.run(&aws_sdk().await?).await,
            Command::Preview(preview) => preview.run(&aws_sdk().await?, template).await,
        }
    }
}

/// The SDK's configuration, from the environment (`aws_environment` first).
async fn aws_sdk() -> Result<aws_config::SdkConfig> {
    aws_environment()?;
    Ok(mailflow::adapters::aws_config().await)
}

/// Refuses to start without any AWS configuration rather than let the SDK look for a region
/// on the instance metadata service (two long warnings, seconds of timeouts, then an error
/// that does not say what to set).
fn aws_environment() -> Result<()> {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    let variables = [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
    ];
    let config_file = std::env::var_os("HOME")
        .map(|home| std::path::Path::new(&home).join(".aws/config"))
        .is_some_and(|path| path.exists());
    if variables.iter().any(|k| set(k)) || config_file {
        return Ok(());
    }
    anyhow::bail!(
        "no AWS region is configured: for the local stack run `eval \"$(infra/local-stack.sh env)\"` first; for AWS set AWS_REGION (and credentials, or AWS_PROFILE)"
    )
}
