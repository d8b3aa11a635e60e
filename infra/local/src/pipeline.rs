//! The pipeline on the local stack: the three stages, SesEvents and Unsubscribe built from
//! the environment template.yaml gives each function (so config wiring is exercised), driven
//! by the runner (and the local Function URL).

use crate::names;
use crate::runner::{self, Consumer, ConsumerStats};
use crate::scheduler::{Due, LocalScheduler, SimClock};
use crate::stack::Stack;
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsBatchResponse;
use mailflow::assemble::{self, LambdaSendEmail};
use mailflow::config::{
    CreateEmailsConfig, GetUsersConfig, OpenContentFunctionConfig, SendEmailConfig,
    SesEventsConfig, UnsubscribeFunctionConfig,
};
use mailflow::domain::send_rate::SendRate;
use mailflow::ports::{Clock, Mailer};
use mailflow::runtime::{Invocation, Stage};
use mailflow::stages::create_emails;
use mailflow::stages::send_email;
use mailflow::stages::ses_events;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::names::{
    CREATE_EMAILS, GET_USERS, OPEN_CONTENT, SEND_EMAIL, SES_EVENTS, UNSUBSCRIBE,
};

/// Per-function adjustments over template.yaml (tests that need short timeouts).
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    pub env: BTreeMap<&'static str, BTreeMap<String, String>>,
    pub timeouts: BTreeMap<&'static str, Duration>,
}

/// The event source mapping template.yaml gives `function` (its first SQS event), served by
/// `handlers` and ending each invocation after `timeout`.
/// How many environments of `function` its event source runs at once: SendEmail's as many as
/// its send rate needs (`SendRate::environments`, which SendEmail sets on its mapping on
/// Lambda), the others' the template's MaximumConcurrency (without one Lambda scales freely;
/// locally one poller is enough).
pub fn concurrency(stack: &Stack, function: &str) -> Result<u32> {
    if function == SEND_EMAIL {
        let env = stack.env(SEND_EMAIL)?;
        let config = SendEmailConfig::from_source(&|k: &str| env.get(k).cloned())?;
        return Ok(SendRate::configured(config.send_rate_per_second).environments());
    }
    let event = stack.template.function(function)?.sqs_events.first();
    Ok(event.and_then(|e| e.maximum_concurrency).unwrap_or(1))
}

pub fn consumer(
    stack: &Stack,
    function: &str,
    handlers: Vec<runner::Handler>,
    timeout: Duration,
) -> Result<Consumer> {
    let event = stack
        .template
        .function(function)?
        .sqs_events
        .first()
        .with_context(|| format!("{function} has no SQS event source in template.yaml"))?;
    Ok(Consumer {
        function: function.to_owned(),
        queue_url: stack.queue_url(&event.queue)?.to_owned(),
        queue_arn: stack
            .queue_arns
            .get(&event.queue)
            .cloned()
            .unwrap_or_default(),
        batch_size: event.batch_size,
        batching_window: Duration::from_secs(event.batching_window_seconds.into()),
        long_poll: runner::QUICK_LONG_POLL,
        concurrency: concurrency(stack, function)?,
        timeout,
        handlers,
        faults: None,
        mapping: stack.names.get(&event.mapping).map(|uuid| {
            Arc::new(crate::event_sources::MappingState::new(
                &stack.sdk,
                uuid.clone(),
            ))
        }),
    })
}

/// `stage` as its event source mapping invokes it: the batch handed over as the function's
/// JSON event, its JSON response read as a partial batch response (as Lambda does), and
/// `tally` given each invocation's summary. A failed invocation is logged and its batch
/// acknowledged.
pub fn stage_handler<S: Stage + 'static>(
    stage: Arc<S>,
    tally: impl Fn(&S::Summary) + Send + Sync + 'static,
) -> runner::Handler {
    let tally = Arc::new(tally);
    runner::handler(move |event, invocation| {
        let (stage, tally) = (stage.clone(), tally.clone());
        async move {
            let event = match serde_json::to_value(event).and_then(serde_json::from_value) {
                Ok(event) => event,
                Err(err) => {
                    tracing::error!(error = %err, "the batch is not the function's event");
                    return SqsBatchResponse::default();
                }
            };
            match stage.invoke(event, &invocation).await {
                Ok((response, summary)) => {
                    tally(&summary);
                    serde_json::to_value(response)
                        .and_then(serde_json::from_value)
                        .unwrap_or_default()
                }
                Err(err) => {
                    tracing::error!(error = %err, "invocation failed");
                    SqsBatchResponse::default()
                }
            }
        }
    })
}

/// Campaign totals across every invocation.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub create_emails: create_emails::Summary,
    pub send_email: send_email::Summary,
    pub ses_events: ses_events::Summary,
}

