//! Over 450 lines because every conditional write of the ledger is here, once: each is a
//! single conditional UpdateItem, and refusals are explained by ALL_OLD from the same call.
//!
//! The sends ledger in DynamoDB: partition key `userId`, sort key `campaignId`.

use crate::domain::campaign::CampaignId;
use crate::domain::experiment::{Assignment, Experiment, Tally};
use crate::domain::guardrails::{CapEntry, CapHistory, Skip};
use crate::domain::ledger::{
    campaign_shards, epoch_ms, Claim, ClaimOutcome, Engagement, LostClaim, Reclaim, Refusal,
    SendKey, SendStatus,
};
use crate::domain::topics::TopicId;
use crate::ports::ExperimentResults;
use crate::ports::{
    pending_leave_key, CapLedger, Marked, PendingLeaves, SendLedger, SendRecordNotes,
};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

pub use crate::domain::ledger::LedgerError;

type Item = HashMap<String, AttributeValue>;

/// The sends table for the writes that only touch existing records (SES events, the
/// Unsubscribe function): it never creates or claims one.
#[derive(Clone)]
pub struct SendRecords {
    client: Client,
    table: String,
}

/// The sends table as SendEmail uses it: claims, marks, releases.
#[derive(Clone)]
pub struct DynamoLedger {
    records: SendRecords,
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

/// The `expiresAt` (TTL, epoch seconds) of an item kept `keep` from now.
fn expires_after(keep: Duration) -> u64 {
    (SystemTime::now() + keep)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The result of a conditional write: done, or refused with the item as it was.
enum Conditional {
    Done(Option<Item>),
    Refused(Item),
}

impl DynamoLedger {
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
        self.failed(operation, super::describe(&err))
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
        operation: &'static str,
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
            Err(err) => Err(self.error(operation, err)),
        }
    }
}

