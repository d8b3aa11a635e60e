//! A campaign's emails before (or without) sending them: one user's (`preview`,
//! `test-send`), every user's counted (`plan`), and the local stack's public URLs served.

use crate::commands::{
    self, CampaignArgs, DefinitionArgs, GuardrailArgs, LocalTimeArgs, TargetArgs,
};
use anyhow::Result;
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum PreviewCommand {
    /// Render exactly the email a user gets: composed by CreateEmails' own code with that
    /// function's configuration (locale, unsubscribe link), reading MongoDB as it does. With
    /// --definition, a campaign definition's email (e.g. `--definition orders`, pushed, or
    /// `--definition campaigns/orders`, a folder not pushed yet).
    #[command(display_order = 15)]
    Preview {
        #[arg(long)]
        user: String,
        /// Default: the campaign the schedule would run now (with --definition: the one its
        /// window rule makes now, e.g. orders-2026-W47).
        #[arg(long)]
        campaign: Option<String>,
        /// The campaign's topic (an id of shared/topics.json); default: the weekly digest's
        /// (a definition's own).
        #[arg(long)]
        topic: Option<String>,
        #[command(flatten)]
        definition: DefinitionArgs,
        /// Write the HTML here (the headers and text go to stdout).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve a local stack's one-click unsubscribe endpoint (the Unsubscribe function behind
    /// a local Function URL on 127.0.0.1), so that the links in its emails work.
    #[command(display_order = 16)]
    ServeUnsubscribe {
        /// The port the stack's links point to (template.yaml's Function URL, locally).
        #[arg(long, default_value_t = 8025)]
        port: u16,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve a local stack's open-time content (the OpenContent function behind a local
    /// Function URL on 127.0.0.1): the pick cards, live badges and counted links in its
    /// emails.
    #[command(display_order = 17)]
    ServeOpenContent {
        /// The port the stack's pick slots point to (template.yaml's Function URL, locally).
        #[arg(long, default_value_t = 8026)]
        port: u16,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// What a campaign would send, before it sends anything: its audience, by locale, who
    /// would be skipped and why, sample emails, how long it takes at the effective send rate,
    /// the SES quota and cost. Reads only; nothing is enqueued, claimed or sent.
    #[command(display_order = 21)]
    Plan {
        /// Campaign id; default: the campaign the schedule would run now (with --definition:
        /// the one its window rule makes now).
        #[arg(long)]
        campaign: Option<String>,
        /// Plan a campaign definition's campaign: its audience query and its templates.
        #[command(flatten)]
        definition: DefinitionArgs,
        /// How many emails to show in full.
        #[arg(long, default_value_t = 2)]
        samples: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        window: CampaignArgs,
        #[command(flatten)]
        local: LocalTimeArgs,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Send one user's real email of a campaign to a test address through SES, marked as a
    /// test ("[TEST] " subject, X-Mailflow-Test header); no send record or count changes.
    #[command(display_order = 22)]
    TestSend {
        #[arg(long)]
        campaign: String,
        /// The user whose email is sent (their id as `preview --user` takes it).
        #[arg(long)]
        user: String,
        /// Where the test goes: one email address.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        definition: DefinitionArgs,
        #[command(flatten)]
        window: CampaignArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
}

impl PreviewCommand {
    pub async fn run(self, sdk: &aws_config::SdkConfig, template: &Path) -> Result<()> {
        use commands::preview::{serve, Served};
        match self {
            Self::Preview {
                user,
                campaign,
                topic,
                definition,
                out,
                target,
            } => {
                commands::preview::preview(
                    sdk,
                    template,
                    &user,
                    campaign,
                    topic,
                    &definition,
                    out,
                    &target,
                )
                .await
            }
            Self::Plan {
                campaign,
                definition,
                samples,
                json,
                window,
                local,
                guardrails,
                target,
            } => {
                let options = commands::plan::PlanOptions {
                    samples,
                    json,
                    local,
                    guardrails,
                    definition,
                };
                commands::plan::plan(sdk, template, campaign, &window, &options, &target).await
            }
            Self::TestSend {
                campaign,
                user,
                to,
                definition,
                window,
                target,
            } => {
                commands::preview::test_send(
                    sdk,
                    template,
                    &user,
                    &campaign,
                    &window,
                    &definition,
                    &to,
                    &target,
                )
                .await
            }
            Self::ServeUnsubscribe { port, target } => {
                serve(sdk, template, Served::Unsubscribe, port, &target).await
            }
            Self::ServeOpenContent { port, target } => {
                serve(sdk, template, Served::OpenContent, port, &target).await
            }
        }
    }
}