/// Locks `m`, still readable after a handler panicked while holding it.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct LocalPipeline<M> {
    pub stack: Stack,
    pub get_users: Arc<assemble::LambdaGetUsers>,
    pub create_emails: Arc<assemble::LambdaCreateEmails>,
    /// One SendEmail per execution environment (MaximumConcurrency of its event source).
    pub send_email: Vec<Arc<LambdaSendEmail<M>>>,
    pub send_config: SendEmailConfig,
    pub ses_events: Arc<assemble::LambdaSesEvents>,
    pub totals: Arc<Mutex<Totals>>,
    /// The clock GetUsers decides local times by; `drain` moves it to the next release
    /// schedule when nothing else is happening.
    pub clock: Arc<SimClock>,
    options: PipelineOptions,
}

fn env_for(
    stack: &Stack,
    options: &PipelineOptions,
    function: &'static str,
) -> Result<BTreeMap<String, String>> {
    let mut env = stack.env(function)?;
    if let Some(overrides) = options.env.get(function) {
        env.extend(overrides.clone());
    }
    Ok(env)
}

impl<M: Mailer + Clone + 'static> LocalPipeline<M> {
    /// Builds the stages; `mailer` makes SendEmail's mail service (the real SES adapter, or a
    /// wrapper around it that injects faults).
    pub async fn build(
        stack: Stack,
        options: PipelineOptions,
        mailer: impl FnOnce(&aws_config::SdkConfig, &SendEmailConfig) -> M,
    ) -> Result<Self> {
        let sdk = &stack.sdk;
        let env = env_for(&stack, &options, GET_USERS)?;
        let config = GetUsersConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let clock = Arc::new(SimClock::default());
        let get_users = assemble::get_users(config, sdk)
            .await?
            .with_clock(clock.clone());

        let env = env_for(&stack, &options, CREATE_EMAILS)?;
        let config = CreateEmailsConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let create_emails = assemble::create_emails(config, sdk, "create-emails", true).await?;

        let env = env_for(&stack, &options, SEND_EMAIL)?;
        let send_config = SendEmailConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let mailer = mailer(sdk, &send_config);
        let mut send_email = Vec::new();
        for _ in 0..concurrency(&stack, SEND_EMAIL)? {
            let stage = assemble::send_email(send_config.clone(), sdk, mailer.clone());
            send_email.push(Arc::new(stage));
        }

        let env = env_for(&stack, &options, SES_EVENTS)?;
        let config = SesEventsConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let ses_events = assemble::ses_events(config, sdk).await?;

        Ok(Self {
            stack,
            get_users: Arc::new(get_users),
            create_emails: Arc::new(create_emails),
            send_email,
            send_config,
            ses_events: Arc::new(ses_events),
            totals: Arc::default(),
            clock,
            options,
        })
    }

    fn timeout(&self, function: &'static str) -> Result<Duration> {
        Ok(match self.options.timeouts.get(function) {
            Some(t) => *t,
            None => Duration::from_secs(self.stack.template.function(function)?.timeout.into()),
        })
    }

    fn consumer(&self, function: &'static str, handlers: Vec<runner::Handler>) -> Result<Consumer> {
        consumer(&self.stack, function, handlers, self.timeout(function)?)
    }

    /// The three event source mappings of template.yaml.
    pub fn consumers(&self) -> Result<Vec<Consumer>> {
        let create_emails = {
            let totals = self.totals.clone();
            stage_handler(self.create_emails.clone(), move |summary| {
                lock(&totals).create_emails.absorb(summary)
            })
        };
        Ok(vec![
            self.consumer(
                GET_USERS,
                vec![stage_handler(self.get_users.clone(), |_| ())],
            )?,
            self.consumer(CREATE_EMAILS, vec![create_emails])?,
            self.consumer(SEND_EMAIL, self.send_handlers())?,
        ])
    }

    /// SesEvents' event source mapping (the SES events queue; locally, tests fill it).
    pub fn ses_events_consumer(&self) -> Result<Consumer> {
        let totals = self.totals.clone();
        let handler = stage_handler(self.ses_events.clone(), move |summary| {
            lock(&totals).ses_events.absorb(summary)
        });
        self.consumer(SES_EVENTS, vec![handler])
    }

    /// SendEmail's event source mapping alone (tests that enqueue email jobs themselves).
    pub fn send_consumer(&self) -> Result<Consumer> {
        self.consumer(SEND_EMAIL, self.send_handlers())
    }

    fn send_handlers(&self) -> Vec<runner::Handler> {
        self.send_email
            .iter()
            .map(|stage| {
                let totals = self.totals.clone();
                stage_handler(stage.clone(), move |summary| {
                    lock(&totals).send_email.absorb(summary)
                })
            })
            .collect()
    }

    /// Invokes GetUsers with `event` (the schedule event or a manual payload).
    pub async fn start(&self, event: Value) -> Result<Value> {
        let invocation = Invocation::with_timeout("get-users-start", self.timeout(GET_USERS)?);
        let response = self.get_users.handle(event, &invocation).await?;
        Ok(serde_json::to_value(response)?)
    }

    /// Starts a campaign and runs every consumer until the queues drain.
    pub async fn run(&self, event: Value, max_wait: Duration) -> Result<RunReport> {
        let started = std::time::Instant::now();
        let get_users = self.start(event).await?;
        let consumers = self.drain(max_wait).await?;
        Ok(RunReport {
            get_users,
            consumers,
            totals: lock(&self.totals).clone(),
            wall_time: started.elapsed(),
        })
    }

    /// Runs every consumer until the queues drain and no send slot is left to release
    /// (`run` after `start`): when the queues are quiet, a due release schedule fires, and
    /// when none is due the clock jumps to the next one.
    pub async fn drain(&self, max_wait: Duration) -> Result<BTreeMap<String, ConsumerStats>> {
        let mut stats: BTreeMap<String, ConsumerStats> = BTreeMap::new();
        loop {
            for (function, round) in self.drain_queues(max_wait).await? {
                stats.entry(function).or_default().add(&round);
            }
            if self.release_next().await?.is_none() {
                return Ok(stats);
            }
        }
    }

    /// Runs every consumer until the queues drain, firing no schedule.
    pub async fn drain_queues(
        &self,
        max_wait: Duration,
    ) -> Result<BTreeMap<String, ConsumerStats>> {
        let sqs = aws_sdk_sqs::Client::new(&self.stack.sdk);
        runner::run_until_drained(&sqs, self.consumers()?, max_wait).await
    }

    /// Moves the clock to the next release schedule (if it is ahead) and fires every
    /// schedule due then; the instant it moved to, or `None` when no schedule is left.
    pub async fn release_next(&self) -> Result<Option<i64>> {
        let scheduler = self.scheduler()?;
        let schedules = scheduler.schedules().await?;
        let Some(next) = schedules.first() else {
            return Ok(None);
        };
        self.clock.advance_to(next.at_ms);
        let now = self.clock.now_ms();
        for due in schedules.iter().filter(|d| d.at_ms <= now) {
            self.fire(&scheduler, due).await?;
        }
        Ok(Some(next.at_ms))
    }

    /// The stack's release schedules.
    pub fn scheduler(&self) -> Result<LocalScheduler> {
        let group = self
            .stack
            .names
            .get(names::RELEASE_SCHEDULE_GROUP)
            .context("the stack has no release schedule group")?;
        Ok(LocalScheduler::new(&self.stack.sdk, group))
    }

    /// What EventBridge Scheduler does at a schedule's time: invokes GetUsers with its input
    /// (a failure is retried, as the schedule's retry policy does), then deletes it.
    async fn fire(&self, scheduler: &LocalScheduler, due: &Due) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.start(due.input.clone()).await {
                Ok(_) => break,
                Err(err) if attempt < 3 => {
                    attempt += 1;
                    tracing::warn!(reason = %err, schedule = %due.name, "release failed; the schedule tries again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(err) => return Err(err.context(format!("schedule {}", due.name))),
            }
        }
        scheduler.delete(&due.name).await
    }
}