impl SendLedger for DynamoLedger {
    /// Claims (userId, campaignId) for one attempt with ONE conditional write: it succeeds on
    /// no record, an IN_PROGRESS record whose lease has ended, a DEAD_LETTERED one (its
    /// message came back by a redrive or a resend), and on FAILED when the operator asked to
    /// include failed sends; never on SENT.
    async fn claim(&self, claim: &Claim, reclaim: Reclaim) -> Result<ClaimOutcome, LedgerError> {
        let now = claim.started_at_ms;
        let expires = expires_after(self.retention);
        let mut condition = String::from(
            "attribute_not_exists(#status) OR (#status = :in_progress AND leaseUntil <= :now) \
             OR #status = :dead_lettered",
        );
        let mut values: Item = HashMap::from([
            (":in_progress".into(), s(SendStatus::InProgress.as_str())),
            (
                ":dead_lettered".into(),
                s(SendStatus::DeadLettered.as_str()),
            ),
            (":shard".into(), s(&claim.key.campaign_shard())),
            (":now".into(), n(now)),
            (":lease".into(), n(claim.lease_until_ms)),
            (":token".into(), s(&claim.token)),
            (":expires".into(), n(expires)),
            (":zero".into(), n(0)),
            (":one".into(), n(1)),
        ]);
        if reclaim.failed {
            // The held-out stay out, whatever the campaign's record says later.
            condition.push_str(
                " OR #status = :failed OR (#status = :skipped AND skipReason <> :held_out)",
            );
            values.insert(":failed".into(), s(SendStatus::Failed.as_str()));
            values.insert(":skipped".into(), s(SendStatus::Skipped.as_str()));
            values.insert(":held_out".into(), s(Skip::HeldOut.as_str()));
        }
        if reclaim.cancelled {
            condition.push_str(" OR #status = :cancelled");
            values.insert(":cancelled".into(), s(SendStatus::Cancelled.as_str()));
        }
        let mut update = String::from(
            "SET #status = :in_progress, startedAt = :now, leaseUntil = :lease, \
             claimToken = :token, updatedAt = :now, expiresAt = :expires, \
             campaignShard = :shard, attempt = if_not_exists(attempt, :zero) + :one",
        );
        // The experiment's variant this attempt sends (a retry sends the same one).
        if let Some(variant) = &claim.variant {
            update.push_str(", variant = :variant");
            values.insert(":variant".into(), s(variant));
        }
        if let Some(zone) = &claim.zone {
            update.push_str(", userZone = :zone");
            values.insert(":zone".into(), s(zone));
        }
        update.push_str(" REMOVE skipReason");
        let outcome = self
            .records
            .update(
                "claim",
                &claim.key,
                &update,
                &condition,
                values,
                // The attempt number and the send errors so far are read from it.
                ReturnValue::AllNew,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(item) => ClaimOutcome::Claimed {
                attempt: item.as_ref().and_then(|i| get_n(i, "attempt")).unwrap_or(1),
                send_errors: item
                    .as_ref()
                    .and_then(|i| get_n(i, "sendErrors"))
                    .unwrap_or(0),
            },
            Conditional::Refused(old) => {
                let status = get_s(&old, "status").as_deref().and_then(SendStatus::parse);
                ClaimOutcome::Refused(match status {
                    Some(SendStatus::Sent) => Refusal::AlreadySent,
                    Some(SendStatus::Failed) => Refusal::Failed {
                        reason: get_s(&old, "lastError").unwrap_or_default(),
                    },
                    Some(SendStatus::Cancelled) => Refusal::Cancelled,
                    Some(SendStatus::Skipped) => Refusal::Skipped {
                        reason: get_s(&old, "skipReason").unwrap_or_default(),
                    },
                    // IN_PROGRESS (or unreadable): treat as held; it comes back later.
                    _ => Refusal::Busy {
                        lease_until_ms: get_n(&old, "leaseUntil").unwrap_or(now),
                    },
                })
            }
        })
    }

    /// SENT with the SES message id, only while this attempt still holds the claim.
    async fn mark_sent(&self, claim: &Claim, ses_message_id: &str, late_ms: Option<i64>) -> Marked {
        let mut values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":id".into(), s(ses_message_id)),
        ]);
        let mut set = String::from(
            "SET #status = :sent, sesMessageId = :id, completedAt = :now, updatedAt = :now",
        );
        // A local-time email: how long after its user's local send time it went.
        if let Some(late) = late_ms {
            values.insert(":late".into(), AttributeValue::N(late.to_string()));
            set.push_str(", lateMs = :late");
        }
        let update = format!("{set} REMOVE leaseUntil, lastError");
        self.finish("mark sent", claim, &update, values).await
    }

    /// FAILED with the reason (a permanent error), only while this attempt holds the claim.
    async fn mark_failed(&self, claim: &Claim, reason: &str) -> Marked {
        let values = HashMap::from([
            (":failed".into(), s(SendStatus::Failed.as_str())),
            (":reason".into(), s(reason)),
        ]);
        let update = "SET #status = :failed, lastError = :reason, completedAt = :now, \
                      updatedAt = :now REMOVE leaseUntil";
        self.finish("mark failed", claim, update, values).await
    }

    /// Ends the lease now (the email was not accepted), so a retry need not wait it out.
    /// `send_error`: the service answered with an error (not throttling), counted in
    /// `sendErrors` so that one that repeats ends FAILED.
    async fn release(&self, claim: &Claim, reason: &str, send_error: bool) -> Marked {
        let mut values = HashMap::from([(":reason".into(), s(reason)), (":zero".into(), n(0))]);
        let mut update =
            String::from("SET leaseUntil = :zero, lastError = :reason, updatedAt = :now");
        if send_error {
            values.insert(":one".into(), n(1));
            update.push_str(" ADD sendErrors :one");
        }
        self.finish("release", claim, &update, values).await
    }

    /// DEAD_LETTERED with the reason: this was the message's last receive, so it goes to the
    /// DLQ now; the record says so instead of staying IN_PROGRESS.
    async fn mark_dead_lettered(&self, claim: &Claim, reason: &str) -> Marked {
        let values = HashMap::from([
            (":dead".into(), s(SendStatus::DeadLettered.as_str())),
            (":reason".into(), s(reason)),
        ]);
        let update = "SET #status = :dead, lastError = :reason, updatedAt = :now REMOVE leaseUntil";
        self.finish("mark dead-lettered", claim, update, values)
            .await
    }

    /// SKIPPED with the guardrail's reason, only while this attempt holds the claim.
    async fn mark_skipped(&self, claim: &Claim, skip: Skip) -> Marked {
        let values = HashMap::from([
            (":skipped".into(), s(SendStatus::Skipped.as_str())),
            (":reason".into(), s(skip.as_str())),
        ]);
        let update = "SET #status = :skipped, skipReason = :reason, completedAt = :now, \
                      updatedAt = :now REMOVE leaseUntil, lastError";
        self.finish("mark skipped", claim, update, values).await
    }

    /// CANCELLED, on no record, a DEAD_LETTERED one, or an IN_PROGRESS one whose lease has
    /// ended; a SENT or FAILED record is final already, and a live lease's attempt decides.
    async fn cancel_send(&self, key: &SendKey, at_ms: u64) -> Result<bool, LedgerError> {
        let expires = expires_after(self.retention);
        let values = HashMap::from([
            (":cancelled".into(), s(SendStatus::Cancelled.as_str())),
            (":in_progress".into(), s(SendStatus::InProgress.as_str())),
            (
                ":dead_lettered".into(),
                s(SendStatus::DeadLettered.as_str()),
            ),
            (":now".into(), n(at_ms)),
            (":shard".into(), s(&key.campaign_shard())),
            (":expires".into(), n(expires)),
        ]);
        let condition = "attribute_not_exists(#status) OR #status = :dead_lettered \
                         OR (#status = :in_progress AND leaseUntil <= :now)";
        let update = "SET #status = :cancelled, cancelledAt = :now, updatedAt = :now, \
                      campaignShard = :shard, expiresAt = if_not_exists(expiresAt, :expires) \
                      REMOVE leaseUntil";
        let outcome = self
            .records
            .update("cancel", key, update, condition, values, ReturnValue::None)
            .await?;
        Ok(matches!(outcome, Conditional::Done(_)))
    }

    /// Counts a suppressed duplicate on a SENT record, so operators see how often the
    /// ledger saved a user from a second email. Only on SENT: it never creates a record.
    async fn note_duplicate(&self, key: &SendKey) -> Result<(), LedgerError> {
        let values = HashMap::from([
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":one".into(), n(1)),
        ]);
        self.records
            .update(
                "note duplicate",
                key,
                "ADD duplicatesSuppressed :one",
                "#status = :sent",
                values,
                ReturnValue::None,
            )
            .await
            .map(|_| ())
    }
}

