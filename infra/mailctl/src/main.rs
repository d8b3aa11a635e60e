//! mailctl: run and inspect mailflow campaigns. Endpoints come from the environment
//! (AWS_ENDPOINT_URL, MONGODB_URI), exactly as for the functions.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use mailctl::ops::{self, Target};
use mailflow::adapters::ses::SesMailer;
use mailflow::campaign::Campaign;
use mailflow::config::SecretRef;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions, SeededStack};
use mailflow_local::provision::{provision, StackOptions};
use mailflow_local::seed::{seed, SeedOptions};
use mailflow_local::template::Template;
use mailflow_local::{ledger_scan, ses_record};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "mailctl",
    version,
    about = "Run and inspect mailflow campaigns"
)]
struct Cli {
    /// The SAM template that declares the stack.
    #[arg(long, global = true, default_value_os_t = mailflow_local::repo_root().join("template.yaml"))]
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
    /// Measure the pipeline on the local stack through the real function binaries, the three
    /// stages at once: CPU per email, peak RSS, cold start, billable requests per email, binary
    /// sizes and the cost per million emails (infra/bench.sh builds them and runs this).
    Bench {
        #[command(flatten)]
        options: mailflow_lab::bench::BenchOptions,
        /// Print one JSON object instead of Markdown tables.
        #[arg(long)]
        json: bool,
    },
    /// Run a campaign of thousands of users on the local stack while messages are delivered
    /// twice, runs overlap, invocations are killed at every step, SES throttles, MongoDB
    /// restarts and the AWS endpoint drops; print what was injected and what came out (exit
    /// status 1 when an email was lost or sent twice beyond the bound).
    Chaos {
        #[command(flatten)]
        options: mailflow_lab::chaos::ChaosOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Create the resources template.yaml declares on the local stack under a prefix, and
    /// print the MAILFLOW_* variables that name them.
    Provision {
        #[arg(long, default_value = "local")]
        prefix: String,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
    },
    /// Start a campaign: on AWS invoke GetUsers; with --prefix run it on the local stack to
    /// completion.
    Run {
        /// Campaign id; default: the campaign the schedule would run now (the last full week).
        #[arg(long)]
        campaign: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Re-run a campaign so that only users without a SENT record get an email.
    Resend {
        #[arg(long)]
        campaign: String,
        /// Also retry users whose send failed permanently (fix their data first).
        #[arg(long)]
        include_failed: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Counts by state for one campaign: queued, in flight, sent, failed, suppressed
    /// duplicates, DLQ depth, send rate and ETA.
    Status {
        #[arg(long)]
        campaign: String,
        /// Refresh every 2 seconds until the queues are empty.
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Move a dead-letter queue's messages back to its source queue.
    Redrive {
        #[arg(long, value_enum)]
        queue: QueueChoice,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Render exactly the email a user gets: composed by CreateEmails' own code with that
    /// function's configuration (locale, unsubscribe link), reading MongoDB as it does.
    Preview {
        #[arg(long)]
        user: String,
        /// Default: the campaign the schedule would run now.
        #[arg(long)]
        campaign: Option<String>,
        /// Write the HTML here (the headers and text go to stdout).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve a local stack's one-click unsubscribe endpoint (the Unsubscribe function behind
    /// a local Function URL on 127.0.0.1), so that the links in its emails work.
    ServeUnsubscribe {
        /// The port the stack's links point to (template.yaml's Function URL, locally).
        #[arg(long, default_value_t = 8025)]
        port: u16,
        #[command(flatten)]
        target: TargetArgs,
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

#[derive(clap::Args)]
struct TargetArgs {
    /// A stack on the local stack made by `mailctl provision --prefix P`; without it the
    /// MAILFLOW_* variables name a deployed stack's resources.
    #[arg(long)]
    prefix: Option<String>,
    /// MongoDB database of a local stack (deployed stacks set theirs in template.yaml).
    #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
    database: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum QueueChoice {
    Users,
    Emails,
    SesEvents,
}

async fn target(sdk: &aws_config::SdkConfig, args: &TargetArgs) -> Result<Target> {
    match &args.prefix {
        Some(prefix) => Target::from_prefix(&aws_sdk_sqs::Client::new(sdk), prefix).await,
        None => Target::from_env(),
    }
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set; start the local stack and load its environment: eval \"$(infra/local-stack.sh env)\"")
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line with the causes, no backtrace: this is for operators.
            eprintln!("mailctl: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    mailflow::telemetry::init_cli();
    let cli = Cli::parse();
    let sdk = mailflow::adapters::aws_config().await;
    match cli.command {
        Command::Provision { prefix, database } => {
            let stack = provision_local(&sdk, &cli.template, &prefix, &database).await?;
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
        Command::Run {
            campaign,
            target: t,
        } => {
            let campaign = campaign.unwrap_or_else(|| {
                Campaign::for_schedule(time::OffsetDateTime::now_utc())
                    .id
                    .to_string()
            });
            start(
                &sdk,
                &cli.template,
                &t,
                serde_json::json!({"campaignId": campaign}),
            )
            .await
        }
        Command::Resend {
            campaign,
            include_failed,
            target: t,
        } => {
            mailflow::campaign::CampaignId::parse(&campaign)?;
            let event =
                serde_json::json!({"campaignId": campaign, "includeFailed": include_failed});
            start(&sdk, &cli.template, &t, event).await
        }
        Command::Status {
            campaign,
            watch,
            json,
            target: t,
        } => {
            mailflow::campaign::CampaignId::parse(&campaign)?;
            let target = target(&sdk, &t).await?;
            let (sqs, dynamo) = (
                aws_sdk_sqs::Client::new(&sdk),
                aws_sdk_dynamodb::Client::new(&sdk),
            );
            loop {
                let s = ops::status(&sqs, &dynamo, &target, &campaign).await?;
                if json {
                    println!("{}", serde_json::to_string(&s)?);
                } else {
                    print_status(&s);
                }
                if !watch {
                    return Ok(());
                }
                if s.users_pending + s.emails_pending == 0 {
                    // Watched to the end: the exit status says how it ended.
                    return fail_on_problems(&s);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        Command::Redrive { queue, target: t } => {
            let target = target(&sdk, &t).await?;
            let (dlq, source) = match queue {
                QueueChoice::Users => (&target.users_dlq, &target.users_queue),
                QueueChoice::Emails => (&target.emails_dlq, &target.emails_queue),
                QueueChoice::SesEvents => (&target.ses_events_dlq, &target.ses_events_queue),
            };
            let moved =
                mailflow_local::queues::redrive(&aws_sdk_sqs::Client::new(&sdk), dlq, source)
                    .await?;
            println!("moved {moved} messages from {dlq} to {source}");
            Ok(())
        }
        Command::Preview {
            user,
            campaign,
            out,
            target: t,
        } => {
            let campaign = match campaign {
                Some(id) => Campaign::from_id(&id, None)?,
                None => Campaign::for_schedule(time::OffsetDateTime::now_utc()),
            };
            let env = match &t.prefix {
                Some(prefix) => {
                    let stack = provision_local(&sdk, &cli.template, prefix, &t.database).await?;
                    mailctl::preview::local_env(&stack)?
                }
                None => {
                    let function = std::env::var("MAILFLOW_CREATE_EMAILS_FUNCTION").context(
                        "MAILFLOW_CREATE_EMAILS_FUNCTION is not set: export the stack's CreateEmailsFunctionName output, or pass --prefix for a local stack",
                    )?;
                    mailctl::preview::deployed_env(&sdk, &function).await?
                }
            };
            let stage = mailctl::preview::create_emails(&sdk, &env).await?;
            let job = mailctl::preview::compose(&stage, &user, &campaign).await?;
            print!("{}", mailctl::preview::describe(&job));
            if let Some(path) = out {
                std::fs::write(&path, &job.html)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("HTML written to {}", path.display());
            }
            Ok(())
        }
        Command::ServeUnsubscribe { port, target: t } => {
            let Some(prefix) = &t.prefix else {
                bail!("serve-unsubscribe serves a local stack: pass --prefix (on AWS, the Unsubscribe function's URL serves it)");
            };
            let stack = provision_local(&sdk, &cli.template, prefix, &t.database).await?;
            let server = mailflow_local::pipeline::serve_unsubscribe(&stack, port).await?;
            eprintln!(
                "serving one-click unsubscribe for {prefix} at {} (Ctrl-C stops it)",
                server.url()
            );
            server.wait().await;
            Ok(())
        }
        Command::Demo {
            users,
            seed: s,
            send_rate,
            json,
        } => demo(&cli.template, users, s, send_rate, json).await,
        Command::Bench { options, json } => {
            let report = mailflow_lab::bench::bench(&cli.template, &options).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", mailflow_lab::bench::markdown(&report));
            }
            Ok(())
        }
        Command::Chaos { options, json } => {
            let report = mailflow_lab::chaos::run(&cli.template, &options).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", mailflow_lab::chaos::markdown(&report));
            }
            if !report.violations.is_empty() {
                bail!(
                    "the chaos run broke a promise: {}",
                    report.violations.join("; ")
                );
            }
            Ok(())
        }
        Command::Seed {
            users,
            seed: s,
            database,
            domain,
        } => {
            let mongo = mailflow::config::MongoConfig {
                uri: SecretRef::Plain(env("MONGODB_URI")?),
                database,
                max_pool_size: 4,
            };
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

async fn provision_local(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    prefix: &str,
    database: &str,
) -> Result<mailflow_local::provision::Stack> {
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

/// Starts GetUsers with `event`: on AWS by invoking the function, locally by running the
/// whole pipeline to completion.
async fn start(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    t: &TargetArgs,
    event: serde_json::Value,
) -> Result<()> {
    let Some(prefix) = &t.prefix else {
        let target = Target::from_env()?;
        let function = target
            .get_users_function
            .context("MAILFLOW_GET_USERS_FUNCTION is not set: export the stack's GetUsersFunctionName output")?;
        let out = aws_sdk_lambda::Client::new(sdk)
            .invoke()
            .function_name(&function)
            .payload(aws_sdk_lambda::primitives::Blob::new(serde_json::to_vec(
                &event,
            )?))
            .send()
            .await
            .with_context(|| format!("invoking {function}"))?;
        let payload = out
            .payload
            .map(|p| String::from_utf8_lossy(p.as_ref()).into_owned())
            .unwrap_or_default();
        if let Some(error) = out.function_error {
            bail!("{function} failed ({error}): {payload}");
        }
        println!("{payload}");
        return Ok(());
    };
    let stack = provision_local(sdk, template, prefix, &t.database).await?;
    let pipeline =
        LocalPipeline::build(stack, PipelineOptions::default(), SesMailer::from_config).await?;
    let campaign = event["campaignId"].as_str().unwrap_or_default().to_owned();
    let report = pipeline.run(event, Duration::from_secs(24 * 3600)).await?;
    // The ledger and the queues, not this run's counters, say how the campaign ended.
    let target = Target::from_prefix(&aws_sdk_sqs::Client::new(sdk), prefix).await?;
    let status = ops::status(
        &aws_sdk_sqs::Client::new(sdk),
        &aws_sdk_dynamodb::Client::new(sdk),
        &target,
        &campaign,
    )
    .await?;
    let send = &report.totals.send_email;
    println!(
        "{}",
        serde_json::json!({
            "getUsers": report.get_users,
            "rendered": report.totals.create_emails.rendered,
            "skipped": report.totals.create_emails.skipped,
            "sent": send.sent,
            "suppressedDuplicates": send.duplicates,
            "failed": send.failed,
            "previouslyFailed": send.previously_failed,
            "wallTimeSeconds": report.wall_time.as_secs(),
            "campaign": {
                "sent": status.sent,
                "failed": status.failed,
                "failedByReason": status.failed_by_reason,
                "deadLettered": status.dead_lettered,
                "deadLetteredByReason": status.dead_lettered_by_reason,
                "usersDlq": status.users_dlq,
                "emailsDlq": status.emails_dlq,
            },
        })
    );
    fail_on_problems(&status)
}

/// Exit status 1 (with the counts) when a campaign ended with users not sent to: FAILED,
/// dead-lettered, or messages left in a DLQ.
fn fail_on_problems(s: &ops::CampaignStatus) -> Result<()> {
    if s.problems() == 0 {
        return Ok(());
    }
    bail!(
        "campaign {} ended with {} FAILED, {} dead-lettered, {} messages in the users DLQ and {} in the emails DLQ (reasons above; `mailctl status` lists them)",
        s.campaign_id,
        s.failed,
        s.dead_lettered,
        s.users_dlq,
        s.emails_dlq
    )
}

fn print_status(s: &ops::CampaignStatus) {
    let done = s.sent + s.failed + s.dead_lettered;
    let total = done as u64 + s.in_progress as u64 + s.users_pending + s.emails_pending;
    let width = 30;
    let filled = (done as u64 * width as u64)
        .checked_div(total)
        .map_or(width, |f| f as usize);
    let engagement: Vec<String> = s
        .engagement
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    let eta = match (s.eta_seconds, s.send_rate) {
        (Some(eta), Some(rate)) => format!("{rate}/s over the last minute | ETA {eta}s"),
        _ if s.users_pending + s.emails_pending == 0 => "queues empty".into(),
        _ => format!(
            "nothing sent in the last minute | ETA unknown ({} waiting to retry)",
            s.retrying
        ),
    };
    println!(
        "{} [{}{}] sent {} failed {} dead-lettered {} in progress {} | queued: users {} emails {} | duplicates suppressed {} | DLQ now (all campaigns): users {} emails {} | {}\n  {} | reconciled from SES events {}",
        s.campaign_id,
        "#".repeat(filled),
        ".".repeat(width - filled),
        s.sent,
        s.failed,
        s.dead_lettered,
        s.in_progress,
        s.users_pending,
        s.emails_pending,
        s.duplicates_suppressed,
        s.users_dlq,
        s.emails_dlq,
        eta,
        engagement.join(" "),
        s.reconciled,
    );
    for (what, reasons) in [
        ("FAILED", &s.failed_by_reason),
        ("dead-lettered", &s.dead_lettered_by_reason),
    ] {
        for (reason, n) in reasons {
            println!("  {what} {n}: {reason}");
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
    let mut parameters = BTreeMap::new();
    if let Some(rate) = send_rate {
        parameters.insert(names::SEND_RATE_PER_SECOND.into(), rate.to_string());
    }
    let local = SeededStack::create(template, "demo", users, seed_value, parameters).await?;
    let schedule = local.schedule_event()?;
    let (seeded, campaign, domain) = (local.seeded, local.campaign, local.domain);
    let pipeline = LocalPipeline::build(
        local.stack,
        PipelineOptions::default(),
        SesMailer::from_config,
    )
    .await?;
    let report = pipeline.run(schedule, Duration::from_secs(3600)).await?;

    let dynamo = aws_sdk_dynamodb::Client::new(&pipeline.stack.sdk);
    let records = ledger_scan::records(
        &dynamo,
        pipeline.stack.table_name(names::SENDS_TABLE)?,
        campaign.id.as_str(),
    )
    .await?;
    let by_status = ledger_scan::count_by_status(&records);
    let recorded = ses_record::sent_to_domain(&endpoint, &domain).await?.len();
    let sqs = aws_sdk_sqs::Client::new(&pipeline.stack.sdk);
    let mut dlq = 0;
    for q in names::CAMPAIGN_DLQS {
        let (visible, invisible) =
            mailflow_local::queues::depth(&sqs, pipeline.stack.queue_url(q)?).await?;
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