/// The Unsubscribe function as template.yaml configures it on this stack.
pub async fn unsubscribe(stack: &Stack) -> Result<assemble::LambdaUnsubscribe> {
    let env = stack.env(UNSUBSCRIBE)?;
    let config = UnsubscribeFunctionConfig::from_source(&|k: &str| env.get(k).cloned())?;
    Ok(assemble::unsubscribe(config, &stack.sdk).await?)
}

/// Serves the Unsubscribe function on a local Function URL (`port` 0: any free port).
pub async fn serve_unsubscribe(
    stack: &Stack,
    port: u16,
) -> Result<crate::function_url::FunctionUrl> {
    serve_function_url(stack, UNSUBSCRIBE, unsubscribe(stack).await?, port).await
}

/// The OpenContent function as template.yaml configures it on this stack, on `clock`.
pub async fn open_content(
    stack: &Stack,
    clock: Arc<dyn mailflow::ports::Clock>,
) -> Result<assemble::LambdaOpenContent> {
    let env = stack.env(OPEN_CONTENT)?;
    let config = OpenContentFunctionConfig::from_source(&|k: &str| env.get(k).cloned())?;
    Ok(assemble::open_content(config, &stack.sdk, clock).await?)
}

/// Serves the OpenContent function (the pick images, badges and links) on a local Function
/// URL (`port` 0: any free port), on `clock`.
pub async fn serve_open_content(
    stack: &Stack,
    port: u16,
    clock: Arc<dyn mailflow::ports::Clock>,
) -> Result<crate::function_url::FunctionUrl> {
    serve_function_url(stack, OPEN_CONTENT, open_content(stack, clock).await?, port).await
}

