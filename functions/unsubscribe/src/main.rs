//! Unsubscribe Lambda (behind a Function URL): wiring only; the logic is
//! `mailflow::stages::preferences`.

use mailflow::assemble::start;
use mailflow::config::UnsubscribeFunctionConfig;
use mailflow::runtime::{serve, telemetry::or_exit};

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(UnsubscribeFunctionConfig::from_source).await;
    serve(or_exit(mailflow::assemble::unsubscribe(config, &sdk).await)).await
}
