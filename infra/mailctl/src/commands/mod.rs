//! One module per command (or per family of commands); `main.rs` parses the command line
//! and calls them. What several commands share is here: the stack a command works on.

pub mod campaign;
pub mod demo;
pub mod lab;
pub mod preview;
pub mod sam;
pub mod setup;
pub mod status;

use anyhow::Result;
use mailctl::ops::Target;
use mailflow_local::names;
use mailflow_local::provision::{provision, StackOptions};
use mailflow_local::template::Template;
use std::collections::BTreeMap;

#[derive(clap::Args)]
pub struct TargetArgs {
    /// A stack on the local stack made by `mailctl provision --prefix P`; without it the
    /// MAILFLOW_* variables name a deployed stack's resources.
    #[arg(long)]
    pub prefix: Option<String>,
    /// MongoDB database of a local stack (deployed stacks set theirs in template.yaml).
    #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
    pub database: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum QueueChoice {
    Users,
    Emails,
    SesEvents,
}

pub async fn target(sdk: &aws_config::SdkConfig, args: &TargetArgs) -> Result<Target> {
    match &args.prefix {
        Some(prefix) => Target::from_prefix(sdk, prefix).await,
        None => Target::from_env(),
    }
}

pub use mailflow_local::stack_env as env;

pub async fn provision_local(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    prefix: &str,
    database: &str,
) -> Result<mailflow_local::stack::Stack> {
    let parameters = BTreeMap::from([(names::MONGODB_DATABASE.to_string(), database.to_owned())]);
    provision(
        sdk,
        Template::load(template)?,
        StackOptions {
            prefix: prefix.to_owned(),
            parameters,
            mongodb_uri: Some(env("MONGODB_URI")?),
            ..Default::default()
        },
    )
    .await
}
