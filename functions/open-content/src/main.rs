//! OpenContent Lambda (behind a Function URL): wiring only; the logic is
//! `mailflow::stages::open_content`.

use mailflow::assemble::start;
use mailflow::config::OpenContentFunctionConfig;
use mailflow::ports::SystemClock;
use mailflow::runtime::{serve, telemetry::or_exit};
use std::sync::Arc;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(OpenContentFunctionConfig::from_source).await;
    let stage = mailflow::assemble::open_content(config, &sdk, Arc::new(SystemClock)).await;
    serve(or_exit(stage)).await
}
