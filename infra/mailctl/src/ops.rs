//! Operator actions on a deployed or local stack: the resources a command works on, and a
//! campaign's status read from every store it touches (the ledger, the campaigns table, the
//! queues, the waiting room, the pick counters, the rate item) through the AWS SDK and
//! mailflow's adapters. Resources are named by the stack's outputs in the environment (AWS)
//! or by the prefix `mailctl provision` made them under (local stack, `local_stack`).

use crate::status::{CampaignStatus, StatusFacts};
use anyhow::Result;
use aws_sdk_sqs::Client as Sqs;
use mailflow::adapters::event_sources::EventSourceMappings;
use mailflow::adapters::rate_item::RateItem;
use mailflow::domain::campaign::CampaignId;
use mailflow::ports::RateBucket;
use std::collections::BTreeMap;

/// The resources an operator command works on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub sends_table: String,
    pub campaigns_table: String,
    /// Local-time campaigns' waiting users (`WaitingRoom`).
    pub waiting_table: String,
    /// Open-time content: frozen picks, clicks, the campaign's open and click counts.
    pub open_content_table: String,
    pub users_queue: String,
    pub users_dlq: String,
    pub emails_queue: String,
    pub emails_dlq: String,
    /// GetUsers' checkpoints, continued releases and failed asynchronous invocations (None:
    /// a stack deployed before these outputs; `status` then does not count its DLQ).
    pub continuation_queue: Option<String>,
    pub continuation_dlq: Option<String>,
    pub ses_events_queue: String,
    pub ses_events_dlq: String,
    /// GetUsers' function name (AWS only: starts campaigns by invoking it).
    pub get_users_function: Option<String>,
    /// The event source mappings of the campaign queues (what a pause disables).
    pub event_source_mappings: Vec<String>,
}

fn split_ids(ids: &str) -> Vec<String> {
    ids.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Target {
    /// From the stack's outputs, exported as MAILFLOW_* variables (`stack_outputs`).
    pub fn from_env() -> Result<Self> {
        use crate::stack_outputs as out;
        Ok(Self {
            sends_table: out::SENDS_TABLE.read()?,
            campaigns_table: out::CAMPAIGNS_TABLE.read()?,
            waiting_table: out::WAITING_TABLE.read()?,
            open_content_table: out::OPEN_CONTENT_TABLE.read()?,
            users_queue: out::USERS_QUEUE.read()?,
            users_dlq: out::USERS_DLQ.read()?,
            emails_queue: out::EMAILS_QUEUE.read()?,
            emails_dlq: out::EMAILS_DLQ.read()?,
            continuation_queue: out::CONTINUATION_QUEUE.read().ok(),
            continuation_dlq: out::CONTINUATION_DLQ.read().ok(),
            ses_events_queue: out::SES_EVENTS_QUEUE.read()?,
            ses_events_dlq: out::SES_EVENTS_DLQ.read()?,
            get_users_function: out::GET_USERS_FUNCTION.read().ok(),
            event_source_mappings: out::EVENT_SOURCE_MAPPINGS
                .read()
                .map(|ids| split_ids(&ids))
                .unwrap_or_default(),
        })
    }
}

/// The stack's campaigns table (each campaign's state).
pub fn campaigns_table(
    dynamo: &aws_sdk_dynamodb::Client,
    target: &Target,
) -> mailflow::adapters::campaigns::CampaignsTable {
    mailflow::adapters::campaigns::CampaignsTable::new(dynamo.clone(), &target.campaigns_table)
}

/// The campaign queues' event source mappings.
pub fn mappings(sdk: &aws_config::SdkConfig, target: &Target) -> EventSourceMappings {
    EventSourceMappings::new(
        aws_sdk_lambda::Client::new(sdk),
        target.event_source_mappings.clone(),
    )
}

/// The mappings by state; empty when they are not known or cannot be read (status still
/// answers from the ledger and the queues).
async fn consumer_states(sdk: &aws_config::SdkConfig, target: &Target) -> BTreeMap<String, usize> {
    let mut states = BTreeMap::new();
    if let Ok(listed) = mappings(sdk, target).states().await {
        for (_, state) in listed {
            *states.entry(state).or_default() += 1;
        }
    }
    states
}

/// Messages in a queue, visible, in flight or delayed.
async fn queue_depth(sqs: &Sqs, url: &str) -> Result<u64> {
    let (visible, invisible) = mailflow::adapters::sqs::queue_depth(sqs, url).await?;
    Ok(visible + invisible)
}

/// The campaign's status now, from what the stores hold of it.
pub async fn status(
    sdk: &aws_config::SdkConfig,
    target: &Target,
    campaign: &str,
) -> Result<CampaignStatus> {
    let facts = facts(sdk, target, campaign).await?;
    let now_ms = mailflow::domain::ledger::epoch_ms(std::time::SystemTime::now());
    Ok(CampaignStatus::of(&facts, now_ms))
}

/// Reads what every store holds of `campaign`.
async fn facts(
    sdk: &aws_config::SdkConfig,
    target: &Target,
    campaign: &str,
) -> Result<StatusFacts> {
    let (sqs, dynamo) = (&Sqs::new(sdk), &aws_sdk_dynamodb::Client::new(sdk));
    let records =
        mailflow::adapters::sends::campaign_records(dynamo, &target.sends_table, campaign).await?;
    let record = campaigns_table(dynamo, target).record(campaign).await?;
    let mut facts = StatusFacts {
        campaign: campaign.to_owned(),
        records,
        record,
        users_pending: queue_depth(sqs, &target.users_queue).await?,
        emails_pending: queue_depth(sqs, &target.emails_queue).await?,
        users_dlq: queue_depth(sqs, &target.users_dlq).await?,
        emails_dlq: queue_depth(sqs, &target.emails_dlq).await?,
        continuation_dlq: match &target.continuation_dlq {
            Some(url) => Some(queue_depth(sqs, url).await?),
            None => None,
        },
        consumers: consumer_states(sdk, target).await,
        ..Default::default()
    };
    if let Ok(id) = CampaignId::parse(campaign) {
        use mailflow::ports::OpenContentStore;
        facts.waiting =
            mailflow::adapters::waiting::read_report(dynamo, &target.waiting_table, &id)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        facts.open_content = mailflow::adapters::open_content::OpenContentTable::new(
            dynamo.clone(),
            &target.open_content_table,
        )
        .counters(&id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    facts.shared_rate = RateItem::new(dynamo.clone(), &target.campaigns_table)
        .read()
        .await?
        .rate;
    Ok(facts)
}
