//! The pipeline on the local stack: the three stages, SesEvents and Unsubscribe built from
//! the environment template.yaml gives each function (so config wiring is exercised), driven
//! by the runner (and the local Function URL). How each function is built is `wiring`; the
//! drain, with the release schedules that fire during it, is `releases`.

pub mod releases;
mod wiring;

use crate::async_invoke::AsyncInvoker;
use crate::names;
use crate::runner::{self, Consumer, ConsumerStats};
use crate::scheduler::{LocalScheduler, SimClock};
use crate::stack::Stack;
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsBatchResponse;
use mailflow::assemble::{self, LambdaSendEmail};
use mailflow::config::{
    OpenContentFunctionConfig, RateControlConfig, SendEmailConfig, UnsubscribeFunctionConfig,
};
use mailflow::domain::send_rate::SendRate;
use mailflow::ports::Mailer;
use mailflow::runtime::{Invocation, Stage};
use mailflow::stages::create_emails;
use mailflow::stages::send_email;
use mailflow::stages::ses_events;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
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
    /// The AWS endpoint the functions call instead of the stack's (a `FaultSwitch`); the
    /// event source mappings and the scheduler, which are Lambda's, keep the stack's.
    pub aws_endpoint: Option<String>,
}

/// The event source mapping template.yaml gives `function` (its first SQS event), served by
/// `handlers` and ending each invocation after `timeout`.
/// How many environments of `function` its event source runs at once: SendEmail's as many as
/// its send rate needs (`SendRate::environments`) and CreateEmails' as many as keep that rate
/// fed (`fan_out::composers_for`), which RateControl sets on their mappings on Lambda; the
/// others' the template's MaximumConcurrency (without one Lambda scales freely; locally one
/// poller is enough).
pub fn concurrency(stack: &Stack, function: &str) -> Result<u32> {
    if function == SEND_EMAIL || function == CREATE_EMAILS {
        let env = stack.env(crate::names::RATE_CONTROL)?;
        let config = RateControlConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let rate = SendRate::configured(config.send_rate_per_second);
        return Ok(match function == SEND_EMAIL {
            true => rate.environments(&config.send_email),
            false => {
                mailflow::domain::fan_out::composers_for(
                    rate.campaign_wide(),
                    &config.create_emails,
                    config.create_emails_ceiling,
                )
                .environments
            }
        });
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
/// `tally` given each invocation's summary. A failed invocation is an error: as on Lambda,
/// its whole batch comes back.
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
                Err(err) => return Err(format!("the batch is not the function's event: {err}")),
            };
            match stage.invoke(event, &invocation).await {
                Ok((response, summary)) => {
                    tally(&summary);
                    serde_json::to_value(response)
                        .and_then(serde_json::from_value::<SqsBatchResponse>)
                        .map_err(|err| format!("the response is not a batch response: {err}"))
                }
                Err(err) => Err(err.to_string()),
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

/// Locks `m`, still readable after a handler panicked while holding it (one way, everywhere).
pub use mailflow::runtime::lock;

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
    /// GetUsers invoked as Scheduler invokes it (asynchronously).
    get_users_async: Arc<AsyncInvoker>,
    /// The stack's release schedule group, when it has one.
    scheduler: Option<LocalScheduler>,
    /// Schedules fired whose delete has not gone through yet (fired once, not again).
    fired: Mutex<HashSet<String>>,
    /// One look at the schedules at a time (the ticker and a quiet run both look).
    firing: tokio::sync::Mutex<()>,
    releases_fired: Mutex<Vec<releases::ReleaseFired>>,
    options: PipelineOptions,
}

/// `function`'s Timeout: the template's, unless `options` sets another.
fn timeout(stack: &Stack, options: &PipelineOptions, function: &str) -> Result<Duration> {
    Ok(match options.timeouts.get(function) {
        Some(t) => *t,
        None => Duration::from_secs(stack.template.function(function)?.timeout.into()),
    })
}

impl<M: Mailer + Clone + 'static> LocalPipeline<M> {
    fn timeout(&self, function: &'static str) -> Result<Duration> {
        timeout(&self.stack, &self.options, function)
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
        let mut invocation = Invocation::with_timeout("get-users-start", self.timeout(GET_USERS)?);
        invocation.function_arn = Some(get_users_arn(&self.stack));
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
}

/// GetUsers' ARN, its name generated as CloudFormation generates it for this stack: what
/// Lambda tells an invocation it was made through, and what release schedules target.
fn get_users_arn(stack: &Stack) -> String {
    // Recorded at provisioning (`!GetAtt GetUsersFunction.Arn`).
    stack.names.get(GET_USERS).cloned().unwrap_or_default()
}

/// The Unsubscribe function as template.yaml configures it on this stack.
pub async fn unsubscribe(stack: &Stack) -> Result<assemble::LambdaUnsubscribe> {
    let env = stack.env(UNSUBSCRIBE)?;
    let config = UnsubscribeFunctionConfig::from_source(&|k: &str| env.get(k).cloned())?;
    let sdk = crate::iam::function_sdk(&stack.sdk, stack, UNSUBSCRIBE)?;
    Ok(assemble::unsubscribe(config, &sdk).await?)
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
    let sdk = crate::iam::function_sdk(&stack.sdk, stack, OPEN_CONTENT)?;
    Ok(assemble::open_content(config, &sdk, clock).await?)
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
/// function's timeout and a request id of its own, throttled (429) beyond the function's
/// ReservedConcurrentExecutions as Lambda throttles it.
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
    let spec = stack.template.function(function)?;
    let timeout = Duration::from_secs(spec.timeout.into());
    let reserved = spec.reserved_concurrency;
    let name = function.to_owned();
    let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
    crate::function_url::FunctionUrl::serve_reserved(
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
        reserved,
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
