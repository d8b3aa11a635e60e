//! CreateEmails Lambda: wiring only; the logic is `mailflow::stages::create_emails`.

use mailflow::assemble::start;
use mailflow::config::CreateEmailsConfig;
use mailflow::runtime::{serve, telemetry::or_exit};

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(CreateEmailsConfig::from_source).await;
    let stage = mailflow::assemble::create_emails(config, &sdk, "create-emails", true).await;
    serve(or_exit(stage)).await
}
