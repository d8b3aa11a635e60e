//! The chaos run: one campaign of thousands of users through the local runner while what
//! production does to a pipeline happens at once: every message on the users and emails
//! queues delivered twice, two overlapping runs and a manual resend mid-drain, invocations
//! killed before the claim, after it, after SES accepted and before the SQS delete, SES
//! throttling, MongoDB stopped and restarted, the AWS endpoint unreachable; SES's DELIVERY events
//! flow to SesEvents as on AWS. Then it checks
//! that nothing was lost and nobody got a second email beyond the one window no key closes.
//! `mailctl chaos` prints the figures; tests/chaos.rs asserts them.
//! `rig` sets the stack up with its faults, `faults` injects, `disruptions` is the script of
//! outages and operator actions, `runs` the GetUsers runs and the slot releases, `report`
//! the checks; the proxy and the restartable MongoDB have their own.

mod disruptions;
mod faults;
pub mod mongo;
pub mod proxy;
mod report;
mod rig;
mod runs;

pub use report::{markdown, ChaosReport, DlqAccount};
pub use runs::RunOutcome;

use disruptions::{Played, Script, PAUSE_HELD};
use report::{account_dead_letters, check};
use rig::Rig;
use runs::{invoke_async, release_slots};

use anyhow::Result;
use mailflow_local::names;
use mailflow_local::pipeline::lock;
use mailflow_local::runner::{self, ConsumerStats};
use mailflow_local::seed::Rng;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

#[derive(Clone, Debug, clap::Args, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosOptions {
    /// Synthetic users seeded (about 60% are in the audience).
    #[arg(long, default_value_t = 5000)]
    pub users: usize,
    /// Seed of the synthetic data and of the fault decisions.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Share of CreateEmails and SendEmail invocations killed at each of: before they start
    /// (SendEmail: before any claim), part-way (CreateEmails), before the SQS delete.
    #[arg(long, default_value_t = 0.02)]
    pub kill_share: f64,
    /// Share of SES calls whose invocation is killed after the claim, before SES; the same
    /// share is killed after SES accepted, before SENT is recorded.
    #[arg(long, default_value_t = 0.004)]
    pub send_kill_share: f64,
    /// Share of SES calls answered with throttling.
    #[arg(long, default_value_t = 0.05)]
    pub throttle_share: f64,
    /// How long MongoDB stays stopped, and the AWS endpoint unreachable.
    #[arg(long, default_value_t = 3)]
    pub outage_seconds: u64,
    /// The SecantusDB server the run starts, stops and restarts for itself.
    #[arg(long, env = "MAILFLOW_SECANTUSD")]
    pub secantusd: PathBuf,
    /// Give up when the queues have not drained after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub max_seconds: u64,
    /// A local-time campaign: 09:00 in each user's own zone (40 zones from +14 to -12,
    /// some users without one or with an unknown one). The runs start before the first
    /// slot; the simulator's clock moves to the next slot every `--slot-seconds` while the
    /// faults play, so the releases meet every fault.
    #[arg(long)]
    pub local_time: bool,
    #[arg(long, default_value_t = 2)]
    pub slot_seconds: u64,
}