/// The sort key of a user's frequency-cap item: not a campaign id (`#` is not allowed in
/// one), and without `campaignShard`, so no campaign's index or status counts it.
const CAPS_KEY: &str = "#caps";

/// Each user's emails that count towards the caps, as JSON in one item (a few entries: the
/// rules reach at most 90 days), versioned for the conditional write.
impl CapLedger for DynamoLedger {
    async fn cap_history(&self, user_id: &str) -> Result<CapHistory, LedgerError> {
        let records = &self.records;
        let out = records
            .client
            .get_item()
            .table_name(&records.table)
            .key("userId", s(user_id))
            .key("campaignId", s(CAPS_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| records.failed("read frequency caps", super::describe(&e)))?;
        let Some(item) = out.item else {
            return Ok(CapHistory::default());
        };
        Ok(CapHistory {
            version: get_n(&item, "capVersion").unwrap_or(0),
            entries: get_s(&item, "capSends")
                .and_then(|json| serde_json::from_str::<Vec<CapEntry>>(&json).ok())
                .unwrap_or_default(),
        })
    }

    async fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> Result<bool, LedgerError> {
        let records = &self.records;
        // A day past the longest rule's reach: TTL deletes late, never early.
        let expires = expires_after(
            Duration::from_millis(keep_ms.max(0) as u64) + Duration::from_secs(86_400),
        );
        let request = records
            .client
            .put_item()
            .table_name(&records.table)
            .item("userId", s(user_id))
            .item("campaignId", s(CAPS_KEY))
            .item("capVersion", n(history.version + 1))
            .item(
                "capSends",
                s(&serde_json::to_string(&history.entries).unwrap_or_default()),
            )
            .item("expiresAt", n(expires));
        let request = match history.version {
            0 => request.condition_expression("attribute_not_exists(capVersion)"),
            v => request
                .condition_expression("capVersion = :v")
                .expression_attribute_values(":v", n(v)),
        };
        match request.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(records.failed("write frequency caps", super::describe(&e))),
        }
    }
}

