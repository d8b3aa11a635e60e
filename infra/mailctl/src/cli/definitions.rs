//! `mailctl campaign ...`: the campaign definitions a stack keeps (docs/campaigns.md,
//! "Where definitions live").

use crate::commands::{self, TargetArgs};
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum DefinitionCommand {
    /// Store a definition folder as its next version (nothing when it is the latest's
    /// content) and create, update or delete its recurring schedule from its `schedule`.
    /// A definition with errors is refused whole, one line per error (exit status 2).
    Push {
        /// The folder: campaign.toml, templates/, samples/.
        dir: PathBuf,
        /// Who pushes (recorded with the version).
        #[arg(long, env = "USER")]
        by: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Every definition pushed: its latest version, when it was pushed, its schedule, and its
    /// last campaign with the version that campaign ran.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// One definition's versions and the campaigns each ran; with --version, that version's
    /// files.
    Show {
        name: String,
        #[arg(long)]
        version: Option<u32>,
        /// Print the files' contents, each after a `==> path <==` line.
        #[arg(long)]
        files: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
}

impl DefinitionCommand {
    pub async fn run(self, sdk: &aws_config::SdkConfig) -> Result<()> {
        match self {
            Self::Push { dir, by, target } => {
                let by = by.as_deref().map(str::trim).filter(|b| !b.is_empty());
                commands::definitions::push(sdk, &dir, by, &target).await
            }
            Self::List { json, target } => commands::definitions::list(sdk, json, &target).await,
            Self::Show {
                name,
                version,
                files,
                target,
            } => commands::definitions::show(sdk, &name, version, files, &target).await,
        }
    }
}
