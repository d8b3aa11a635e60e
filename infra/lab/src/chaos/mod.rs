//! The chaos run: one campaign of thousands of users through the local runner while what
//! production does to a pipeline happens at once: every message on the users and emails
//! queues delivered twice, two overlapping runs and a manual resend mid-drain, invocations
//! killed before the claim, after it, after SES accepted and before the SQS delete, SES
//! throttling, MongoDB stopped and restarted, the AWS endpoint unreachable; SES's SEND events
//! flow to SesEvents as on AWS. Then it checks
//! that nothing was lost and nobody got a second email beyond the one window no key closes.
//! `mailctl chaos` prints the figures; tests/chaos.rs asserts them.
//! Over 400 lines on purpose: the faults, their schedule and the checks of one run read
//! together; the proxy and the restartable MongoDB are already modules of their own.

pub mod mongo;
pub mod proxy;

use anyhow::{Context, Result};
use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::adapters::event_sources::{EventSourceMappings, StackSending};
use mailflow::adapters::ses::SesMailer;
use mailflow::domain::campaign::StateChange;
use mailflow::ports::{Mailer, OutgoingEmail, SendError};
use mailflow_local::names;
use mailflow_local::pipeline::{
    lock, LocalPipeline, PipelineOptions, SeededStack, CREATE_EMAILS, SEND_EMAIL,
};
use mailflow_local::provision::StackOptions;
use mailflow_local::runner::{self, ConsumerStats, Faults, Kill};
use mailflow_local::seed::Rng;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
}

/// What the fault injector did, shared by the event source mappings and the mailer.
struct Injector {
    kill_share: f64,
    send_kill_share: f64,
    throttle_share: f64,
    rng: Mutex<Rng>,
    kills: Mutex<BTreeMap<String, usize>>,
    throttles: AtomicUsize,
    unknown_outcomes: AtomicUsize,
    /// SES SEND events published (one per accepted email).
    send_events: AtomicUsize,
    /// SES calls without an answer, by user: each may have sent an email nobody recorded.
    unanswered: Mutex<BTreeMap<String, usize>>,
    /// (request id, user) of every SES call made: from the moment it starts SES may accept
    /// the email, whether or not the invocation lives to see the answer.
    calls: Mutex<Vec<(String, String)>>,
    /// Invocations that did not run to the end (killed or timed out).
    broken: Mutex<BTreeSet<String>>,
}

impl Injector {
    fn new(options: &ChaosOptions) -> Self {
        Self {
            kill_share: options.kill_share,
            send_kill_share: options.send_kill_share,
            throttle_share: options.throttle_share,
            rng: Mutex::new(Rng::new(options.seed ^ 0xC4A0_5EED)),
            kills: Mutex::default(),
            throttles: AtomicUsize::new(0),
            unknown_outcomes: AtomicUsize::new(0),
            send_events: AtomicUsize::new(0),
            unanswered: Mutex::default(),
            calls: Mutex::default(),
            broken: Mutex::default(),
        }
    }

    fn roll(&self) -> f64 {
        lock(&self.rng).unit()
    }

    fn killed(&self, point: &str) {
        *lock(&self.kills).entry(point.to_owned()).or_default() += 1;
    }

    /// Per user, the emails that may have gone out without SENT being recorded: every SES
    /// call made in an invocation that was killed or timed out before it finished (SES may
    /// have accepted it and SENT not been written: the one window no key closes), and every
    /// SES call without an answer. Each allows that user one extra email.
    fn unrecorded_sends(&self) -> Unrecorded {
        let mut unrecorded = Unrecorded {
            allowed: lock(&self.unanswered).clone(),
            ..Default::default()
        };
        let broken = lock(&self.broken);
        for (request, user) in lock(&self.calls).iter() {
            let cut = broken.contains(request);
            if cut {
                *unrecorded.allowed.entry(user.clone()).or_default() += 1;
            }
            let how = if cut { "cut short" } else { "finished" };
            unrecorded
                .called_in
                .entry(user.clone())
                .or_default()
                .push(format!("{request} ({how})"));
        }
        unrecorded
    }
}

