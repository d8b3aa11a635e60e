//! Over 450 lines because the run is one script (stack, faults, three runs, a resend, the
//! drain and the verdict); its faults, report and disruptions are in their own files.
//!
//! The chaos run: one campaign of thousands of users through the local runner while what
//! production does to a pipeline happens at once: every message on the users and emails
//! queues delivered twice, two overlapping runs and a manual resend mid-drain, invocations
//! killed before the claim, after it, after SES accepted and before the SQS delete, SES
//! throttling, MongoDB stopped and restarted, the AWS endpoint unreachable; SES's SEND events
//! flow to SesEvents as on AWS. Then it checks
//! that nothing was lost and nobody got a second email beyond the one window no key closes.
//! `mailctl chaos` prints the figures; tests/chaos.rs asserts them.
//! `faults` injects, `disruptions` is the script of outages and operator actions, `runs` the
//! GetUsers runs, `report` the checks; the proxy and the restartable MongoDB have their own.

mod disruptions;
mod faults;
pub mod mongo;
pub mod proxy;
mod report;
mod runs;

pub use report::{markdown, ChaosReport, DlqAccount};
pub use runs::RunOutcome;

use disruptions::{Played, Script, PAUSE_HELD};
use faults::{ChaosMailer, Injector};
use report::{account_dead_letters, check};
use runs::invoke_async;

use anyhow::{Context, Result};
use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::adapters::event_sources::{EventSourceMappings, StackSending};
use mailflow::adapters::ses::SesMailer;
use mailflow_local::names;
use mailflow_local::pipeline::{
    lock, LocalPipeline, PipelineOptions, SeededStack, CREATE_EMAILS, SEND_EMAIL,
};
use mailflow_local::provision::StackOptions;
use mailflow_local::runner::{self, Faults};
use mailflow_local::seed::Rng;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Short timeouts so that killed invocations come back within seconds, and a send rate that
/// runs eight SendEmail environments (`SendRate::environments`, at 20/s each) rather than
/// the default two: every fault multiplies the email jobs (three runs, each message twice),
/// which would otherwise take the local stack half an hour. The local stack sends below
/// that rate anyway.
fn stack_options(mongodb_uri: String, local_time: bool) -> StackOptions {
    let mut parameters = BTreeMap::from([(names::SEND_RATE_PER_SECOND.into(), "160".into())]);
    if local_time {
        // The scheduled run delivers at local time too.
        parameters.insert(names::LOCAL_SEND_TIME.into(), LOCAL_TIME.into());
    }
    StackOptions {
        parameters,
        visibility_timeouts: BTreeMap::from([
            (names::USERS_QUEUE.into(), 12),
            (names::EMAILS_QUEUE.into(), 8),
        ]),
        mongodb_uri: Some(mongodb_uri),
        ..Default::default()
    }
}

fn pipeline_options() -> PipelineOptions {
    let send_env = [
        ("FUNCTION_TIMEOUT_SECONDS", "6"),
        ("VISIBILITY_TIMEOUT_SECONDS", "8"),
        ("LEASE_CLOCK_SKEW_SECONDS", "1"),
        ("RETRY_DELAYS_SECONDS", "1,1,2"),
    ];
    PipelineOptions {
        env: BTreeMap::from([(
            SEND_EMAIL,
            send_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )]),
        timeouts: BTreeMap::from([
            (SEND_EMAIL, Duration::from_secs(6)),
            (CREATE_EMAILS, Duration::from_secs(10)),
        ]),
        ..Default::default()
    }
}

/// The local stack with its faults in place: the seeded campaign, a MongoDB the run can stop,
/// a proxy that can cut the functions off AWS, and the pipeline behind both.
struct Rig {
    local: SeededStack,
    endpoint: String,
    mongo: Arc<tokio::sync::Mutex<mongo::MongoServer>>,
    proxy: Arc<proxy::FaultProxy>,
    injector: Arc<Injector>,
    pipeline: Arc<LocalPipeline<ChaosMailer>>,
}

impl Rig {
    async fn set_up(template: &std::path::Path, options: &ChaosOptions) -> Result<Self> {
        let endpoint = mailflow_local::stack_env("AWS_ENDPOINT_URL")?;
        let mongo = mongo::MongoServer::start(&options.secantusd, &std::env::temp_dir()).await?;
        let local = SeededStack::create_with(
            template,
            "chaos",
            options.users,
            options.seed,
            stack_options(mongo.uri(), options.local_time),
        )
        .await?;
        let upstream = tokio::net::lookup_host(mailflow_local::ses_record::authority(&endpoint)?)
            .await?
            .next()
            .context("resolving AWS_ENDPOINT_URL")?;
        let proxy = Arc::new(proxy::FaultProxy::start(upstream).await?);
        let mut stack = local.stack.clone();
        // Every service of the functions' clients through the proxy (over AWS_ENDPOINT_URL in
        // the environment, which an endpoint on the SdkConfig alone would not beat): the
        // outage cuts their connections, and the report counts the cuts.
        stack.sdk = mailflow_local::fault_switch::through(&stack.sdk, &proxy.url());

        let injector = Arc::new(Injector::new(options));
        // SES's events travel inside AWS: not through the proxy that cuts the functions off.
        let events = mailflow_local::ses_event_source::Publisher::new(
            aws_sdk_sqs::Client::new(&local.stack.sdk),
            local.stack.queue_url(names::SES_EVENTS_QUEUE)?,
        );
        let pipeline = Arc::new(
            LocalPipeline::build(stack, pipeline_options(), |sdk, config| ChaosMailer {
                inner: SesMailer::from_config(sdk, config),
                injector: injector.clone(),
                events,
            })
            .await?,
        );
        Ok(Self {
            local,
            endpoint,
            mongo: Arc::new(tokio::sync::Mutex::new(mongo)),
            proxy,
            injector,
            pipeline,
        })
    }

