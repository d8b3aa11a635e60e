//! `provision` and `seed`: a stack on the local stack, and synthetic users in MongoDB.

use super::{env, provision_local};
use anyhow::{Context, Result};
use mailctl::stack_outputs as out;
use mailflow::config::SecretRef;
use mailflow::domain::campaign::Campaign;
use mailflow_local::names;
use mailflow_local::seed::{seed_reporting, SeedOptions};

/// Creates the template's resources under `prefix` and prints the variables that name them.
pub async fn provision(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    prefix: &str,
    database: &str,
) -> Result<()> {
    let stack = provision_local(sdk, template, prefix, database).await?;
    let url = |q: &str| stack.queue_url(q);
    let named = |id: &str| {
        stack
            .names
            .get(id)
            .map(String::as_str)
            .with_context(|| format!("the stack has no {id}"))
    };
    let exports = [
        (out::SENDS_TABLE, stack.table_name(names::SENDS_TABLE)?),
        (
            out::CAMPAIGNS_TABLE,
            stack.table_name(names::CAMPAIGNS_TABLE)?,
        ),
        (out::WAITING_TABLE, stack.table_name(names::WAITING_TABLE)?),
        (
            out::OPEN_CONTENT_TABLE,
            stack.table_name(names::OPEN_CONTENT_TABLE)?,
        ),
        (out::USERS_QUEUE, url(names::USERS_QUEUE)?),
        (out::USERS_DLQ, url(names::USERS_DLQ)?),
        (out::EMAILS_QUEUE, url(names::EMAILS_QUEUE)?),
        (out::EMAILS_DLQ, url(names::EMAILS_DLQ)?),
        (out::CONTINUATION_QUEUE, url(names::CONTINUATION_QUEUE)?),
        (out::CONTINUATION_DLQ, url(names::CONTINUATION_DLQ)?),
        (out::SES_EVENTS_QUEUE, url(names::SES_EVENTS_QUEUE)?),
        (out::SES_EVENTS_DLQ, url(names::SES_EVENTS_DLQ)?),
        (out::EVENT_SOURCE_MAPPINGS, &stack.event_source_mappings()?),
        (out::GET_USERS_FUNCTION_ARN, named(names::GET_USERS)?),
        (
            out::DEFINITION_SCHEDULE_GROUP,
            named(mailctl::definition_store::SCHEDULE_GROUP)?,
        ),
        (
            out::SCHEDULER_ROLE,
            named(mailctl::definition_store::SCHEDULER_ROLE)?,
        ),
        (
            out::SCHEDULE_DLQ,
            stack
                .queue_arns
                .get(names::SCHEDULE_DLQ)
                .map(String::as_str)
                .context("the stack has no ScheduleDLQ")?,
        ),
    ];
    for (output, value) in exports {
        println!("{}", output.export(value));
    }
    Ok(())
}

/// Creates the indexes in MONGODB_URI's `database`.
pub async fn create_indexes(sdk: &aws_config::SdkConfig, database: String) -> Result<()> {
    let mongo = mailflow::config::MongoConfig {
        uri: SecretRef::Plain(env("MONGODB_URI")?),
        database,
        max_pool_size: 2,
    };
    let db = mailflow::adapters::mongo::connect(&mongo, sdk, "mailctl").await?;
    let started = std::time::Instant::now();
    mailflow::adapters::mongo::create_indexes(&db).await?;
    mailflow::adapters::directory::check_indexes(&db).await?;
    println!(
        "indexes of {} in place ({} ms): the functions will find them",
        db.name(),
        started.elapsed().as_millis()
    );
    Ok(())
}

/// Inserts `customers` customers and their orders (the orders example definition) for this
/// week's campaign window.
pub async fn seed_orders(
    sdk: &aws_config::SdkConfig,
    customers: usize,
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
    let options = mailflow_local::seed::OrdersOptions {
        customers,
        seed: s,
        domain,
        window: campaign.window,
    };
    let report = mailflow_local::seed::seed_orders(&db, &options).await?;
    let with_orders = report.audience.values().filter(|e| e.is_ok()).count();
    println!(
        "seeded {} customers and {} orders for {}: audience {}, with paid orders that week {}",
        report.customers,
        report.orders,
        campaign.id,
        report.audience.len(),
        with_orders
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
    timezones: bool,
) -> Result<()> {
    let mongo = mailflow::config::MongoConfig {
        uri: SecretRef::Plain(env("MONGODB_URI")?),
        database,
        max_pool_size: 4,
    };
    let db = mailflow::adapters::mongo::connect(&mongo, sdk, "mailctl").await?;
    let campaign = Campaign::for_schedule(time::OffsetDateTime::now_utc());
    let options = SeedOptions {
        users,
        seed: s,
        domain,
        window: campaign.window,
    };
    let progress = mailctl::progress::Progress::new("seed");
    let report = seed_reporting(&db, &options, |done, total| {
        progress.report(done as u64, Some(total as u64), "documents", "")
    })
    .await?;
    progress.finish();
    if timezones {
        let ids: Vec<String> = report.addresses.keys().cloned().collect();
        mailflow_local::seed::assign_timezones(&db, &ids).await?;
    }
    println!(
        "seeded {} users{} and {} follows for {}: audience {}, unsubscribed {}",
        report.users,
        if timezones { " with time zones" } else { "" },
        report.follows,
        campaign.id,
        report.audience.len(),
        report.unsubscribed
    );
    Ok(())
}