impl DynamoLedger {
    async fn finish(
        &self,
        operation: &'static str,
        claim: &Claim,
        update: &str,
        mut values: Item,
    ) -> Marked {
        values.insert(":in_progress".into(), s(SendStatus::InProgress.as_str()));
        values.insert(":token".into(), s(&claim.token));
        values.insert(":now".into(), n(epoch_ms(SystemTime::now())));
        let condition = "#status = :in_progress AND claimToken = :token";
        let outcome = self
            .records
            .update(
                operation,
                &claim.key,
                update,
                condition,
                values,
                // Nothing is read from the record written: do not ship it back.
                ReturnValue::None,
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
}

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
            .key("campaignId", s(&pending_leave_key(topic)))
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
            .key("campaignId", s(&pending_leave_key(topic)))
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
    ) -> Result<std::collections::HashSet<String>, LedgerError> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let failed = |detail: String| LedgerError {
            table: self.table.clone(),
            operation: "read pending leaves",
            detail,
        };
        let sort_key = pending_leave_key(topic);
        let mut standing = std::collections::HashSet::new();
        let mut unique: Vec<&String> = users.iter().collect();
        unique.sort();
        unique.dedup();
        // BatchGetItem takes 100 keys; what it leaves unprocessed is asked again.
        for chunk in unique.chunks(100) {
            let mut keys: Vec<Item> = chunk
                .iter()
                .map(|u| {
                    HashMap::from([("userId".into(), s(u)), ("campaignId".into(), s(&sort_key))])
                })
                .collect();
            for attempt in 0.. {
                if keys.is_empty() {
                    break;
                }
                if attempt == 5 {
                    return Err(failed(format!("{} keys still unprocessed", keys.len())));
                }
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
                }
                let wanted = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .projection_expression("userId, leftAt, rejoinedAt")
                    .build()
                    .map_err(|e| failed(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, wanted)
                    .send()
                    .await
                    .map_err(|e| failed(super::describe(&e)))?;
                for item in out
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    let left = get_n(item, "leftAt").unwrap_or(0);
                    let stands = get_n(item, "rejoinedAt").is_none_or(|r| r < left);
                    if let (true, Some(user)) = (stands, get_s(item, "userId")) {
                        standing.insert(user);
                    }
                }
                keys = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
        }
        Ok(standing)
    }
}

