//! Setting a stack up: the local stack's resources (`provision`), MongoDB's indexes and
//! synthetic users, and one function through `sam local invoke`.

use crate::commands::{self, TargetArgs};
use anyhow::Result;
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum SetupCommand {
    /// Create the resources template.yaml declares on the local stack under a prefix, and
    /// print the MAILFLOW_* variables that name them.
    #[command(display_order = 7)]
    Provision {
        #[arg(long, default_value = "local")]
        prefix: String,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
    },
    /// Invoke one function of template.yaml with `sam local invoke` against a local stack
    /// (run it through infra/sam-local.sh, which prepares SAM and Docker).
    #[command(display_order = 23)]
    SamInvoke {
        /// The function's logical id, e.g. GetUsersFunction.
        function: String,
        /// The event file, e.g. infra/events/manual-run.json.
        event: std::path::PathBuf,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Create the MongoDB indexes the functions need (in MONGODB_URI's --database), before
    /// the first campaign: the functions only check for them at cold start. Idempotent.
    #[command(display_order = 24)]
    CreateIndexes {
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
    },
    /// Insert synthetic users and follows into MONGODB_URI for this week's campaign window.
    #[command(display_order = 25)]
    Seed {
        #[arg(long, default_value_t = 1000)]
        users: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
        #[arg(long, default_value = "example.com")]
        domain: String,
        /// Give the users a `timezone`: 40 zones from UTC+14 to UTC-12, and some none or an
        /// unknown one (for local-time campaigns).
        #[arg(long)]
        timezones: bool,
        /// Seed the orders example definition (campaigns/orders) instead: --users customers
        /// and their orders, with the awkward cases real data has.
        #[arg(long, conflicts_with = "timezones")]
        orders: bool,
    },
}

impl SetupCommand {
    pub async fn run(self, sdk: &aws_config::SdkConfig, template: &Path) -> Result<()> {
        match self {
            Self::Provision { prefix, database } => {
                commands::setup::provision(sdk, template, &prefix, &database).await
            }
            Self::CreateIndexes { database } => {
                commands::setup::create_indexes(sdk, database).await
            }
            Self::Seed {
                users,
                seed,
                database,
                domain,
                timezones,
                orders: true,
            } => {
                let _ = timezones;
                commands::setup::seed_orders(sdk, users, seed, database, domain).await
            }
            Self::Seed {
                users,
                seed,
                database,
                domain,
                timezones,
                orders: false,
            } => commands::setup::seed(sdk, users, seed, database, domain, timezones).await,
            Self::SamInvoke {
                function,
                event,
                target,
            } => commands::sam::sam_invoke(sdk, template, &function, &event, &target).await,
        }
    }
}
