//! `sam-invoke`: one function of template.yaml through `sam local invoke`, against a stack on
//! the local stack (provisioned, and seeded the first time, for the sample events' campaign).
//! `infra/sam-local.sh invoke` runs it where SAM and Docker are ready.

use super::{env, provision_local, TargetArgs};
use anyhow::{bail, Context, Result};
use mailflow::config::SecretRef;
use mailflow::domain::campaign::Campaign;
use mailflow_local::sam_local::SamLocal;
use mailflow_local::seed::{seed_if_empty, SeedOptions};

/// The campaign the sample events in infra/events/ name.
const SAMPLE_CAMPAIGN: &str = "weekly-2026-W47";

pub async fn sam_invoke(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    function: &str,
    event: &std::path::Path,
    t: &TargetArgs,
) -> Result<()> {
    let Some(prefix) = &t.prefix else {
        bail!("sam-invoke runs on the local stack: pass --prefix");
    };
    let event: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(event).with_context(|| format!("reading {}", event.display()))?,
    )
    .with_context(|| format!("{} is not JSON", event.display()))?;
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let vars = stack.env(function)?;
    seed_once(sdk, &t.database).await?;
    let invocation = SamLocal::from_env()?
        .invoke(function, &vars, &event)
        .await?;
    eprint!("{}", invocation.logs);
    match invocation.outcome {
        mailflow_local::function_host::Outcome::Response(answer) => {
            println!("{}", serde_json::to_string_pretty(&answer)?);
            Ok(())
        }
        other => bail!("{function} did not answer: {other:?} (its logs are above)"),
    }
}

/// Users and follows for the sample events' campaign, unless the database has users already.
async fn seed_once(sdk: &aws_config::SdkConfig, database: &str) -> Result<()> {
    let mongo = mailflow::config::MongoConfig {
        uri: SecretRef::Plain(env("MONGODB_URI")?),
        database: database.to_owned(),
        max_pool_size: 2,
    };
    let db = mailflow::adapters::mongo::connect(&mongo, sdk, "mailctl").await?;
    let options = SeedOptions {
        users: 50,
        seed: 42,
        domain: "example.com".into(),
        window: Campaign::from_id(SAMPLE_CAMPAIGN, None)?.window,
    };
    if let Some(report) = seed_if_empty(&db, &options).await? {
        eprintln!(
            "seeded {} users for {SAMPLE_CAMPAIGN} (audience {})",
            report.users,
            report.audience.len()
        );
    }
    Ok(())
}
