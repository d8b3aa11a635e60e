//! The local simulator: what makes template.yaml run on one machine against the local stack
//! (moto, SecantusDB). It reads the template (`template`), creates its resources under a
//! prefix (`provision`), signs each function's requests with its role's key (`role_keys`)
//! for the local IAM check (`iam`), seeds users (`seed`), runs the SQS event source mappings
//! (`runner`) over the functions wired as on Lambda (`pipeline`), fires the release schedules
//! (`scheduler`) as asynchronous invocations (`async_invoke`), fails, hangs or slows chosen
//! AWS and MongoDB calls for tests (`fault_switch`), serves the Lambda Runtime
//! API to the real binaries (`function_host`) and Function URLs (`function_url`), stands in
//! for SES's event publishing (`ses_event_source`) and reads the SES emulator's record
//! (`ses_record`). It also runs the binaries under AWS's own emulator (`aws_emulator`) and
//! through `sam local invoke` (`sam_local`). The functions never know: they get the
//! environment the template gives them.

pub mod async_invoke;
pub mod aws_emulator;
pub mod event_sources;
pub mod fault_switch;
pub mod function_host;
pub mod function_url;
pub mod http;
pub mod iam;
pub mod ledger_scan;
pub mod log_audit;
pub mod names;
pub mod pipeline;
pub mod provision;
pub mod queues;
pub mod role_keys;
pub mod runner;
pub mod sam_local;
pub mod scheduler;
pub mod seed;
pub mod ses_event_source;
pub mod ses_record;
pub mod stack;
pub mod template;

use anyhow::Context;
use std::path::PathBuf;

/// A variable the local stack's environment sets (AWS_ENDPOINT_URL, MONGODB_URI...), or an
/// error that says how to load it.
pub fn stack_env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set; start the local stack and load its environment: eval \"$(infra/local-stack.sh env)\"")
    })
}

/// The repository root (where template.yaml lives).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
