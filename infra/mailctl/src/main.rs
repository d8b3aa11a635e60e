//! mailctl: run and inspect mailflow campaigns. Endpoints come from the environment
//! (AWS_ENDPOINT_URL, MONGODB_URI), exactly as for the functions.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use mailctl::local::{LocalPipeline, PipelineOptions};
use mailctl::provision::{provision, StackOptions};
use mailctl::seed::{seed, SeedOptions};
use mailctl::template::Template;
use mailctl::{ledger_scan, ses_record};
use mailflow::adapters::ses::SesMailer;
use mailflow::campaign::Campaign;
use mailflow::config::MongoUri;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
#[command(
    name = "mailctl",
    version,
    about = "Run and inspect mailflow campaigns"
)]
struct Cli {
    /// The SAM template that declares the stack.
    #[arg(long, global = true, default_value_os_t = mailctl::repo_root().join("template.yaml"))]
    template: std::path::PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Provision a fresh local stack from template.yaml, seed users, run one campaign to
    /// completion and print its summary (needs the local stack: infra/local-stack.sh start).
    Demo {
        /// How many synthetic users to seed.
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
    },
    /// Insert synthetic users and follows into MONGODB_URI for this week's campaign window.
    Seed {
        #[arg(long, default_value_t = 1000)]
        users: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
        #[arg(long, default_value = "example.com")]
        domain: String,
    },
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set; start the local stack and load its environment: eval \"$(infra/local-stack.sh env)\"")
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    if std::env::var_os("LOG_FORMAT").is_none() {
        std::env::set_var("LOG_FORMAT", "text");
    }
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    mailflow::telemetry::init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo {
            users,
            seed: s,
            send_rate,
            json,
        } => demo(&cli.template, users, s, send_rate, json).await,
        Command::Seed {
            users,
            seed: s,
            database,
            domain,
        } => {
            let mongo = mailflow::config::MongoConfig {
                uri: MongoUri::Plain(env("MONGODB_URI")?),
                database,
                max_pool_size: 4,
            };
            let sdk = mailflow::adapters::aws_config().await;
            let db = mailflow::adapters::mongo::connect(&mongo, &sdk, "mailctl").await?;
            let campaign = Campaign::for_schedule(time::OffsetDateTime::now_utc());
            let report = seed(
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
    }
}

async fn demo(
    template: &std::path::Path,
    users: usize,
    seed_value: u64,
    send_rate: Option<f64>,
    json: bool,
) -> Result<()> {
    let endpoint = env("AWS_ENDPOINT_URL")?;
    let mongo_uri = env("MONGODB_URI")?;
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let prefix = format!("demo-{stamp}");
    let database = format!("mailflow_demo_{stamp}");
    let domain = format!("{prefix}.example.com");

    let sdk = mailflow::adapters::aws_config().await;
    let mut parameters = BTreeMap::from([("MongoDbDatabase".to_string(), database.clone())]);
    if let Some(rate) = send_rate {
        parameters.insert("SendRatePerSecond".into(), rate.to_string());
    }
    let stack = provision(
        &sdk,
        Template::load(template)?,
        StackOptions {
            prefix: prefix.clone(),
            parameters,
            mongodb_uri: Some(mongo_uri),
            ..Default::default()
        },
    )
    .await?;
    let pipeline = LocalPipeline::build(stack, PipelineOptions::default(), |sdk, config| {
        SesMailer::new(
            sdk,
            config.sender_address.clone(),
            config.configuration_set.clone(),
        )
    })
    .await?;

    let now = time::OffsetDateTime::now_utc();
    let campaign = Campaign::for_schedule(now);
    let db = mailflow::adapters::mongo::connect(
        &mailflow::config::MongoConfig {
            uri: MongoUri::Plain(env("MONGODB_URI")?),
            database,
            max_pool_size: 4,
        },
        &sdk,
        "mailctl",
    )
    .await?;
    let seeded = seed(
        &db,
        &SeedOptions {
            users,
            seed: seed_value,
            domain: domain.clone(),
            window: campaign.window,
        },
    )
    .await?;

    let schedule = serde_json::json!({
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "time": now.format(&time::format_description::well_known::Rfc3339)?,
    });
    let report = pipeline.run(schedule, Duration::from_secs(3600)).await?;

    let dynamo = aws_sdk_dynamodb::Client::new(&pipeline.stack.sdk);
    let records = ledger_scan::records(
        &dynamo,
        pipeline.stack.table_name("SendsTable")?,
        campaign.id.as_str(),
    )
    .await?;
    let by_status = ledger_scan::count_by_status(&records);
    let recorded = ses_record::sent_to_domain(&endpoint, &domain).await?.len();
    let sqs = aws_sdk_sqs::Client::new(&pipeline.stack.sdk);
    let mut dlq = 0;
    for q in ["UsersDLQ", "EmailsDLQ", "ContinuationDLQ"] {
        let (visible, invisible) =
            mailctl::runner::depth(&sqs, pipeline.stack.queue_url(q)?).await?;
        dlq += visible + invisible;
    }
    let send = &report.totals.send_email;
    let secs = report.wall_time.as_secs_f64();
    let summary = serde_json::json!({
        "campaignId": campaign.id.as_str(),
        "users": seeded.users,
        "eligibleUsers": seeded.audience.len(),
        "enqueued": report.get_users.get("usersEnqueued"),
        "skipped": report.totals.create_emails.skipped,
        "sent": by_status.get("SENT").copied().unwrap_or(0),
        "suppressedDuplicates": send.duplicates,
        "failed": by_status.get("FAILED").copied().unwrap_or(0),
        "inProgress": by_status.get("IN_PROGRESS").copied().unwrap_or(0),
        "dlq": dlq,
        "sesRecorded": recorded,
        "wallTimeSeconds": (secs * 10.0).round() / 10.0,
        "sendRatePerSecond": ((send.sent as f64 / secs) * 10.0).round() / 10.0,
    });
    if json {
        println!("{summary}");
    } else {
        println!("campaign {} ({} users seeded)", campaign.id, seeded.users);
        for key in [
            "eligibleUsers",
            "enqueued",
            "sent",
            "suppressedDuplicates",
            "failed",
            "inProgress",
            "dlq",
            "sesRecorded",
            "wallTimeSeconds",
            "sendRatePerSecond",
        ] {
            println!("  {key:<22} {}", summary[key]);
        }
        println!("  {:<22} {}", "skipped", summary["skipped"]);
    }
    let sent = by_status.get("SENT").copied().unwrap_or(0);
    let expected = seeded.deliverable().count();
    if sent != recorded || sent != expected || dlq > 0 {
        bail!("the campaign is inconsistent: {sent} SENT records, {recorded} emails in the SES record, {expected} deliverable users, {dlq} messages in DLQs");
    }
    Ok(())
}
