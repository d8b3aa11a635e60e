//! mailctl: the operator tool for mailflow, and the local runner the tests and the demo use.

pub mod bench;
pub mod chaos;
pub mod cost;
pub mod function_host;
pub mod function_url;
pub mod http;
pub mod ledger_scan;
pub mod local;
pub mod log_audit;
pub mod names;
pub mod ops;
pub mod preview;
pub mod provision;
pub mod runner;
pub mod seed;
pub mod ses_event_source;
pub mod ses_record;
pub mod template;

use std::path::PathBuf;

/// The repository root (where template.yaml lives).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