/// Extra emails the faults allow each user, and the invocations that called SES for them
/// (shown when a user got more).
#[derive(Default)]
struct Unrecorded {
    allowed: BTreeMap<String, usize>,
    called_in: BTreeMap<String, Vec<String>>,
}

impl Faults for Injector {
    /// Every message on the users and emails queues, again within 3 s: a fifth at once,
    /// while the first is being handled, the rest after it (as most duplicates arrive).
    fn deliver_twice(&self, function: &str) -> Option<Duration> {
        if function != CREATE_EMAILS && function != SEND_EMAIL {
            return None;
        }
        let mut rng = lock(&self.rng);
        Some(if rng.below(5) == 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(rng.below(3000))
        })
    }

    fn kill(&self, function: &str) -> Option<Kill> {
        let stage = match function {
            CREATE_EMAILS => "CreateEmails",
            SEND_EMAIL => "SendEmail",
            _ => return None,
        };
        let (roll, after) = {
            let mut rng = lock(&self.rng);
            (rng.unit(), Duration::from_millis(rng.below(400)))
        };
        let share = self.kill_share;
        let (kill, point) = if roll < share {
            let point = if stage == "SendEmail" {
                "before the claim"
            } else {
                "before it starts"
            };
            (Kill::BeforeStart, point)
        } else if roll < 2.0 * share {
            (Kill::BeforeDelete, "before the SQS delete")
        } else if stage == "CreateEmails" && roll < 3.0 * share {
            (Kill::After(after), "part-way")
        } else {
            return None;
        };
        self.killed(&format!("{stage}: {point}"));
        Some(kill)
    }

    fn ended(&self, request_id: &str, finished: bool) {
        if !finished {
            lock(&self.broken).insert(request_id.to_owned());
        }
    }
}

/// The real SES adapter behind the injector: throttling, and kills just before and just
/// after the call (the invocation dies there, see `runner::crash`).
#[derive(Clone)]
struct ChaosMailer {
    inner: SesMailer,
    injector: Arc<Injector>,
    /// SES's SEND event for every accepted email, as the configuration set publishes it.
    events: mailflow_local::ses_event_source::Publisher,
}

impl Mailer for ChaosMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        let injector = &self.injector;
        let roll = injector.roll();
        let (throttle, kill) = (injector.throttle_share, injector.send_kill_share);
        if roll < throttle {
            injector.throttles.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::Throttled(
                "TooManyRequestsException: Maximum sending rate exceeded (injected)".into(),
            ));
        }
        if roll < throttle + kill {
            injector.killed("SendEmail: after the claim, before SES");
            runner::crash().await
        }
        let request = runner::current_request_id().unwrap_or_default();
        lock(&injector.calls).push((request, email.user_id.clone()));
        let result = self.inner.send(email).await;
        if let Ok(ses_message_id) = &result {
            injector.send_events.fetch_add(1, Ordering::Relaxed);
            self.events
                .sent(&email.campaign_id, &email.user_id, ses_message_id);
        }
        match &result {
            Err(SendError::Unknown(_)) => {
                injector.unknown_outcomes.fetch_add(1, Ordering::Relaxed);
                *lock(&injector.unanswered)
                    .entry(email.user_id.clone())
                    .or_default() += 1;
            }
            Ok(_) if roll < throttle + 2.0 * kill => {
                injector.killed("SendEmail: after SES accepted, before SENT");
                runner::crash().await
            }
            _ => {}
        }
        result
    }
}

/// One GetUsers run, invoked asynchronously as EventBridge and `mailctl run` do: a failed
/// attempt is retried twice.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutcome {
    pub name: String,
    pub attempts: usize,
    /// Whether the first attempt was killed part-way.
    pub killed: bool,
    pub completed: bool,
    pub users_enqueued: u64,
    pub errors: Vec<String>,
}

const ATTEMPTS: usize = 3;

