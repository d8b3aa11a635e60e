//! Starting a campaign and its held users: run, resend, release, the experiment's pick.

use crate::commands::{self, CampaignArgs, GuardrailArgs, LocalTimeArgs, TargetArgs};
use anyhow::Result;
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum ExperimentCommand {
    /// Decide now instead of at the end of the wait: by the rule on the results so far, or
    /// the variant named. The decision is recorded (final) and the rest of the audience is
    /// sent the winner at once.
    Pick {
        #[arg(long)]
        campaign: String,
        /// The winner, chosen by hand (default: what the rule says now).
        #[arg(long)]
        variant: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
}

#[derive(Subcommand)]
pub enum CampaignCommand {
    /// Start a campaign: on AWS invoke GetUsers; with --prefix run it on the local stack to
    /// completion. With --definition NAME, a campaign of a pushed definition (e.g. `run
    /// --definition orders`: the campaign its window rule makes now, orders-2026-W47).
    #[command(display_order = 8)]
    Run {
        /// Campaign id; default: the campaign the schedule would run now (the last full week;
        /// with --definition, the definition's window rule: NAME-YYYY-Www or NAME-YYYY-MM-DD).
        #[arg(long)]
        campaign: Option<String>,
        #[command(flatten)]
        window: CampaignArgs,
        /// Run a pushed campaign definition: its name (`mailctl campaign push DIR` first; a
        /// folder is not run). A first run pins the version it runs; later runs and resends
        /// use the pin.
        #[arg(long, value_name = "NAME")]
        definition: Option<String>,
        /// The definition's version (default: the campaign's pin, or the latest for a first
        /// run).
        #[arg(long, requires = "definition", value_name = "N")]
        definition_version: Option<u32>,
        /// Run the rest of a pinned campaign with --definition-version although it is pinned
        /// to another version (the record keeps its pin).
        #[arg(long, requires = "definition_version")]
        repin: bool,
        #[command(flatten)]
        local: LocalTimeArgs,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Release a local-time campaign's users still waiting in slots whose sweep time (15
    /// minutes after the slot) has passed (stranded: their schedules were lost or failed for
    /// good): each such slot is swept now.
    #[command(display_order = 9)]
    Release {
        #[arg(long)]
        campaign: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// A campaign's A/B experiment (docs/experiments.md).
    #[command(display_order = 10)]
    Experiment {
        #[command(subcommand)]
        action: ExperimentCommand,
    },
    /// Re-run a campaign so that only users without a SENT record get an email.
    #[command(display_order = 11)]
    Resend {
        #[arg(long)]
        campaign: String,
        /// Also retry users whose send failed permanently (fix their data first), and
        /// reconsider those a guardrail skipped (frequency cap, quiet hours, expired after a
        /// later --deadline); the held-out stay out.
        #[arg(long)]
        include_failed: bool,
        /// Reopen a cancelled campaign (it runs again, recorded with who and when) and send
        /// to the users it left CANCELLED. Without it, resend refuses a cancelled campaign.
        #[arg(long)]
        reopen_cancelled: bool,
        /// Who reopens it (with --reopen-cancelled).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        window: CampaignArgs,
        /// Without --local-time (or --at-once), a local-time campaign is resent at the local
        /// time its run started with.
        #[command(flatten)]
        local: LocalTimeArgs,
        /// Send everyone it still owes now, even a local-time campaign.
        #[arg(long, conflicts_with = "local_time")]
        at_once: bool,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
}

impl CampaignCommand {
    pub async fn run(self, sdk: &aws_config::SdkConfig, template: &Path) -> Result<()> {
        match self {
            Self::Run {
                campaign,
                window,
                definition,
                definition_version,
                repin,
                local,
                guardrails,
                target,
            } => {
                let definition = commands::campaign::RunDefinition {
                    name: definition,
                    version: definition_version,
                    repin,
                };
                commands::campaign::run(
                    sdk,
                    template,
                    campaign,
                    &window,
                    &definition,
                    &local,
                    &guardrails,
                    &target,
                )
                .await
            }
            Self::Experiment {
                action:
                    ExperimentCommand::Pick {
                        campaign,
                        variant,
                        target,
                    },
            } => {
                commands::experiment::pick(sdk, template, &campaign, variant.as_deref(), &target)
                    .await
            }
            Self::Release { campaign, target } => {
                commands::campaign::release(sdk, template, &campaign, &target).await
            }
            Self::Resend {
                campaign,
                include_failed,
                reopen_cancelled,
                by,
                window,
                local,
                at_once,
                guardrails,
                target,
            } => {
                let reopen = reopen_cancelled.then_some(by.as_str());
                let options = commands::campaign::Resend {
                    include_failed,
                    reopen,
                    local,
                    at_once,
                    guardrails,
                };
                commands::campaign::resend(sdk, template, &campaign, &window, options, &target)
                    .await
            }
        }
    }
}
