//! Steering a running campaign: pause, resume and cancel (`mailctl::control`).

use crate::commands::{self, TargetArgs};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum ControlCommand {
    /// Pause a campaign: the consumers of the campaign queues stop (every campaign on the
    /// stack waits: the queues are shared); nothing is lost or sent twice. Resume within the
    /// queues' 14-day retention.
    #[command(display_order = 18)]
    Pause {
        #[arg(long)]
        campaign: String,
        /// Why (kept with the pause, shown by status).
        #[arg(long, default_value = "paused by an operator")]
        reason: String,
        /// Who (kept with the pause).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Resume a paused campaign: every user not yet sent to gets exactly one email.
    #[command(display_order = 19)]
    Resume {
        #[arg(long)]
        campaign: String,
        /// Who (kept with the state change).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Cancel a campaign: no further email of it goes out; every user not yet sent to ends
    /// CANCELLED (or skipped, `campaign_cancelled`). Final: run and resend then refuse it.
    #[command(display_order = 20)]
    Cancel {
        #[arg(long)]
        campaign: String,
        /// Why (kept with the cancellation, shown by status).
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
        /// Who (kept with the cancellation).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

impl ControlCommand {
    /// Changes the campaign's state and says what that did.
    pub async fn run(self, sdk: &aws_config::SdkConfig) -> Result<()> {
        let said = match self {
            Self::Cancel {
                campaign,
                reason,
                by,
                target,
            } => {
                let target = commands::target(sdk, &target).await?;
                mailctl::control::cancel(sdk, &campaign, &by, &reason, &target).await
            }
            Self::Pause {
                campaign,
                reason,
                by,
                target,
            } => {
                let target = commands::target(sdk, &target).await?;
                mailctl::control::pause(sdk, &campaign, &by, &reason, &target).await
            }
            Self::Resume {
                campaign,
                by,
                target,
            } => {
                let target = commands::target(sdk, &target).await?;
                mailctl::control::resume(sdk, &campaign, &by, &target).await
            }
        };
        println!("{}", said?);
        Ok(())
    }
}
