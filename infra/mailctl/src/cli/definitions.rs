//! `mailctl campaign ...`: campaign definitions, checked offline (docs/campaigns.md, "Your
//! own campaign") and kept by a stack ("Where definitions live").

use crate::commands::{self, TargetArgs};
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum DefinitionCommand {
    /// Read and check a definition's folder offline: prints `<name>: OK (...)`, or each
    /// problem on a line of its own and exits 2.
    Check {
        /// The folder holding campaign.toml, templates/ and samples/.
        dir: PathBuf,
    },
    /// Print the JSON Schema of campaign.toml (for editors; docs/campaign.schema.json).
    Schema,
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
    /// Check and Schema read local files only.
    pub fn needs_aws(&self) -> bool {
        !matches!(self, Self::Check { .. } | Self::Schema)
    }

    /// `sdk` is given when `needs_aws`.
    pub async fn run(self, sdk: Option<&aws_config::SdkConfig>) -> Result<()> {
        let aws = || sdk.ok_or_else(|| anyhow::anyhow!("no AWS configuration"));
        match self {
            Self::Check { dir } => commands::definition::check(&dir),
            Self::Schema => {
                print!("{}", mailctl::definition::schema());
                Ok(())
            }
            Self::Push { dir, by, target } => {
                let by = by.as_deref().map(str::trim).filter(|b| !b.is_empty());
                commands::definitions::push(aws()?, &dir, by, &target).await
            }
            Self::List { json, target } => commands::definitions::list(aws()?, json, &target).await,
            Self::Show {
                name,
                version,
                files,
                target,
            } => commands::definitions::show(aws()?, &name, version, files, &target).await,
        }
    }
}
