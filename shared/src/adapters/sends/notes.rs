//! What the SES events and the Unsubscribe function write on send records: engagement
//! notes, a status read, and the reconciliation of a send whose SENT was never written.

use super::ledger::index_entry;
use super::{Conditional, SendRecords};
use crate::adapters::describe;
use crate::adapters::item::{n, s, text};
use crate::domain::ledger::{epoch_ms, Engagement, LedgerError, LedgerWrite, SendKey, SendStatus};
use crate::ports::SendRecordNotes;
use aws_sdk_dynamodb::types::ReturnValue;
use std::collections::HashMap;
use std::time::SystemTime;

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
        let mut values = HashMap::from([(":at".into(), n(at_ms))]);
        let update = format!(
            "SET {update}{}",
            index_entry(LedgerWrite::Note, key, &mut values)
        );
        let outcome = self
            .update(
                LedgerWrite::Note,
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
                .and_then(|i| text(i, "status"))
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
                detail: describe(&err),
            })?;
        Ok(out
            .item
            .as_ref()
            .and_then(|i| text(i, "status"))
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
        let mut values = HashMap::from([
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
        let update = format!(
            "SET #status = :sent, sesMessageId = :id, completedAt = :at, updatedAt = :now, \
             reconciled = :now{} REMOVE leaseUntil, lastError, skipReason",
            index_entry(LedgerWrite::Reconcile, key, &mut values)
        );
        let outcome = self
            .update(
                LedgerWrite::Reconcile,
                key,
                &update,
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