/// The local time of `--local-time`.
const LOCAL_TIME: &str = "09:00";

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts panics anywhere in the process (tokio would otherwise swallow a task's).
fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

pub async fn run(template: &std::path::Path, options: &ChaosOptions) -> Result<ChaosReport> {
    count_panics();
    let started = Instant::now();
    let rig = Rig::set_up(template, options).await?;
    let local = &rig.local;
    let deliverable: BTreeSet<String> = local
        .seeded
        .deliverable()
        .map(|(id, _)| id.clone())
        .collect();
    let campaign = local.campaign.id.to_string();
    let (mut runs, releases) = start_runs(&rig, options, &campaign).await?;
    let played = Arc::new(Played::default());
    let script = Script {
        pipeline: rig.pipeline.clone(),
        mongo: rig.mongo.clone(),
        proxy: rig.proxy.clone(),
        operator: rig.operator()?,
        campaign: campaign.clone(),
        audience: local.seeded.audience.len(),
        deliverable: deliverable.len(),
        outage: Duration::from_secs(options.outage_seconds),
        local_time: options.local_time.then_some(LOCAL_TIME),
    };
    let disruptions = tokio::spawn(script.play(played.clone()));
    // Lambda's pollers are AWS's own: the outage cuts the functions off, not them (so the
    // connections it cuts are the functions').
    let sqs = aws_sdk_sqs::Client::new(&rig.local.stack.sdk);
    let max_wait = Duration::from_secs(options.max_seconds);
    let drained = runner::run_until_drained_while(&sqs, rig.consumers()?, max_wait, || {
        !disruptions.is_finished()
            || runs.iter().any(|r| !r.is_finished())
            || releases.as_ref().is_some_and(|r| !r.is_finished())
    })
    .await;
    let consumer_stats = match drained {
        Ok(stats) => stats,
        Err(err) => {
            // A run that did not drain says where it stood.
            let err = err.context(stalled(
                &rig,
                &played,
                &runs,
                releases.as_ref(),
                &deliverable,
            ));
            for task in runs
                .iter()
                .map(|r| r.abort_handle())
                .chain(releases.iter().map(|r| r.abort_handle()))
            {
                task.abort();
            }
            disruptions.abort();
            return Err(err);
        }
    };
    let slots_released = match releases {
        Some(releases) => releases.await??,
        None => 0,
    };
    if !disruptions.is_finished() {
        disruptions.abort();
    }
    let mut report = counts(options, &rig, &played, slots_released, deliverable.len());
    runs.push(tokio::spawn(resend(disruptions)));
    for run in runs {
        report.runs.push(run.await?);
    }
    verdict(report, rig, consumer_stats, &campaign, max_wait, started).await
}

/// The scheduled run (killed part-way on its first attempt) and an overlapping manual one.
/// A local-time campaign moves the simulator's clock before its send date first; both runs
/// hold everyone, then a slot is released every `--slot-seconds` while the faults and the
/// script play (the second task).
async fn start_runs(
    rig: &Rig,
    options: &ChaosOptions,
    campaign: &str,
) -> Result<(
    Vec<JoinHandle<RunOutcome>>,
    Option<JoinHandle<Result<usize>>>,
)> {
    let local = &rig.local;
    let mut manual = json!({ "campaignId": campaign });
    if options.local_time {
        let ids: Vec<String> = local.seeded.addresses.keys().cloned().collect();
        mailflow_local::seed::assign_timezones(&local.db, &ids).await?;
        // Six hours before the send date (the Monday the window ends on) begins: UTC+14's
        // 09:00 is five hours later, so every user waits for a slot.
        let send_date_ms = local.campaign.window.until.unix_timestamp() * 1000;
        rig.pipeline.clock.set(send_date_ms - 6 * 3_600_000);
        manual["localTime"] = LOCAL_TIME.into();
    }
    let first_kill = Duration::from_millis(50 + Rng::new(options.seed).below(250));
    let runs = vec![
        tokio::spawn(invoke_async(
            rig.pipeline.clone(),
            "scheduled",
            local.schedule_event()?,
            Some(first_kill),
        )),
        tokio::spawn(invoke_async(
            rig.pipeline.clone(),
            "overlapping manual run",
            manual,
            None,
        )),
    ];
    if !options.local_time {
        return Ok((runs, None));
    }
    while runs.iter().any(|r| !r.is_finished()) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pipeline = rig.pipeline.clone();
    let every = Duration::from_secs(options.slot_seconds);
    let releases = tokio::spawn(async move { release_slots(&pipeline, every).await });
    Ok((runs, Some(releases)))
}

/// Where a run that did not drain stood: the script's step, the runs and releases still
/// going, the emails enqueued and sent, the release schedules fired.
fn stalled(
    rig: &Rig,
    played: &Played,
    runs: &[JoinHandle<RunOutcome>],
    releases: Option<&JoinHandle<Result<usize>>>,
    deliverable: &BTreeSet<String>,
) -> String {
    let (enqueued, sent) = {
        let totals = lock(&rig.pipeline.totals);
        (totals.create_emails.enqueued, totals.send_email.sent)
    };
    let running = runs.iter().filter(|r| !r.is_finished()).count();
    let releasing = releases.is_some_and(|r| !r.is_finished());
    format!(
        "the chaos run stalled: the script was {}; {running} of its first runs still running; \
         slot releases {}; {enqueued} emails enqueued, {sent} of {} deliverable sent; \
         {} release schedules fired; GetUsers' asynchronous invocations: {:?}",
        lock(&played.step),
        if releasing { "still going" } else { "over" },
        deliverable.len(),
        rig.pipeline.releases_fired().len(),
        rig.pipeline.async_stats(),
    )
}

/// The report's counts of the audience and of what the script played.
fn counts(
    options: &ChaosOptions,
    rig: &Rig,
    played: &Played,
    slots_released: usize,
    deliverable: usize,
) -> ChaosReport {
    let seeded = &rig.local.seeded;
    ChaosReport {
        options: Some(options.clone()),
        users: options.users,
        audience: seeded.audience.len(),
        deliverable,
        invalid_addresses: seeded.invalid_addresses.len(),
        mongo_restarts: played.mongo_restarts.load(Ordering::SeqCst),
        paused_seconds: PAUSE_HELD.as_secs(),
        sent_while_paused: played.sent_while_paused.load(Ordering::SeqCst),
        aws_outages: played.aws_outages.load(Ordering::SeqCst),
        aws_connections_cut: played.aws_connections_cut.load(Ordering::SeqCst),
        outage_seconds: options.outage_seconds,
        slots_released,
        ..Default::default()
    }
}

/// The manual resend the script ends with, or why there was none.
async fn resend(disruptions: JoinHandle<Result<RunOutcome>>) -> RunOutcome {
    let failed = |error: String| RunOutcome {
        name: "manual resend".into(),
        errors: vec![error],
        ..Default::default()
    };
    match disruptions.await {
        Ok(Ok(resend)) => resend,
        Ok(Err(err)) => failed(format!("the disruptions failed before it: {err:#}")),
        Err(err) => failed(format!("the disruptions task ended: {err}")),
    }
}

/// After the drain: what the dead-letter queues hold, the operator's redrive and a calm
/// drain, then the checks of the ledger and the SES record, the faults' counts and the
/// panics.
async fn verdict(
    mut report: ChaosReport,
    rig: Rig,
    mut consumer_stats: BTreeMap<String, ConsumerStats>,
    campaign: &str,
    max_wait: Duration,
    started: Instant,
) -> Result<ChaosReport> {
    let local = &rig.local;
    let dynamo = aws_sdk_dynamodb::Client::new(&local.stack.sdk);
    let table = local.stack.table_name(names::SENDS_TABLE)?.to_owned();
    account_dead_letters(&mut report, local, &dynamo, &table, campaign).await?;
    if report.dlq.redriven > 0 {
        let mut calm: Vec<_> = rig.pipeline.consumers()?;
        calm.push(rig.pipeline.ses_events_consumer()?);
        let direct_sqs = aws_sdk_sqs::Client::new(&local.stack.sdk);
        for (function, stats) in runner::run_until_drained(&direct_sqs, calm, max_wait).await? {
            consumer_stats.insert(format!("{function} (after redrive)"), stats);
        }
    }
    // Its server stops here: the checks read the ledger and the SES record only.
    drop(rig.mongo);
    report.consumers = consumer_stats;
    report.second_deliveries = report
        .consumers
        .iter()
        .filter(|(_, s)| s.second_deliveries > 0)
        .map(|(f, s)| (f.clone(), s.second_deliveries))
        .collect();
    let injector = &rig.injector;
    report.kills = lock(&injector.kills).clone();
    report.throttles = injector.throttles.load(Ordering::SeqCst);
    report.send_events = injector.send_events.load(Ordering::SeqCst);
    report.reconciled = lock(&rig.pipeline.totals).ses_events.reconciled;
    report.unknown_outcomes = injector.unknown_outcomes.load(Ordering::SeqCst);
    let unrecorded = injector.unrecorded_sends();
    check(
        &mut report,
        local,
        &rig.endpoint,
        &dynamo,
        &table,
        campaign,
        &unrecorded,
    )
    .await?;
    report.panics = PANICS.load(Ordering::SeqCst);
    if report.panics > 0 {
        report
            .violations
            .push(format!("{} panics (see the log)", report.panics));
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
