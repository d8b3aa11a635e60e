//! The sends ledger in DynamoDB: partition key `userId`, sort key `campaignId`; every write
//! is a single conditional UpdateItem, and refusals are explained by ALL_OLD from the same call.

use crate::ledger::{epoch_ms, Claim, ClaimOutcome, LostClaim, Refusal, SendStatus};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

#[derive(Debug, thiserror::Error)]
#[error("sends table {table}: {operation} failed: {detail}")]
pub struct LedgerError {
    table: String,
    operation: &'static str,
    detail: String,
}

type Item = HashMap<String, AttributeValue>;

#[derive(Clone)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    retention: Duration,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &Item, key: &str) -> Option<String> {
    item.get(key).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &Item, key: &str) -> Option<u64> {
    item.get(key)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// The result of a conditional write: done, or refused with the item as it was.
enum Conditional {
    Done(Option<Item>),
    Refused(Item),
}

impl DynamoLedger {
    pub fn new(client: Client, table: impl Into<String>, retention_days: u32) -> Self {
        Self {
            client,
            table: table.into(),
            retention: Duration::from_secs(u64::from(retention_days) * 86_400),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn error(&self, operation: &'static str, err: SdkError<UpdateItemError>) -> LedgerError {
        LedgerError {
            table: self.table.clone(),
            operation,
            detail: super::describe(&err),
        }
    }

    async fn update(
        &self,
        operation: &'static str,
        user_id: &str,
        campaign_id: &str,
        update: &str,
        condition: &str,
        values: Item,
    ) -> Result<Conditional, LedgerError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("campaignId", s(campaign_id))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#status", "status")
            .set_expression_attribute_values(Some(values))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
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
            Err(err) => Err(self.error(operation, err)),
        }
    }

    /// Claims (userId, campaignId) for one attempt with ONE conditional write: it succeeds on
    /// no record or an IN_PROGRESS record whose lease has ended (and on FAILED when the
    /// operator asked to include failed sends); never on SENT.
    pub async fn claim(
        &self,
        claim: &Claim,
        include_failed: bool,
    ) -> Result<ClaimOutcome, LedgerError> {
        let now = claim.started_at_ms;
        let expires = (SystemTime::now() + self.retention)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut condition = String::from(
            "attribute_not_exists(#status) OR (#status = :in_progress AND leaseUntil <= :now)",
        );
        let mut values: Item = HashMap::from([
            (":in_progress".into(), s(SendStatus::InProgress.as_str())),
            (":now".into(), n(now)),
            (":lease".into(), n(claim.lease_until_ms)),
            (":token".into(), s(&claim.token)),
            (":expires".into(), n(expires)),
            (":zero".into(), n(0)),
            (":one".into(), n(1)),
        ]);
        if include_failed {
            condition.push_str(" OR #status = :failed");
            values.insert(":failed".into(), s(SendStatus::Failed.as_str()));
        }
        let update = "SET #status = :in_progress, startedAt = :now, leaseUntil = :lease, \
                      claimToken = :token, updatedAt = :now, expiresAt = :expires, \
                      attempt = if_not_exists(attempt, :zero) + :one";
        let outcome = self
            .update(
                "claim",
                &claim.user_id,
                &claim.campaign_id,
                update,
                &condition,
                values,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(item) => ClaimOutcome::Claimed {
                attempt: item.as_ref().and_then(|i| get_n(i, "attempt")).unwrap_or(1),
            },
            Conditional::Refused(old) => {
                let status = get_s(&old, "status").as_deref().and_then(SendStatus::parse);
                ClaimOutcome::Refused(match status {
                    Some(SendStatus::Sent) => Refusal::AlreadySent,
                    Some(SendStatus::Failed) => Refusal::Failed {
                        reason: get_s(&old, "lastError").unwrap_or_default(),
                    },
                    // IN_PROGRESS (or unreadable): treat as held; it comes back later.
                    _ => Refusal::Busy {
                        lease_until_ms: get_n(&old, "leaseUntil").unwrap_or(now),
                    },
                })
            }
        })
    }

    async fn finish(
        &self,
        operation: &'static str,
        claim: &Claim,
        update: &str,
        mut values: Item,
    ) -> Result<Result<(), LostClaim>, LedgerError> {
        values.insert(":in_progress".into(), s(SendStatus::InProgress.as_str()));
        values.insert(":token".into(), s(&claim.token));
        values.insert(":now".into(), n(epoch_ms(SystemTime::now())));
        let condition = "#status = :in_progress AND claimToken = :token";
        let outcome = self
            .update(
                operation,
                &claim.user_id,
                &claim.campaign_id,
                update,
                condition,
                values,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(_) => Ok(()),
            Conditional::Refused(old) => Err(LostClaim {
                status: get_s(&old, "status").as_deref().and_then(SendStatus::parse),
                token: get_s(&old, "claimToken"),
                ses_message_id: get_s(&old, "sesMessageId"),
            }),
        })
    }

    /// SENT with the SES message id, only while this attempt still holds the claim.
    pub async fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
    ) -> Result<Result<(), LostClaim>, LedgerError> {
        let values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":id".into(), s(ses_message_id)),
        ]);
        let update =
            "SET #status = :sent, sesMessageId = :id, completedAt = :now, updatedAt = :now \
                      REMOVE leaseUntil";
        self.finish("mark sent", claim, update, values).await
    }

    /// FAILED with the reason (a permanent error), only while this attempt holds the claim.
    pub async fn mark_failed(
        &self,
        claim: &Claim,
        reason: &str,
    ) -> Result<Result<(), LostClaim>, LedgerError> {
        let values = HashMap::from([
            (":failed".into(), s(SendStatus::Failed.as_str())),
            (":reason".into(), s(reason)),
        ]);
        let update = "SET #status = :failed, lastError = :reason, completedAt = :now, \
                      updatedAt = :now REMOVE leaseUntil";
        self.finish("mark failed", claim, update, values).await
    }

    /// Ends the lease now (the send was not attempted), so a retry need not wait it out.
    pub async fn release(
        &self,
        claim: &Claim,
        reason: &str,
    ) -> Result<Result<(), LostClaim>, LedgerError> {
        let values = HashMap::from([(":reason".into(), s(reason)), (":zero".into(), n(0))]);
        let update = "SET leaseUntil = :zero, lastError = :reason, updatedAt = :now";
        self.finish("release", claim, update, values).await
    }
}

