//! The sends table in DynamoDB: partition key `userId`, sort key `campaignId`. One item per
//! send (the ledger's record, `ledger`, with what the SES events and the Unsubscribe function
//! note on it, `notes`), and beside them, under sort keys no campaign id can have, each
//! user's frequency caps (`caps`) and pending one-click leaves (`leaves`). `records` reads a
//! campaign's records back; `experiment` tallies an A/B test from them.

mod caps;
mod experiment;
mod leaves;
mod ledger;
mod notes;
mod records;

pub use experiment::experiment_tallies;
pub use records::{campaign_records, SendRecord, CAMPAIGN_INDEX};

use super::describe;
use super::item::{s, Item};
use crate::domain::ledger::{LedgerError, LedgerWrite, SendKey};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use std::time::Duration;

/// The sends table for the writes that only touch existing records (SES events, the
/// Unsubscribe function): it never creates or claims one.
#[derive(Clone)]
pub struct SendRecords {
    client: Client,
    table: String,
}

/// The sends table as SendEmail uses it: claims, marks, releases.
#[derive(Clone)]
pub struct SendsLedger {
    records: SendRecords,
    retention: Duration,
}

/// The result of a conditional write: done, or refused with the item as it was.
enum Conditional {
    Done(Option<Item>),
    Refused(Item),
}

impl SendsLedger {
    pub fn new(client: Client, table: impl Into<String>, retention_days: u32) -> Self {
        Self {
            records: SendRecords::new(client, table),
            retention: Duration::from_secs(u64::from(retention_days) * 86_400),
        }
    }

    pub fn table(&self) -> &str {
        self.records.table()
    }
}

impl SendRecords {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn error(&self, operation: &'static str, err: SdkError<UpdateItemError>) -> LedgerError {
        self.failed(operation, describe(&err))
    }

    fn failed(&self, operation: &'static str, detail: String) -> LedgerError {
        LedgerError {
            table: self.table.clone(),
            operation,
            detail,
        }
    }

    async fn update(
        &self,
        write: LedgerWrite,
        key: &SendKey,
        update: &str,
        condition: &str,
        values: Item,
        returns: ReturnValue,
    ) -> Result<Conditional, LedgerError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(key.user_id()))
            .key("campaignId", s(key.campaign_id()))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#status", "status")
            .set_expression_attribute_values(Some(values))
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Conditional::Done(out.attributes)),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(ccf) = e.err() else {
                    unreachable!("matched above")
                };
                Ok(Conditional::Refused(
                    ccf.item().cloned().unwrap_or_default(),
                ))
            }
            Err(err) => Err(self.error(write.operation(), err)),
        }
    }
}
