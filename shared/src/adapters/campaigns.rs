//! The campaigns table (`CAMPAIGNS_TABLE_NAME`): one item per campaign an operator cancelled
//! (`mailctl cancel`), keyed by `campaignId`, with who, when and why. The pipeline's functions
//! read it (`CampaignStates`); only `mailctl` writes it, once per campaign.

use super::describe;
use crate::campaign::Cancellation;
use crate::ledger::LedgerError;
use crate::ports::CampaignStates;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;

#[derive(Clone)]
pub struct CampaignsTable {
    client: Client,
    table: String,
}

impl CampaignsTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn error(&self, operation: &'static str, detail: String) -> LedgerError {
        LedgerError {
            table: self.table.clone(),
            operation,
            detail,
        }
    }

    /// Cancels `campaign_id` (one conditional write): Ok(None) when done, Ok(Some(the earlier
    /// cancellation)) when it was cancelled already; the first cancellation is kept.
    pub async fn cancel(
        &self,
        campaign_id: &str,
        cancellation: &Cancellation,
    ) -> Result<Option<Cancellation>, LedgerError> {
        let item = HashMap::from([
            ("campaignId".into(), AttributeValue::S(campaign_id.into())),
            ("state".into(), AttributeValue::S("CANCELLED".into())),
            (
                "cancelledAt".into(),
                AttributeValue::N(cancellation.at_ms.to_string()),
            ),
            (
                "cancelledBy".into(),
                AttributeValue::S(cancellation.by.clone()),
            ),
            (
                "reason".into(),
                AttributeValue::S(cancellation.reason.clone()),
            ),
        ]);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(campaignId)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(self.cancellation(campaign_id).await?)
            }
            Err(err) => Err(self.error("cancel", describe(&err))),
        }
    }
}

impl CampaignStates for CampaignsTable {
    async fn cancellation(&self, campaign_id: &str) -> Result<Option<Cancellation>, LedgerError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("campaignId", AttributeValue::S(campaign_id.into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("read campaign state", describe(&e)))?;
        Ok(out.item.and_then(|item| {
            let text = |k: &str| match item.get(k) {
                Some(AttributeValue::S(v)) => v.clone(),
                _ => String::new(),
            };
            let at_ms = match item.get("cancelledAt") {
                Some(AttributeValue::N(v)) => v.parse().ok()?,
                _ => return None,
            };
            Some(Cancellation {
                at_ms,
                by: text("cancelledBy"),
                reason: text("reason"),
            })
        }))
    }
}
