//! `mailctl bench`: runs a seeded campaign through the real function binaries, the three
//! stages at once as in production, each stage in its own processes so it can be measured
//! alone, and reports per stage: those processes' CPU time, peak RSS, cold start, the billable
//! requests they made (metered in the functions, see `mailflow::runtime::metering`) plus the event
//! source mappings' polling (counted by the runner), MongoDB round trips, then binary sizes
//! and the cost per million emails.
//! `environments` runs and measures the binaries, `report` adds up what they did; the cost
//! model is `cost.rs`.

mod environments;
mod report;

pub use report::{markdown, BenchReport, BinaryReport, StageReport};

use crate::cost::{self};
use anyhow::{bail, Result};
use environments::{concurrency, consumer, Environments};
use mailflow_local::function_host::Outcome;
use mailflow_local::names;
use mailflow_local::pipeline::{SeededStack, CREATE_EMAILS, GET_USERS, SEND_EMAIL};
use mailflow_local::runner::{self};
use mailflow_local::stack::Stack;
use report::{binaries, machine, stage_report, PerEmailFigures};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct BenchOptions {
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Only GetUsers: the fan-out to the users queue (try --users 100000).
    #[arg(long)]
    pub get_users_only: bool,
    /// Campaign-wide send rate (emails/s); high so that our code, not the pacer, is measured.
    #[arg(long, default_value_t = 5000.0)]
    pub send_rate: f64,
    /// SendEmail environments (processes): two, as the default rate runs, rather than the
    /// hundred `--send-rate` would size the stack to (the figures are per email).
    #[arg(long, default_value_t = 2)]
    pub send_environments: usize,
    /// Where the function binaries are.
    #[arg(long, default_value_os_t = mailflow_local::repo_root().join("target/release"))]
    pub bin_dir: PathBuf,
    /// Also write each function process's log lines (the first 20,000 of each) to
    /// <dir>/<function>-<n>.log.
    #[arg(long)]
    pub logs_dir: Option<PathBuf>,
    /// A template parameter for the benchmark's stack, `Name=value` (repeatable), e.g.
    /// `--parameter FrequencyCaps=1/16h` to measure the caps' cost per email.
    #[arg(long = "parameter", value_parser = parameter)]
    pub parameters: Vec<(String, String)>,
    /// Run the campaign from the definition in campaigns/NAME, pushed to the bench's stack
    /// first, instead of the compiled digest: `digest` over the seeded users and follows,
    /// `orders` over `--users` customers and their orders (seeded instead of the users).
    #[arg(long, value_name = "NAME")]
    pub definition: Option<String>,
}

/// Pushes the definition folder `dir` to `stack` and answers the name it was pushed under
/// (mailctl's `campaign push`, which this crate does not depend on).
pub type PushDefinition =
    for<'a> fn(
        &'a Stack,
        &'a Path,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String>> + 'a>>;

/// The definition example whose data the bench seeds instead of the users and follows.
const ORDERS: &str = "orders";

fn parameter(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{raw:?} is not Name=value (e.g. FrequencyCaps=1/16h)"))
}

const DRAIN_LIMIT: Duration = Duration::from_secs(6 * 3600);

/// Runs the bench; with `--definition`, `push` stores the definition on the bench's stack.
pub async fn bench(
    template: &Path,
    options: &BenchOptions,
    push: PushDefinition,
) -> Result<BenchReport> {
    let orders = options.definition.as_deref() == Some(ORDERS);
    let mut parameters = BTreeMap::from([(
        names::SEND_RATE_PER_SECOND.to_string(),
        options.send_rate.to_string(),
    )]);
    parameters.extend(options.parameters.iter().cloned());
    // The orders example reads customers and orders, seeded below instead of the users.
    let users = if orders { 0 } else { options.users };
    let local = SeededStack::create(template, "bench", users, options.seed, parameters).await?;
    let stack = &local.stack;
    let run = match &options.definition {
        None => CampaignRun::compiled(&local)?,
        Some(name) => CampaignRun::definition(&local, name, options, push).await?,
    };
    let sqs = mailflow::adapters::sqs_client(&stack.sdk);

    let get_users = Environments::start(stack, &options.bin_dir, GET_USERS, 1).await?;
    let mut consumers = vec![consumer(stack, GET_USERS, get_users.handlers())?];
    let downstream = start_downstream(stack, options, &mut consumers).await?;

    // The schedule event, then GetUsers' continuations, while the consumers drain the queues.
    let started = Instant::now();
    let first = tokio::spawn({
        let (get_users, event) = (get_users.clone(), run.event.clone());
        async move { get_users.invoke(0, event).await }
    });
    let stats =
        runner::run_until_drained_while(&sqs, consumers, DRAIN_LIMIT, || !first.is_finished())
            .await?;
    let first = first.await?;
    if !matches!(first, Outcome::Response(_)) {
        bail!("GetUsers failed: {first:?}");
    }
    let wall = started.elapsed();
    // GetUsers' own duration: until its last invocation (the last continuation) answered.
    let get_users_wall =
        mailflow::runtime::lock(&get_users.last_answer).map_or(wall, |t| t - started);
    let logs_dir = options.logs_dir.as_deref();
    let mut stages =
        vec![stage_report(&get_users, stats.get(GET_USERS), get_users_wall, logs_dir).await?];
    for environments in &downstream {
        let stats = stats.get(environments.function);
        stages.push(stage_report(environments, stats, wall, logs_dir).await?);
    }
    let users_enqueued = stages[0].users_enqueued;
    let users_enqueued_per_second = users_enqueued as f64 / get_users_wall.as_secs_f64();

    // Per email sent; with GetUsers alone, per user enqueued.
    let (emails_sent, basis) = if options.get_users_only {
        (0, users_enqueued)
    } else {
        let sent = emails_sent(&local, &run).await?;
        (sent, sent)
    };
    let figures = PerEmailFigures::of(&stages, basis);
    let send_memory = stack.template.function(SEND_EMAIL)?.memory_size;
    Ok(BenchReport {
        machine: machine(),
        definition: options.definition.clone(),
        users: run.users,
        eligible_users: run.eligible,
        users_enqueued,
        users_enqueued_per_second,
        emails_sent,
        cpu_micros_per_email: figures.cpu_micros,
        billable_requests_per_email: figures.per_email.sqs_requests
            + figures.per_email.dynamodb_write_units
            + figures.per_email.dynamodb_read_units
            + figures.per_email.ses_emails,
        mongodb_round_trips_per_email: figures.mongodb_round_trips,
        cost_per_million: figures.per_email.cost_per_million(),
        seed_design_cost_per_million: cost::seed_design(f64::from(send_memory)).cost_per_million(),
        per_email: figures.per_email,
        stages,
        binaries: binaries(&options.bin_dir),
    })
}