/// A Function URL's function on 127.0.0.1: each request is one invocation, with the
/// function's timeout and a request id of its own.
async fn serve_function_url<S>(
    stack: &Stack,
    function: &str,
    stage: S,
    port: u16,
) -> Result<crate::function_url::FunctionUrl>
where
    S: Stage<Event = Value, Response = Value, Error = std::convert::Infallible> + 'static,
{
    let stage = Arc::new(stage);
    let timeout = Duration::from_secs(stack.template.function(function)?.timeout.into());
    let name = function.to_owned();
    let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
    crate::function_url::FunctionUrl::serve(
        port,
        Arc::new(move |event| {
            let stage = stage.clone();
            let n = requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let invocation = Invocation::with_timeout(format!("{name}-{n}"), timeout);
            Box::pin(async move {
                match stage.invoke(event, &invocation).await {
                    Ok((response, _)) => response,
                    Err(never) => match never {},
                }
            })
        }),
    )
    .await
}

#[derive(Clone, Debug)]
pub struct RunReport {
    pub get_users: Value,
    pub consumers: BTreeMap<String, ConsumerStats>,
    pub totals: Totals,
    pub wall_time: Duration,
}

/// A freshly provisioned local stack with synthetic users seeded for this week's campaign.
pub struct SeededStack {
    pub stack: Stack,
    pub seeded: crate::seed::SeedReport,
    pub campaign: mailflow::domain::campaign::Campaign,
    /// The mail domain of every seeded address (the SES record is filtered by it).
    pub domain: String,
    /// The moment the campaign was started for: the schedule event's time.
    pub now: time::OffsetDateTime,
    /// The seeded database.
    pub db: mongodb::Database,
}

impl SeededStack {
    /// Provisions template.yaml under a fresh `{name}-{timestamp}` prefix, with its own
    /// database and mail domain, and seeds `users` users (deterministic for `seed`).
    pub async fn create(
        template: &std::path::Path,
        name: &str,
        users: usize,
        seed: u64,
        parameters: BTreeMap<String, String>,
    ) -> Result<Self> {
        let options = crate::provision::StackOptions {
            parameters,
            ..Default::default()
        };
        Self::create_with(template, name, users, seed, options).await
    }

    /// As `create`, with queue timeouts from `options` and its MongoDB URI instead of
    /// MONGODB_URI's (the prefix is made here).
    pub async fn create_with(
        template: &std::path::Path,
        name: &str,
        users: usize,
        seed: u64,
        mut options: crate::provision::StackOptions,
    ) -> Result<Self> {
        let var = crate::stack_env;
        let mongo_uri = match options.mongodb_uri.take() {
            Some(uri) => uri,
            None => var("MONGODB_URI")?,
        };
        var("AWS_ENDPOINT_URL")?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis();
        let prefix = format!("{name}-{stamp}");
        let database = format!("mailflow_{name}_{stamp}");
        let domain = format!("{prefix}.example.com");
        options
            .parameters
            .insert(names::MONGODB_DATABASE.into(), database.clone());
        options.prefix = prefix;
        options.mongodb_uri = Some(mongo_uri.clone());
        let sdk = mailflow::adapters::aws_config().await;
        let stack =
            crate::provision::provision(&sdk, crate::template::Template::load(template)?, options)
                .await?;
        let now = time::OffsetDateTime::now_utc();
        let campaign = mailflow::domain::campaign::Campaign::for_schedule(now);
        let mongo = mailflow::config::MongoConfig {
            uri: mailflow::config::SecretRef::Plain(mongo_uri),
            database,
            max_pool_size: 4,
        };
        let db = mailflow::adapters::mongo::connect(&mongo, &sdk, "mailctl").await?;
        let seeded = crate::seed::seed(
            &db,
            &crate::seed::SeedOptions {
                users,
                seed,
                domain: domain.clone(),
                window: campaign.window,
            },
        )
        .await?;
        Ok(Self {
            stack,
            seeded,
            campaign,
            domain,
            now,
            db,
        })
    }

    /// The event EventBridge's weekly schedule sends GetUsers.
    pub fn schedule_event(&self) -> Result<Value> {
        Ok(serde_json::json!({
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "time": self.now.format(&time::format_description::well_known::Rfc3339)?,
        }))
    }
}