/// What the SES events and the Unsubscribe function write: analytics on existing records,
/// and the reconciliation of a send whose SENT was never written. They never create a record.
impl SendRecordNotes for SendRecords {
    /// Notes `what` (once: the first time is kept) on the record of this send. Returns the
    /// record's status, or None when there is no record (not a send of this ledger).
    async fn note(
        &self,
        key: &SendKey,
        what: Engagement,
        at_ms: u64,
    ) -> Result<Option<SendStatus>, LedgerError> {
        let update = std::iter::once(what)
            .chain(what.implies())
            .map(|e| format!("{0} = if_not_exists({0}, :at)", e.attribute()))
            .collect::<Vec<_>>()
            .join(", ");
        let update = format!("SET {update}");
        let values = HashMap::from([(":at".into(), n(at_ms))]);
        let outcome = self
            .update(
                "note",
                key,
                &update,
                "attribute_exists(#status)",
                values,
                // Its status is returned.
                ReturnValue::AllNew,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(item) => item
                .as_ref()
                .and_then(|i| get_s(i, "status"))
                .as_deref()
                .and_then(SendStatus::parse),
            Conditional::Refused(_) => None,
        })
    }

    /// The status of one send's record (eventually consistent: a hint, the writes that act
    /// on it are conditional).
    async fn status_of(&self, key: &SendKey) -> Result<Option<SendStatus>, LedgerError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(key.user_id()))
            .key("campaignId", s(key.campaign_id()))
            .projection_expression("#status")
            .expression_attribute_names("#status", "status")
            .send()
            .await
            .map_err(|err| LedgerError {
                table: self.table.clone(),
                operation: "read status",
                detail: super::describe(&err),
            })?;
        Ok(out
            .item
            .as_ref()
            .and_then(|i| get_s(i, "status"))
            .as_deref()
            .and_then(SendStatus::parse))
    }

    /// SES says it sent this email: a record still IN_PROGRESS (its attempt died between
    /// SES and SENT) or DEAD_LETTERED (its message went to the DLQ after SES had taken it)
    /// becomes SENT now, so no retry or redrive sends it again.
    /// Returns whether it did.
    async fn reconcile_sent(
        &self,
        key: &SendKey,
        ses_message_id: &str,
        at_ms: u64,
    ) -> Result<bool, LedgerError> {
        let values = HashMap::from([
            (":in_progress".into(), s(SendStatus::InProgress.as_str())),
            (
                ":dead_lettered".into(),
                s(SendStatus::DeadLettered.as_str()),
            ),
            (":skipped".into(), s(SendStatus::Skipped.as_str())),
            (":sent".into(), s(SendStatus::Sent.as_str())),
            (":id".into(), s(ses_message_id)),
            (":at".into(), n(at_ms)),
            (":now".into(), n(epoch_ms(SystemTime::now()))),
        ]);
        let update = "SET #status = :sent, sesMessageId = :id, completedAt = :at, \
                      updatedAt = :now, reconciled = :now REMOVE leaseUntil, lastError, skipReason";
        let outcome = self
            .update(
                "reconcile",
                key,
                update,
                // SKIPPED too: an attempt SES accepted may have died, and a later one found
                // the deadline or the quiet hours; the email went, and the record says so.
                "#status = :in_progress OR #status = :dead_lettered OR #status = :skipped",
                values,
                ReturnValue::None,
            )
            .await?;
        Ok(matches!(outcome, Conditional::Done(_)))
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
    /// Why a record is SKIPPED (`Skip::as_str`: a guardrail, or the person's standing read
    /// again at the send).
    pub skip_reason: Option<String>,
    pub lease_until_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub completed_at_ms: Option<u64>,
    /// A local-time email: how long after its user's local send time it was sent (ms).
    pub late_ms: Option<i64>,
    pub duplicates_suppressed: u64,
    /// Attempts that ended in an error the service answered with (see `sendErrors`).
    pub send_errors: u64,
    /// When each engagement was first noted (epoch ms).
    pub engagement: std::collections::BTreeMap<Engagement, u64>,
    /// When an SES event turned it SENT (its attempt died before it could).
    pub reconciled_at_ms: Option<u64>,
    /// The experiment's variant it was sent (or is being sent).
    pub variant: Option<String>,
    /// The user's zone as the email was claimed (their own, or the campaign's fallback).
    pub zone: Option<String>,
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
            skip_reason: get_s(item, "skipReason"),
            lease_until_ms: get_n(item, "leaseUntil"),
            started_at_ms: get_n(item, "startedAt"),
            completed_at_ms: get_n(item, "completedAt"),
            late_ms: item
                .get("lateMs")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
            duplicates_suppressed: get_n(item, "duplicatesSuppressed").unwrap_or(0),
            send_errors: get_n(item, "sendErrors").unwrap_or(0),
            engagement: Engagement::ALL
                .iter()
                .filter_map(|e| Some((*e, get_n(item, e.attribute())?)))
                .collect(),
            reconciled_at_ms: get_n(item, "reconciled"),
            variant: get_s(item, "variant"),
            zone: get_s(item, "userZone"),
        }
    }
}

/// The index template.yaml gives the sends table for reads by campaign.
pub const CAMPAIGN_INDEX: &str = "CampaignShardIndex";

/// Every record of one campaign, through the campaign index (`CampaignShardIndex`: 16
/// queries at once, each one partition, reading nothing of other campaigns).
pub async fn campaign_records(
    client: &Client,
    table: &str,
    campaign: &str,
) -> Result<Vec<SendRecord>, LedgerError> {
    let queries = campaign_shards(campaign).map(|shard| async move {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = client
                .query()
                .table_name(table)
                .index_name(CAMPAIGN_INDEX)
                .key_condition_expression("campaignShard = :shard")
                .expression_attribute_values(":shard", AttributeValue::S(shard.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| LedgerError {
                    table: table.to_owned(),
                    operation: "query a campaign's records",
                    detail: format!("{CAMPAIGN_INDEX} {shard}: {}", super::describe(&e)),
                })?;
            out.extend(page.items().iter().map(SendRecord::from_item));
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok::<_, LedgerError>(out);
            }
        }
    });
    let pages = futures::future::try_join_all(queries).await?;
    Ok(pages.into_iter().flatten().collect())
}