/// CreateEmails' and SendEmail's environments, their event source mappings added to
/// `consumers`; none with GetUsers alone (the users queue is left to fill).
async fn start_downstream(
    stack: &Stack,
    options: &BenchOptions,
    consumers: &mut Vec<runner::Consumer>,
) -> Result<Vec<Arc<Environments>>> {
    let mut downstream = Vec::new();
    if options.get_users_only {
        return Ok(downstream);
    }
    for function in [CREATE_EMAILS, SEND_EMAIL] {
        let count = match function {
            SEND_EMAIL => options.send_environments,
            _ => concurrency(stack, function)?,
        };
        let environments = Environments::start(stack, &options.bin_dir, function, count).await?;
        consumers.push(consumer(stack, function, environments.handlers())?);
        downstream.push(environments);
    }
    Ok(downstream)
}

/// The campaign the bench runs: GetUsers' start, and what the seeded data says it must do.
struct CampaignRun {
    event: serde_json::Value,
    campaign_id: String,
    /// Users (or customers) seeded, those in the audience, those who must be sent an email.
    users: usize,
    eligible: usize,
    deliverable: u64,
}

impl CampaignRun {
    /// The compiled digest, started as EventBridge's weekly schedule starts it.
    fn compiled(local: &SeededStack) -> Result<Self> {
        Ok(Self {
            event: local.schedule_event()?,
            campaign_id: local.campaign.id.as_str().to_owned(),
            users: local.seeded.users,
            eligible: local.seeded.audience.len(),
            deliverable: local.seeded.deliverable().count() as u64,
        })
    }

    /// Definition `name` pushed from campaigns/NAME and started by name for the seeded
    /// week (`<name>-YYYY-Www`); for `orders`, its customers and orders seeded first.
    async fn definition(
        local: &SeededStack,
        name: &str,
        options: &BenchOptions,
        push: PushDefinition,
    ) -> Result<Self> {
        let dir = mailflow_local::repo_root().join("campaigns").join(name);
        if !dir.join("campaign.toml").is_file() {
            bail!("--definition {name}: no campaign.toml in {}", dir.display());
        }
        let pushed = push(&local.stack, &dir).await?;
        let window = local.campaign.window;
        let (year, week, _) = window.since.date().to_iso_week_date();
        let campaign_id = format!("{pushed}-{year}-W{week:02}");
        let event = serde_json::json!({"definition": pushed, "campaignId": campaign_id});
        if name != ORDERS {
            return Ok(Self {
                event,
                campaign_id,
                ..Self::compiled(local)?
            });
        }
        let seeded = mailflow_local::seed::seed_orders(
            &local.db,
            &mailflow_local::seed::OrdersOptions {
                customers: options.users,
                seed: options.seed,
                domain: local.domain.clone(),
                window,
            },
        )
        .await?;
        let with_orders = seeded.audience.values().filter(|e| e.is_ok()).count();
        Ok(Self {
            event,
            campaign_id,
            users: seeded.customers,
            eligible: seeded.audience.len(),
            deliverable: with_orders as u64,
        })
    }
}

/// SENT records of the bench's campaign, which must be every deliverable user.
async fn emails_sent(local: &SeededStack, run: &CampaignRun) -> Result<u64> {
    let stack = &local.stack;
    let records = mailflow_local::ledger_scan::records(
        &mailflow::adapters::dynamodb_client(&stack.sdk),
        stack.table_name(names::SENDS_TABLE)?,
        &run.campaign_id,
    )
    .await?;
    let sent = mailflow_local::ledger_scan::count_by_status(&records)
        .get("SENT")
        .copied()
        .unwrap_or(0) as u64;
    let expected = run.deliverable;
    if sent != expected {
        bail!(
            "the benchmark run is inconsistent: {sent} SENT records, {expected} deliverable users"
        );
    }
    Ok(sent)
}
