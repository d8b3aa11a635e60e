//! Reading a campaign back: its status, its report page, and its DLQs moved back.

use crate::commands::{self, QueueChoice, TargetArgs};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum InspectCommand {
    /// Counts by state for one campaign: queued, in flight, sent, failed, suppressed
    /// duplicates, DLQ depth, send rate and ETA.
    #[command(display_order = 12)]
    Status {
        #[arg(long)]
        campaign: String,
        /// Refresh every 2 seconds until the queues are empty.
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// One campaign as one self-contained HTML file: `status`'s counts and plots (send rate
    /// against the ceiling, outcomes by reason, local-time lateness by zone, opens and clicks
    /// by hour, the experiment's variants), drawn inline as SVG; nothing fetched.
    #[command(display_order = 13)]
    Report {
        #[arg(long)]
        campaign: String,
        /// Where the file goes (default: CAMPAIGN-report.html).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Move a dead-letter queue's messages back to its source queue.
    #[command(display_order = 14)]
    Redrive {
        #[arg(long, value_enum)]
        queue: QueueChoice,
        #[command(flatten)]
        target: TargetArgs,
    },
}

impl InspectCommand {
    pub async fn run(self, sdk: &aws_config::SdkConfig) -> Result<()> {
        match self {
            Self::Status {
                campaign,
                watch,
                json,
                target,
            } => commands::status::status(sdk, &campaign, watch, json, &target).await,
            Self::Report {
                campaign,
                out,
                target,
            } => commands::status::report(sdk, &campaign, out, &target).await,
            Self::Redrive { queue, target } => commands::status::redrive(sdk, queue, &target).await,
        }
    }
}