/// Each variant's results in the test group, from a campaign's records: sent, delivered,
/// the people who opened and clicked (each record counted once), and its last email. The rest, sent the
/// winner, is left out: it would mix the winner's test with its roll-out.
pub fn experiment_tallies(
    records: &[SendRecord],
    experiment: &Experiment,
) -> BTreeMap<String, Tally> {
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    for r in records {
        let Some(variant) = &r.variant else { continue };
        if experiment.assign(&r.campaign_id, &r.user_id) == Assignment::Rest {
            continue;
        }
        let t = tallies.entry(variant.clone()).or_default();
        let has = |e: Engagement| r.engagement.contains_key(&e);
        t.sent += u64::from(r.status == Some(SendStatus::Sent));
        t.delivered += u64::from(has(Engagement::Delivered));
        t.human_clicks += u64::from(has(Engagement::HumanClicked));
        t.human_opens += u64::from(has(Engagement::HumanOpened));
        // Its last email: the latest claim or completion (one still being sent counts).
        let at = r.completed_at_ms.max(r.started_at_ms).map(|ms| ms as i64);
        t.last_sent_ms = t.last_sent_ms.max(at);
    }
    tallies
}

/// Read when an experiment is decided: one query per shard of the campaign's records.
impl ExperimentResults for SendRecords {
    fn tallies<'a>(
        &'a self,
        campaign: &'a CampaignId,
        experiment: &'a Experiment,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Tally>, LedgerError>> {
        Box::pin(async move {
            let records = campaign_records(&self.client, &self.table, campaign.as_str()).await?;
            Ok(experiment_tallies(&records, experiment))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tallies_carry_the_test_groups_last_email() {
        let experiment = Experiment::parse(
            r#"{"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50, "waitHours": 2}"#,
        )
        .unwrap();
        let campaign = "weekly-2026-W47";
        let users: Vec<String> = (0..40).map(|i| format!("u{i:02}")).collect();
        let in_test = |test: bool| -> Vec<String> {
            users
                .iter()
                .filter(|u| (experiment.assign(campaign, u) == Assignment::Rest) != test)
                .cloned()
                .collect()
        };
        let (first, second): (Vec<String>, Vec<String>) = {
            let test = in_test(true);
            (test[..2].to_vec(), test[2..3].to_vec())
        };
        let rest = in_test(false).remove(0);
        let record = |user: &str, variant: &str, times: &[(&str, u64)]| {
            let mut item: Item = HashMap::from([
                ("userId".to_owned(), s(user)),
                ("campaignId".to_owned(), s(campaign)),
                ("status".to_owned(), s("SENT")),
                ("variant".to_owned(), s(variant)),
                ("deliveredAt".to_owned(), n(1)),
            ]);
            for (k, v) in times {
                item.insert((*k).to_owned(), n(*v));
            }
            SendRecord::from_item(&item)
        };
        let records = vec![
            record(
                &first[0],
                "a",
                &[("startedAt", 1_000), ("completedAt", 1_200)],
            ),
            record(&first[1], "a", &[("startedAt", 5_000)]),
            record(
                &second[0],
                "b",
                &[("startedAt", 2_000), ("completedAt", 2_100)],
            ),
            // The rest, sent the winner later, is not the test group's.
            record(&rest, "a", &[("startedAt", 9_000), ("completedAt", 9_100)]),
        ];
        let tallies = experiment_tallies(&records, &experiment);
        // Still being sent (claimed, not completed) counts as its last email.
        assert_eq!(tallies["a"].last_sent_ms, Some(5_000));
        assert_eq!(tallies["b"].last_sent_ms, Some(2_100));
        assert_eq!((tallies["a"].sent, tallies["a"].delivered), (2, 2));
        let decide_at = experiment.clone().starting_at(0).decide_at_ms;
        let recorded = Experiment {
            decide_at_ms: decide_at,
            ..experiment
        };
        assert_eq!(recorded.due_at(&tallies), Some(2 * 3_600_000 + 5_000));
    }
}
