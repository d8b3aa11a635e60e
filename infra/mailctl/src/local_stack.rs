//! A stack on the local stack: the resources `mailctl provision` / `demo` created under a
//! prefix, named by template.yaml's logical ids (`mailflow_local::names`). Only the local
//! commands and the tests against the local stack find their target this way.

use crate::ops::Target;
use anyhow::{Context, Result};
use aws_sdk_sqs::Client as Sqs;
use mailflow_local::names;

impl Target {
    /// A stack `mailctl provision` / `demo` created under `prefix` on the local stack.
    pub async fn from_prefix(sdk: &aws_config::SdkConfig, prefix: &str) -> Result<Self> {
        let sqs = &Sqs::new(sdk);
        let lambda = aws_sdk_lambda::Client::new(sdk);
        let mut event_source_mappings = Vec::new();
        for function in names::CAMPAIGN_CONSUMERS {
            let name = format!("{prefix}-{function}");
            let listed = lambda
                .list_event_source_mappings()
                .function_name(&name)
                .send()
                .await
                .with_context(|| format!("listing the event source mappings of {name}"))?;
            event_source_mappings.extend(
                listed
                    .event_source_mappings()
                    .iter()
                    .filter_map(|m| m.uuid.clone()),
            );
        }
        let url = |logical: &'static str| async move {
            let name = format!("{prefix}-{logical}");
            sqs.get_queue_url()
                .queue_name(&name)
                .send()
                .await
                .with_context(|| format!("queue {name} not found: is {prefix:?} the prefix `mailctl provision` printed?"))?
                .queue_url
                .context("GetQueueUrl returned no URL")
        };
        Ok(Self {
            sends_table: format!("{prefix}-{}", names::SENDS_TABLE),
            campaigns_table: format!("{prefix}-{}", names::CAMPAIGNS_TABLE),
            waiting_table: format!("{prefix}-{}", names::WAITING_TABLE),
            open_content_table: format!("{prefix}-{}", names::OPEN_CONTENT_TABLE),
            users_queue: url(names::USERS_QUEUE).await?,
            users_dlq: url(names::USERS_DLQ).await?,
            emails_queue: url(names::EMAILS_QUEUE).await?,
            emails_dlq: url(names::EMAILS_DLQ).await?,
            continuation_queue: Some(url(names::CONTINUATION_QUEUE).await?),
            continuation_dlq: Some(url(names::CONTINUATION_DLQ).await?),
            ses_events_queue: url(names::SES_EVENTS_QUEUE).await?,
            ses_events_dlq: url(names::SES_EVENTS_DLQ).await?,
            get_users_function: None,
            event_source_mappings,
        })
    }
}
