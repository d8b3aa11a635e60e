//! Pending one-click leaves in the sends table: written when MongoDB did not take a
//! one-click unsubscribe, read by CreateEmails, ended by a save that chooses the topic again.

use super::SendRecords;
use crate::adapters::batch_get::{batch_get, BatchGetError, BatchGetPolicy, Unprocessed};
use crate::adapters::item::{n, number, s, text, Item};
use crate::domain::ledger::{LedgerError, SendKey};
use crate::domain::topics::TopicId;
use crate::ports::{pending_leave_key, PendingLeaves};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use std::collections::{HashMap, HashSet};

/// How the leaves of a batch's users are read: eventually consistent, the keys DynamoDB
/// leaves unprocessed asked again (five calls at most).
const LEAVES_READ: BatchGetPolicy = BatchGetPolicy {
    unprocessed: Unprocessed::Retry { calls: 5 },
    consistent: false,
};

/// One-click unsubscribes MongoDB did not take: an item of their own per (user, topic),
/// `leftAt` and `rejoinedAt`, no `status` (no ledger write ever matches it) and no
/// `campaignShard` (not in a campaign's index), kept without expiry.
impl PendingLeaves for SendRecords {
    async fn record_leave(
        &self,
        key: &SendKey,
        topic: &TopicId,
        at_ms: u64,
    ) -> Result<(), LedgerError> {
        let failed = |err: SdkError<UpdateItemError>| self.error("record leave", err);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(key.user_id()))
            .key("campaignId", s(pending_leave_key(topic)))
            .update_expression("SET leftAt = :at, fromCampaign = :campaign")
            .expression_attribute_values(":at", n(at_ms))
            .expression_attribute_values(":campaign", s(key.campaign_id()))
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn rejoined(
        &self,
        user_id: &str,
        topic: &TopicId,
        at_ms: u64,
    ) -> Result<(), LedgerError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("campaignId", s(pending_leave_key(topic)))
            .update_expression("SET rejoinedAt = :at")
            // Only over a leave: a save never creates the item.
            .condition_expression("attribute_exists(leftAt)")
            .expression_attribute_values(":at", n(at_ms))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(err) => Err(self.error("rejoined", err)),
        }
    }

    async fn standing_leaves(
        &self,
        users: &[String],
        topic: &TopicId,
    ) -> Result<HashSet<String>, LedgerError> {
        let failed = |detail: String| LedgerError {
            table: self.table.clone(),
            operation: "read pending leaves",
            detail,
        };
        let sort_key = pending_leave_key(topic);
        let mut unique: Vec<&String> = users.iter().collect();
        unique.sort();
        unique.dedup();
        let keys: Vec<Item> = unique
            .into_iter()
            .map(|u| {
                HashMap::from([
                    ("userId".into(), s(u.as_str())),
                    ("campaignId".into(), s(&sort_key)),
                ])
            })
            .collect();
        let items = batch_get(
            &self.client,
            &self.table,
            keys,
            Some("userId, leftAt, rejoinedAt"),
            LEAVES_READ,
        )
        .await
        .map_err(|e| {
            failed(match e {
                BatchGetError::Request(detail) | BatchGetError::Call(detail) => detail,
                BatchGetError::Unprocessed(keys) => format!("{keys} keys still unprocessed"),
            })
        })?;
        let mut standing = HashSet::new();
        for item in &items {
            let left = number::<u64>(item, "leftAt").unwrap_or(0);
            let stands = number::<u64>(item, "rejoinedAt").is_none_or(|r| r < left);
            if let (true, Some(user)) = (stands, text(item, "userId")) {
                standing.insert(user);
            }
        }
        Ok(standing)
    }
}
