//! The frequency caps' history: one item per user in the sends table.

use crate::domain::guardrails::CapHistory;
use crate::domain::ledger::LedgerError;
use std::future::Future;

/// Each user's emails that count towards the frequency caps: one item per user in the sends
/// table, written only if no other campaign wrote it since it was read.
pub trait CapLedger: Send + Sync {
    fn cap_history(
        &self,
        user_id: &str,
    ) -> impl Future<Output = Result<CapHistory, LedgerError>> + Send;
    /// Writes `history` if the user's item is still at `history.version` (and bumps it);
    /// false when another write came first. Kept `keep_ms` after the write.
    fn write_cap_history(
        &self,
        user_id: &str,
        history: &CapHistory,
        keep_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}
