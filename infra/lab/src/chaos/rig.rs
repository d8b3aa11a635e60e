//! The local stack with the chaos run's faults in place (`Rig`): the seeded campaign on a
//! MongoDB the run can stop, a proxy that can cut the functions off AWS, SES behind the fault
//! injector, and the pipeline behind all three, with the short timeouts and the send rate
//! that let it drain in minutes.

use super::faults::{ChaosMailer, Injector};
use super::{mongo, proxy, ChaosOptions, LOCAL_TIME};
use anyhow::{Context, Result};
use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::adapters::event_sources::{EventSourceMappings, StackSending};
use mailflow::adapters::ses::SesMailer;
use mailflow_local::names;
use mailflow_local::pipeline::{
    LocalPipeline, PipelineOptions, SeededStack, CREATE_EMAILS, SEND_EMAIL,
};
use mailflow_local::provision::StackOptions;
use mailflow_local::runner::{self, Faults};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
pub(super) struct Rig {
    pub(super) local: SeededStack,
    pub(super) endpoint: String,
    pub(super) mongo: Arc<tokio::sync::Mutex<mongo::MongoServer>>,
    pub(super) proxy: Arc<proxy::FaultProxy>,
    pub(super) injector: Arc<Injector>,
    pub(super) pipeline: Arc<LocalPipeline<ChaosMailer>>,
}

impl Rig {
    pub(super) async fn set_up(template: &std::path::Path, options: &ChaosOptions) -> Result<Self> {
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
    pub(super) fn consumers(&self) -> Result<Vec<runner::Consumer>> {
        let mut consumers = self.pipeline.consumers()?;
        consumers.push(self.pipeline.ses_events_consumer()?);
        for consumer in &mut consumers {
            consumer.faults = Some(self.injector.clone() as Arc<dyn Faults>);
        }
        Ok(consumers)
    }

    /// The operator's pause and resume, straight to AWS (not through the faults).
    pub(super) fn operator(&self) -> Result<StackSending> {
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