    /// Every consumer, with the injector's faults.
    fn consumers(&self) -> Result<Vec<runner::Consumer>> {
        let mut consumers = self.pipeline.consumers()?;
        consumers.push(self.pipeline.ses_events_consumer()?);
        for consumer in &mut consumers {
            consumer.faults = Some(self.injector.clone() as Arc<dyn Faults>);
        }
        Ok(consumers)
    }

    /// The operator's pause and resume, straight to AWS (not through the faults).
    fn operator(&self) -> Result<StackSending> {
        let stack = &self.local.stack;
        Ok(StackSending {
            mappings: EventSourceMappings::new(
                aws_sdk_lambda::Client::new(&stack.sdk),
                stack
                    .event_source_mappings()?
                    .split(',')
                    .map(str::to_owned)
                    .collect(),
            ),
            campaigns: CampaignsTable::new(
                aws_sdk_dynamodb::Client::new(&stack.sdk),
                stack.table_name(names::CAMPAIGNS_TABLE)?,
            ),
        })
    }
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
    let mut runs = vec![
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
    // Local time: both runs hold everyone first; then a slot is released every
    // `--slot-seconds` while the faults and the script play.
    let releases = if options.local_time {
        while runs.iter().any(|r| !r.is_finished()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pipeline = rig.pipeline.clone();
        let every = Duration::from_secs(options.slot_seconds);
        Some(tokio::spawn(async move {
            release_slots(&pipeline, every).await
        }))
    } else {
        None
    };
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
    let mut report_slots = 0;
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
    // A run that did not drain says where it stood.
    let drained = drained.map_err(|err| {
        let (enqueued, sent) = {
            let totals = lock(&rig.pipeline.totals);
            (totals.create_emails.enqueued, totals.send_email.sent)
        };
        let running = runs.iter().filter(|r| !r.is_finished()).count();
        let releasing = releases.as_ref().is_some_and(|r| !r.is_finished());
        err.context(format!(
            "the chaos run stalled: the script was {}; {running} of its first runs still running; \
             slot releases {}; {enqueued} emails enqueued, {sent} of {} deliverable sent; \
             {} release schedules fired; GetUsers' asynchronous invocations: {:?}",
            lock(&played.step),
            if releasing { "still going" } else { "over" },
            deliverable.len(),
            rig.pipeline.releases_fired().len(),
            rig.pipeline.async_stats(),
        ))
    });
    let mut consumer_stats = match drained {
        Ok(stats) => stats,
        Err(err) => {
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
    if let Some(releases) = releases {
        report_slots = releases.await??;
    }
    if !disruptions.is_finished() {
        disruptions.abort();
    }
    let mut report = ChaosReport {
        options: Some(options.clone()),
        users: options.users,
        audience: local.seeded.audience.len(),
        deliverable: deliverable.len(),
        invalid_addresses: local.seeded.invalid_addresses.len(),
        mongo_restarts: played.mongo_restarts.load(Ordering::SeqCst),
        paused_seconds: PAUSE_HELD.as_secs(),
        sent_while_paused: played.sent_while_paused.load(Ordering::SeqCst),
        aws_outages: played.aws_outages.load(Ordering::SeqCst),
        aws_connections_cut: played.aws_connections_cut.load(Ordering::SeqCst),
        outage_seconds: options.outage_seconds,
        slots_released: report_slots,
        ..Default::default()
    };
    runs.push(tokio::spawn(async move {
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
    }));
    for run in runs {
        report.runs.push(run.await?);
    }

    // What the dead-letter queues hold, then the operator's redrive and a calm drain.
    let dynamo = aws_sdk_dynamodb::Client::new(&local.stack.sdk);
    let table = local.stack.table_name(names::SENDS_TABLE)?.to_owned();
    account_dead_letters(&mut report, local, &dynamo, &table, &campaign).await?;
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
        &campaign,
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

/// Releases every send slot, one every `every` (the simulator's clock moves to each in
/// turn, and to the retries of a release that failed), until none is left; a call that
/// fails (the AWS outage) is tried again. Answers the slots released.
async fn release_slots(pipeline: &LocalPipeline<ChaosMailer>, every: Duration) -> Result<usize> {
    let mut failures = 0;
    // Slots' releases, not their sweeps (which, a quarter of an hour after each, find
    // nobody here and are not waited between).
    let released = || {
        let fired = pipeline.releases_fired();
        let sweep = fired
            .last()
            .is_some_and(|f| f.schedule.starts_with("sweep-"));
        let releases = fired.iter().filter(|f| f.schedule.starts_with("release-"));
        (releases.count(), sweep)
    };
    loop {
        match pipeline.release_next().await {
            Ok(Some(_)) => {
                if released().1 {
                    continue;
                }
            }
            Ok(None) => return Ok(released().0),
            Err(err) if failures < 60 => {
                failures += 1;
                tracing::warn!(reason = %format!("{err:#}"), "chaos: releasing a slot failed; trying again");
            }
            Err(err) => return Err(err.context("releasing the send slots")),
        }
        tokio::time::sleep(every).await;
    }
}
