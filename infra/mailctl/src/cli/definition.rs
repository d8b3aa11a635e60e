//! Campaign definitions: a folder of campaign.toml and templates (docs/campaigns.md, "Your
//! own campaign"), checked offline. No AWS: these commands read local files only.

use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum DefinitionCommand {
    /// Campaign definitions: check a folder, print the schema of campaign.toml.
    #[command(subcommand, display_order = 7)]
    Campaign(CampaignDefinition),
}

#[derive(Subcommand)]
pub enum CampaignDefinition {
    /// Read and check a definition's folder offline: prints `<name>: OK (...)`, or each
    /// problem on a line of its own and exits 2.
    Check {
        /// The folder holding campaign.toml, templates/ and samples/.
        dir: PathBuf,
    },
    /// Print the JSON Schema of campaign.toml (for editors; docs/campaign.schema.json).
    Schema,
}

impl DefinitionCommand {
    pub fn run(self) -> Result<()> {
        match self {
            Self::Campaign(CampaignDefinition::Check { dir }) => {
                crate::commands::definition::check(&dir)
            }
            Self::Campaign(CampaignDefinition::Schema) => {
                print!("{}", mailctl::definition::schema());
                Ok(())
            }
        }
    }
}
