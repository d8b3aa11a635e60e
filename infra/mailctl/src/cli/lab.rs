//! The lab's runs and the local demo (`mailflow-lab`, `mailflow-local`): measurements,
//! the chaos run and the models; the rate lab and the pipeline model need no AWS endpoint.

use crate::commands;
use anyhow::Result;
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum LabCommand {
    /// Provision a fresh local stack from template.yaml, seed users, run one campaign to
    /// completion and print its summary (needs the local stack: infra/local-stack.sh start).
    #[command(display_order = 1)]
    Demo {
        /// The example to run: the weekly digest, or `orders` (the example definition in
        /// campaigns/orders: its customers and orders seeded, the folder pushed, its
        /// campaign run).
        #[arg(long, value_enum, default_value_t)]
        example: commands::demo::Example,
        /// How many synthetic users (customers, for orders) to seed.
        #[arg(long, default_value_t = 1000)]
        users: usize,
        /// Seed of the synthetic data (same seed, same users).
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Campaign-wide send rate (emails/s); default: the template's SendRatePerSecond.
        #[arg(long)]
        send_rate: Option<f64>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the campaign's report page (`mailctl report`) here.
        #[arg(long)]
        report: Option<std::path::PathBuf>,
    },
    /// Measure the pipeline on the local stack through the real function binaries, the three
    /// stages at once: CPU per email, peak RSS, cold start, billable requests per email, binary
    /// sizes and the cost per million emails (infra/bench.sh builds them and runs this).
    #[command(display_order = 2)]
    Bench {
        #[command(flatten)]
        options: mailflow_lab::bench::BenchOptions,
        /// Print one JSON object instead of Markdown tables.
        #[arg(long)]
        json: bool,
    },
    /// Measure the OpenContent endpoints on the local stack through the release binary: first
    /// opens, reopens, badges and clicks (latency, CPU, backend requests), warm opens per
    /// second, every slot at once, the cost per million (infra/bench-opens.sh runs this).
    #[command(display_order = 3)]
    Opens {
        #[command(flatten)]
        options: mailflow_lab::opens::OpensOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run a campaign of thousands of users on the local stack while messages are delivered
    /// twice, runs overlap, invocations are killed at every step, SES throttles, MongoDB
    /// restarts and the AWS endpoint drops; print what was injected and what came out (exit
    /// status 1 when an email was lost or sent twice beyond the bound).
    #[command(display_order = 4)]
    Chaos {
        #[command(flatten)]
        options: mailflow_lab::chaos::ChaosOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run the shared send rate against an SES stand-in that allows its quota and throttles
    /// beyond it (as SES does), with the real SendEmail stage in N environments over in-memory
    /// ports; compare with the static split (docs/benchmarks.md). Needs no local stack.
    #[command(display_order = 5)]
    Rate {
        #[command(flatten)]
        options: mailflow_lab::rate::RateOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run a whole campaign (GetUsers, CreateEmails, SendEmail: the real stages over
    /// in-memory ports with AWS's and MongoDB's round trips, each environment's CPU share
    /// modelled) in virtual time, and say what bounds it (docs/send-rate.md). Needs no local
    /// stack; a million users take minutes of this machine's CPU in a release build.
    #[command(display_order = 6)]
    Pipeline {
        #[command(flatten)]
        options: mailflow_lab::pipeline::PipelineOptions,
        /// The template's earlier sizing (GetUsers at 256 MB with 8 batches in flight,
        /// CreateEmails at 256 MB, batches of 10, 5 environments), for comparison.
        #[arg(long)]
        before: bool,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
}

impl LabCommand {
    /// Whether it talks to an AWS endpoint: the rate lab and the pipeline model do not, so
    /// they run without an SDK configuration (nor its region lookup).
    pub fn needs_aws(&self) -> bool {
        !matches!(self, Self::Rate { .. } | Self::Pipeline { .. })
    }

    pub async fn run(self, template: &Path) -> Result<()> {
        match self {
            Self::Demo {
                example,
                users,
                seed,
                send_rate,
                json,
                report,
            } => {
                let report = report.as_deref();
                commands::demo::demo(template, example, users, seed, send_rate, json, report).await
            }
            Self::Bench { options, json } => commands::lab::bench(template, &options, json).await,
            Self::Chaos { options, json } => commands::lab::chaos(template, &options, json).await,
            Self::Opens { options, json } => commands::lab::opens(template, &options, json).await,
            Self::Rate { options, json } => commands::lab::rate(&options, json).await,
            Self::Pipeline {
                options,
                before,
                json,
            } => {
                let options = match before {
                    true => options.before(),
                    false => options,
                };
                commands::lab::pipeline(&options, json).await
            }
        }
    }
}
