//! `provision` and `seed`: a stack on the local stack, and synthetic users in MongoDB.

use super::{env, provision_local};
use anyhow::Result;
use mailflow::campaign::Campaign;
use mailflow::config::SecretRef;
use mailflow_local::names;
use mailflow_local::seed::{seed as seed_users, SeedOptions};

/// Creates the template's resources under `prefix` and prints the variables that name them.
pub async fn provision(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    prefix: &str,
    database: &str,
) -> Result<()> {
    let stack = provision_local(sdk, template, prefix, database).await?;
    let url = |q: &str| stack.queue_url(q).map(str::to_owned);
    println!(
        "export MAILFLOW_SENDS_TABLE={}",
        stack.table_name(names::SENDS_TABLE)?
    );
    println!(
        "export MAILFLOW_USERS_QUEUE_URL={}",
        url(names::USERS_QUEUE)?
    );
    println!("export MAILFLOW_USERS_DLQ_URL={}", url(names::USERS_DLQ)?);
    println!(
        "export MAILFLOW_EMAILS_QUEUE_URL={}",
        url(names::EMAILS_QUEUE)?
    );
    println!("export MAILFLOW_EMAILS_DLQ_URL={}", url(names::EMAILS_DLQ)?);
    println!(
        "export MAILFLOW_SES_EVENTS_QUEUE_URL={}",
        url(names::SES_EVENTS_QUEUE)?
    );
    println!(
        "export MAILFLOW_SES_EVENTS_DLQ_URL={}",
        url(names::SES_EVENTS_DLQ)?
    );
    Ok(())
}

/// Inserts `users` synthetic users and their follows for this week's campaign window.
pub async fn seed(
    sdk: &aws_config::SdkConfig,
    users: usize,
    s: u64,
    database: String,
    domain: String,
) -> Result<()> {
    let mongo = mailflow::config::MongoConfig {
        uri: SecretRef::Plain(env("MONGODB_URI")?),
        database,
        max_pool_size: 4,
    };
    let db = mailflow::adapters::mongo::connect(&mongo, sdk, "mailctl").await?;
    let campaign = Campaign::for_schedule(time::OffsetDateTime::now_utc());
    let report = seed_users(
        &db,
        &SeedOptions {
            users,
            seed: s,
            domain,
            window: campaign.window,
        },
    )
    .await?;
    println!(
        "seeded {} users and {} follows for {}: audience {}, unsubscribed {}",
        report.users,
        report.follows,
        campaign.id,
        report.audience.len(),
        report.unsubscribed
    );
    Ok(())
}