impl DynamoLedger {
    /// Counts a suppressed duplicate on a SENT record, so operators see how often the
    /// ledger saved a user from a second email. Only on SENT: it never creates a record.
    pub async fn note_duplicate(
        &self,
        user_id: &str,
        campaign_id: &str,
    ) -> Result<(), LedgerError> {
        let values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":one".into(), n(1)),
        ]);
        self.update(
            "note duplicate",
            user_id,
            campaign_id,
            "ADD duplicatesSuppressed :one",
            "#status = :sent",
            values,
        )
        .await
        .map(|_| ())
    }
}

/// A record of the sends table, as operators and tests read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRecord {
    pub user_id: String,
    pub campaign_id: String,
    pub status: Option<SendStatus>,
    pub attempt: u64,
    pub ses_message_id: Option<String>,
    pub last_error: Option<String>,
    pub lease_until_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub completed_at_ms: Option<u64>,
    pub duplicates_suppressed: u64,
}

impl SendRecord {
    pub fn from_item(item: &Item) -> Self {
        Self {
            user_id: get_s(item, "userId").unwrap_or_default(),
            campaign_id: get_s(item, "campaignId").unwrap_or_default(),
            status: get_s(item, "status").as_deref().and_then(SendStatus::parse),
            attempt: get_n(item, "attempt").unwrap_or(0),
            ses_message_id: get_s(item, "sesMessageId"),
            last_error: get_s(item, "lastError"),
            lease_until_ms: get_n(item, "leaseUntil"),
            started_at_ms: get_n(item, "startedAt"),
            completed_at_ms: get_n(item, "completedAt"),
            duplicates_suppressed: get_n(item, "duplicatesSuppressed").unwrap_or(0),
        }
    }
}