async fn invoke_async<M: Mailer + Clone + 'static>(
    pipeline: Arc<LocalPipeline<M>>,
    name: &str,
    event: Value,
    kill_first_after: Option<Duration>,
) -> RunOutcome {
    let mut outcome = RunOutcome {
        name: name.into(),
        ..Default::default()
    };
    for attempt in 0..ATTEMPTS {
        outcome.attempts += 1;
        let call = pipeline.start(event.clone());
        let result = match kill_first_after.filter(|_| attempt == 0) {
            Some(after) => match tokio::time::timeout(after, call).await {
                Ok(result) => result,
                Err(_) => {
                    outcome.killed = true;
                    Err(anyhow::anyhow!("killed {after:?} into the invocation"))
                }
            },
            None => call.await,
        };
        match result {
            Ok(summary) => {
                outcome.completed = true;
                outcome.users_enqueued = summary["usersEnqueued"].as_u64().unwrap_or(0);
                return outcome;
            }
            Err(err) => {
                outcome.errors.push(format!("{err:#}"));
                tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
            }
        }
    }
    outcome
}

/// Dead-letter messages found after the drain, by whose send they concern.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqAccount {
    pub messages: usize,
    /// The user's record was already SENT (or FAILED): the message was a spare copy.
    pub settled: usize,
    /// The user had no final record yet: redriven, as an operator would, and drained again.
    pub unsettled: usize,
    pub unreadable: usize,
    pub redriven: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    pub options: Option<ChaosOptions>,
    pub users: usize,
    pub audience: usize,
    pub deliverable: usize,
    pub invalid_addresses: usize,
    /// Messages handed to a second invocation, by function.
    pub second_deliveries: BTreeMap<String, usize>,
    /// Invocations killed, by stage and point (GetUsers runs are in `runs`).
    pub kills: BTreeMap<String, usize>,
    pub throttles: usize,
    /// SES calls that got no answer (the AWS outage): outcome unknown.
    pub unknown_outcomes: usize,
    /// SEND events SES published for accepted emails, and the records SesEvents found still
    /// IN_PROGRESS (their attempt killed after SES accepted) and marked SENT before a retry.
    pub send_events: usize,
    pub reconciled: usize,
    pub mongo_restarts: usize,
    pub aws_outages: usize,
    /// The operator's pause and resume part-way (`mailctl pause|resume`), and the emails
    /// recorded SENT between the pause taking hold (its in-hand batches done) and the resume:
    /// must be 0.
    pub paused_seconds: u64,
    pub sent_while_paused: usize,
    pub outage_seconds: u64,
    pub runs: Vec<RunOutcome>,
    pub dlq: DlqAccount,
    pub records: BTreeMap<String, usize>,
    pub emails: usize,
    /// Emails beyond the first for some user, and what the injected faults allow.
    pub extra_emails: usize,
    pub extra_email_bound: usize,
    /// Eligible users without a SENT record and an email.
    pub lost: usize,
    pub ineligible_emailed: usize,
    pub panics: usize,
    pub consumers: BTreeMap<String, ConsumerStats>,
    pub wall_seconds: f64,
    /// Every broken promise; empty when the run passed.
    pub violations: Vec<String>,
}

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

/// Short timeouts so that killed invocations come back within seconds, and more concurrent
/// SendEmail invocations than the default two: every fault multiplies the email jobs (three
/// runs, each message twice), which would otherwise take the local stack half an hour.
fn stack_options(mongodb_uri: String) -> StackOptions {
    StackOptions {
        parameters: BTreeMap::from([
            (names::SEND_RATE_PER_SECOND.into(), "800".into()),
            (names::SEND_MAX_CONCURRENCY.into(), "8".into()),
        ]),
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
    }
}

/// Waits until `reached()` holds.
/// How long the chaos run's pause holds the campaign: longer than its stack's visibility
/// timeouts, so that a message received while paused would come back and be counted.
const PAUSE_HELD: Duration = Duration::from_secs(15);

