//! The sends ledger as SendEmail uses it: the claim and the writes under it.

use super::CapLedger;
use crate::domain::guardrails::Skip;
use crate::domain::ledger::{Claim, ClaimOutcome, LedgerError, LostClaim, Reclaim, SendKey};
use std::future::Future;

/// The sends ledger as SendEmail uses it (`crate::domain::ledger` describes the state machine).
/// Every write is conditional; a refused one reports what the record holds instead. The
/// frequency caps' items live in the same table (`CapLedger`).
pub trait SendLedger: CapLedger + Send + Sync {
    /// Claims the claim's key for one attempt: on no record, an IN_PROGRESS record whose
    /// lease has ended, a DEAD_LETTERED one, or a FAILED or CANCELLED one `reclaim` names.
    fn claim(
        &self,
        claim: &Claim,
        reclaim: Reclaim,
    ) -> impl Future<Output = Result<ClaimOutcome, LedgerError>> + Send;
    /// Counts a suppressed duplicate on a SENT record.
    fn note_duplicate(&self, key: &SendKey)
        -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// SENT with the SES message id (and, for a local-time email, how late it went), while
    /// this attempt holds the claim.
    fn mark_sent(
        &self,
        claim: &Claim,
        ses_message_id: &str,
        late_ms: Option<i64>,
    ) -> impl Future<Output = Marked> + Send;
    /// FAILED with the reason, while this attempt holds the claim.
    fn mark_failed(&self, claim: &Claim, reason: &str) -> impl Future<Output = Marked> + Send;
    /// Ends the lease now; `send_error` counts an error the service answered with.
    fn release(
        &self,
        claim: &Claim,
        reason: &str,
        send_error: bool,
    ) -> impl Future<Output = Marked> + Send;
    /// DEAD_LETTERED with the reason: the message's last receive ended without a send.
    fn mark_dead_lettered(
        &self,
        claim: &Claim,
        reason: &str,
    ) -> impl Future<Output = Marked> + Send;
    /// SKIPPED with a guardrail's reason, while this attempt holds the claim.
    fn mark_skipped(&self, claim: &Claim, skip: Skip) -> impl Future<Output = Marked> + Send;
    /// CANCELLED (the campaign was cancelled), unless the record is SENT or held by a live
    /// lease (that attempt's outcome stands). Whether it was written.
    fn cancel_send(
        &self,
        key: &SendKey,
        at_ms: u64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// A write under a claim: done, refused because the claim was lost (with what the record
/// holds now), or failed.
pub type Marked = Result<Result<(), LostClaim>, LedgerError>;