async fn until(reached: impl Fn() -> bool) {
    while !reached() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn run(template: &std::path::Path, options: &ChaosOptions) -> Result<ChaosReport> {
    count_panics();
    let started = Instant::now();
    let endpoint = mailflow_local::stack_env("AWS_ENDPOINT_URL")?;
    let mongo = mongo::MongoServer::start(&options.secantusd, &std::env::temp_dir()).await?;
    let local = SeededStack::create_with(
        template,
        "chaos",
        options.users,
        options.seed,
        stack_options(mongo.uri()),
    )
    .await?;
    let mongo = Arc::new(tokio::sync::Mutex::new(mongo));
    let upstream = tokio::net::lookup_host(mailflow_local::ses_record::authority(&endpoint)?)
        .await?
        .next()
        .context("resolving AWS_ENDPOINT_URL")?;
    let proxy = Arc::new(proxy::FaultProxy::start(upstream).await?);
    let mut stack = local.stack.clone();
    stack.sdk = stack.sdk.to_builder().endpoint_url(proxy.url()).build();

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
    let mut consumers = pipeline.consumers()?;
    consumers.push(pipeline.ses_events_consumer()?);
    for consumer in &mut consumers {
        consumer.faults = Some(injector.clone() as Arc<dyn Faults>);
    }
    // The event source mappings reach SQS through the proxy too.
    let sqs = aws_sdk_sqs::Client::new(&pipeline.stack.sdk);

    let audience = local.seeded.audience.len();
    let deliverable: BTreeSet<String> = local
        .seeded
        .deliverable()
        .map(|(id, _)| id.clone())
        .collect();
    let campaign = local.campaign.id.to_string();
    let first_kill = Duration::from_millis(50 + Rng::new(options.seed).below(250));
    let mut runs = vec![
        tokio::spawn(invoke_async(
            pipeline.clone(),
            "scheduled",
            local.schedule_event()?,
            Some(first_kill),
        )),
        tokio::spawn(invoke_async(
            pipeline.clone(),
            "overlapping manual run",
            json!({ "campaignId": campaign }),
            None,
        )),
    ];
    let outage = Duration::from_secs(options.outage_seconds);
    let (mongo_restarts, aws_outages) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let sent_while_paused = Arc::new(AtomicUsize::new(0));
    // The operator's own calls reach AWS directly, not through the functions' faults.
    let operator = StackSending {
        mappings: EventSourceMappings::new(
            aws_sdk_lambda::Client::new(&local.stack.sdk),
            local
                .stack
                .event_source_mappings()?
                .split(',')
                .map(str::to_owned)
                .collect(),
        ),
        campaigns: CampaignsTable::new(
            aws_sdk_dynamodb::Client::new(&local.stack.sdk),
            local.stack.table_name(names::CAMPAIGNS_TABLE)?,
        ),
    };
    let disruptions = {
        let (pipeline, mongo, proxy) = (pipeline.clone(), mongo.clone(), proxy.clone());
        let (mongo_restarts, aws_outages) = (mongo_restarts.clone(), aws_outages.clone());
        let sent_while_paused = sent_while_paused.clone();
        let (campaign, wanted) = (campaign.clone(), deliverable.len());
        tokio::spawn(async move {
            let totals = pipeline.totals.clone();
            let enqueued = || lock(&totals).create_emails.enqueued;
            let sent = || lock(&totals).send_email.sent;
            until(|| enqueued() * 10 >= audience * 4).await;
            tracing::warn!("chaos: stopping MongoDB");
            mongo.lock().await.restart(outage).await?;
            mongo_restarts.fetch_add(1, Ordering::SeqCst);
            tracing::warn!("chaos: MongoDB restarted");
            until(|| sent() * 10 >= wanted * 2).await;
            tracing::warn!("chaos: AWS endpoint unreachable");
            proxy.outage(outage).await?;
            aws_outages.fetch_add(1, Ordering::SeqCst);
            tracing::warn!("chaos: AWS endpoint reachable again");
            until(|| sent() * 100 >= wanted * 30).await;
            let change = |reason: &str| StateChange {
                at_ms: mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now()),
                by: "chaos".into(),
                reason: reason.into(),
            };
            tracing::warn!("chaos: pausing the campaign");
            operator
                .pause_campaign(&campaign, &change("chaos pause"))
                .await?
                .map_err(|r| anyhow::anyhow!("pause refused: {r:?}"))?;
            // The batches in hand finish within the state cache's lifetime; then nothing.
            tokio::time::sleep(mailflow::stages::CAMPAIGN_STATE_TTL + Duration::from_secs(2)).await;
            let at_pause = sent();
            tokio::time::sleep(PAUSE_HELD).await;
            sent_while_paused.store(sent() - at_pause, Ordering::SeqCst);
            tracing::warn!("chaos: resuming the campaign");
            operator
                .resume_campaign(&campaign, &change("chaos resume"))
                .await?
                .map_err(|r| anyhow::anyhow!("resume refused: {r:?}"))?;
            until(|| sent() * 100 >= wanted * 35).await;
            let resend = json!({ "campaignId": campaign });
            Ok::<_, anyhow::Error>(invoke_async(pipeline, "manual resend", resend, None).await)
        })
    };
    let max_wait = Duration::from_secs(options.max_seconds);
    let drained = runner::run_until_drained_while(&sqs, consumers, max_wait, || {
        !disruptions.is_finished() || runs.iter().any(|r| !r.is_finished())
    })
    .await;
    if !disruptions.is_finished() {
        disruptions.abort();
    }
    let mut consumer_stats = drained?;
    let mut report = ChaosReport {
        options: Some(options.clone()),
        users: options.users,
        audience,
        deliverable: deliverable.len(),
        invalid_addresses: local.seeded.invalid_addresses.len(),
        mongo_restarts: mongo_restarts.load(Ordering::SeqCst),
        paused_seconds: PAUSE_HELD.as_secs(),
        sent_while_paused: sent_while_paused.load(Ordering::SeqCst),
        aws_outages: aws_outages.load(Ordering::SeqCst),
        outage_seconds: options.outage_seconds,
        ..Default::default()
    };
    runs.push(tokio::spawn(async move {
        match disruptions.await {
            Ok(Ok(resend)) => resend,
            Ok(Err(err)) => RunOutcome {
                name: "manual resend".into(),
                errors: vec![format!("the disruptions failed before it: {err:#}")],
                ..Default::default()
            },
            Err(err) => RunOutcome {
                name: "manual resend".into(),
                errors: vec![format!("the disruptions task ended: {err}")],
                ..Default::default()
            },
        }
    }));
    for run in runs {
        report.runs.push(run.await?);
    }

    // What the dead-letter queues hold, then the operator's redrive and a calm drain.
    let direct_sqs = aws_sdk_sqs::Client::new(&local.stack.sdk);
    let dynamo = aws_sdk_dynamodb::Client::new(&local.stack.sdk);
    let table = local.stack.table_name(names::SENDS_TABLE)?.to_owned();
    let settled: BTreeSet<String> = mailflow_local::ledger_scan::records(
        &dynamo, &table, &campaign,
    )
    .await?
    .into_iter()
    .filter(
        |r| matches!(r.status, Some(s) if s != mailflow::domain::ledger::SendStatus::InProgress),
    )
    .map(|r| r.user_id)
    .collect();
    for (dlq, source) in [
        (names::USERS_DLQ, names::USERS_QUEUE),
        (names::EMAILS_DLQ, names::EMAILS_QUEUE),
        (names::CONTINUATION_DLQ, names::CONTINUATION_QUEUE),
        (names::SES_EVENTS_DLQ, names::SES_EVENTS_QUEUE),
    ] {
        let moved = mailflow_local::queues::redrive_inspecting(
            &direct_sqs,
            local.stack.queue_url(dlq)?,
            local.stack.queue_url(source)?,
            |body| {
                report.dlq.messages += 1;
                let user = serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v["userId"].as_str().map(str::to_owned));
                match user {
                    Some(user) if settled.contains(&user) => report.dlq.settled += 1,
                    Some(_) => report.dlq.unsettled += 1,
                    None => report.dlq.unreadable += 1,
                }
            },
        )
        .await?;
        report.dlq.redriven += moved;
    }
    if report.dlq.redriven > 0 {
        let mut calm: Vec<_> = pipeline.consumers()?;
        calm.push(pipeline.ses_events_consumer()?);
        for (function, stats) in runner::run_until_drained(&direct_sqs, calm, max_wait).await? {
            consumer_stats.insert(format!("{function} (after redrive)"), stats);
        }
    }
    drop(mongo);
    report.consumers = consumer_stats;
    report.second_deliveries = report
        .consumers
        .iter()
        .filter(|(_, s)| s.second_deliveries > 0)
        .map(|(f, s)| (f.clone(), s.second_deliveries))
        .collect();
    report.kills = lock(&injector.kills).clone();
    report.throttles = injector.throttles.load(Ordering::SeqCst);
    report.send_events = injector.send_events.load(Ordering::SeqCst);
    report.reconciled = lock(&pipeline.totals).ses_events.reconciled;
    report.unknown_outcomes = injector.unknown_outcomes.load(Ordering::SeqCst);
    let unrecorded = injector.unrecorded_sends();
    check(
        &mut report,
        &local,
        &endpoint,
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

/// Compares the ledger and the SES record with the seeded audience.
async fn check(
    report: &mut ChaosReport,
    local: &SeededStack,
    endpoint: &str,
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    campaign: &str,
    unrecorded: &Unrecorded,
) -> Result<()> {
    use mailflow::domain::ledger::SendStatus;
    let seeded = &local.seeded;
    let records: BTreeMap<String, _> =
        mailflow_local::ledger_scan::records(dynamo, table, campaign)
            .await?
            .into_iter()
            .map(|r| (r.user_id.clone(), r))
            .collect();
    for record in records.values() {
        *report
            .records
            .entry(
                record
                    .status
                    .map_or("unreadable", |s| s.as_str())
                    .to_owned(),
            )
            .or_default() += 1;
    }
    let owner: BTreeMap<&str, &str> = seeded
        .addresses
        .iter()
        .map(|(user, address)| (address.as_str(), user.as_str()))
        .collect();
    let mut emails: BTreeMap<String, usize> = BTreeMap::new();
    for message in mailflow_local::ses_record::sent_to_domain(endpoint, &local.domain).await? {
        for to in &message.to {
            report.emails += 1;
            let user = owner.get(to.as_str()).copied().unwrap_or(to.as_str());
            *emails.entry(user.to_owned()).or_default() += 1;
        }
    }
    let mut problems: Vec<String> = Vec::new();
    for (user, _) in seeded.deliverable() {
        let status = records.get(user).and_then(|r| r.status);
        let got = emails.get(user).copied().unwrap_or(0);
        if status != Some(SendStatus::Sent) || got == 0 {
            report.lost += 1;
            problems.push(format!("{user}: record {status:?}, {got} emails"));
        }
        let allowed = unrecorded.allowed.get(user).copied().unwrap_or(0);
        let extra = got.saturating_sub(1);
        report.extra_emails += extra;
        report.extra_email_bound += allowed;
        if extra > allowed {
            let calls = unrecorded.called_in.get(user).cloned().unwrap_or_default();
            problems.push(format!(
                "{user}: {got} emails, more than one plus {allowed} unrecorded sends (SES called in {})",
                calls.join(", ")
            ));
        }
    }
    for user in &seeded.invalid_addresses {
        let record = records.get(user);
        let failed_with_reason = record.is_some_and(|r| {
            r.status == Some(SendStatus::Failed)
                && r.last_error.as_deref().is_some_and(|e| !e.is_empty())
        });
        if !failed_with_reason {
            problems.push(format!(
                "{user} (invalid address): not FAILED with a reason"
            ));
        }
    }
    for (user, n) in &emails {
        if !seeded.audience.contains_key(user) || seeded.invalid_addresses.contains(user) {
            report.ineligible_emailed += 1;
            problems.push(format!("{user} is not eligible but got {n} emails"));
        }
    }
    for user in records.keys() {
        if !seeded.audience.contains_key(user) {
            problems.push(format!(
                "{user} is not in the audience but has a send record"
            ));
        }
    }
    if report.sent_while_paused > 0 {
        problems.push(format!(
            "{} emails sent while the campaign was paused (after its in-hand batches)",
            report.sent_while_paused
        ));
    }
    if !problems.is_empty() {
        let shown = problems.len().min(20);
        report.violations.push(format!(
            "{} users wrong: {}{}",
            problems.len(),
            problems[..shown].join("; "),
            if problems.len() > shown { "; ..." } else { "" }
        ));
    }
    Ok(())
}

/// The report as Markdown, for the README's reliability section.
pub fn markdown(r: &ChaosReport) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| out.push_str(&format!("| {k} | {v} |\n"));
    out.push_str("| Chaos run | |\n|---|---|\n");
    line(
        &mut out,
        "users seeded / audience / deliverable",
        format!("{} / {} / {}", r.users, r.audience, r.deliverable),
    );
    line(
        &mut out,
        "invalid addresses in the audience",
        r.invalid_addresses.to_string(),
    );
    line(
        &mut out,
        "paused part-way (pause, then resume), emails sent while paused",
        format!("{} s, {}", r.paused_seconds, r.sent_while_paused),
    );
    for (function, n) in &r.second_deliveries {
        line(
            &mut out,
            &format!("messages delivered twice ({function})"),
            n.to_string(),
        );
    }
    for run in &r.runs {
        line(
            &mut out,
            &format!("GetUsers run: {}", run.name),
            format!(
                "{} attempts{}, {}, {} users enqueued",
                run.attempts,
                if run.killed { " (first killed)" } else { "" },
                if run.completed {
                    "completed"
                } else {
                    "did not complete"
                },
                run.users_enqueued
            ),
        );
    }
    for (point, n) in &r.kills {
        line(&mut out, &format!("killed: {point}"), n.to_string());
    }
    line(&mut out, "SES calls throttled", r.throttles.to_string());
    line(
        &mut out,
        "SES calls without an answer",
        r.unknown_outcomes.to_string(),
    );
    line(
        &mut out,
        "SES SEND events / records they reconciled (IN_PROGRESS made SENT)",
        format!("{} / {}", r.send_events, r.reconciled),
    );
    line(
        &mut out,
        "MongoDB stopped and restarted",
        format!("{} x {} s", r.mongo_restarts, r.outage_seconds),
    );
    line(
        &mut out,
        "AWS endpoint unreachable",
        format!("{} x {} s", r.aws_outages, r.outage_seconds),
    );
    line(
        &mut out,
        "dead-letter messages (spare copies / redriven)",
        format!(
            "{} ({} / {})",
            r.dlq.messages, r.dlq.settled, r.dlq.redriven
        ),
    );
    let records: Vec<String> = r.records.iter().map(|(s, n)| format!("{s} {n}")).collect();
    line(&mut out, "send records", records.join(", "));
    line(&mut out, "emails in the SES record", r.emails.to_string());
    line(&mut out, "emails lost", r.lost.to_string());
    line(
        &mut out,
        "duplicate emails (bound: SES calls in invocations cut short, or unanswered)",
        format!("{} (<= {})", r.extra_emails, r.extra_email_bound),
    );
    line(
        &mut out,
        "ineligible users emailed",
        r.ineligible_emailed.to_string(),
    );
    line(&mut out, "panics", r.panics.to_string());
    line(&mut out, "wall time", format!("{:.0} s", r.wall_seconds));
    if r.violations.is_empty() {
        out.push_str("\nPassed: nothing lost, no duplicate beyond the bound.\n");
    } else {
        out.push_str("\nFAILED:\n");
        for v in &r.violations {
            out.push_str(&format!("- {v}\n"));
        }
    }
    out
}
