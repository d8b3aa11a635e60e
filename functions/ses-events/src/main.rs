//! SesEvents Lambda: wiring only; the logic is `mailflow::stages::ses_events`.

use mailflow::assemble::start;
use mailflow::config::SesEventsConfig;
use mailflow::runtime::{serve, telemetry::or_exit};

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(SesEventsConfig::from_source).await;
    serve(or_exit(mailflow::assemble::ses_events(config, &sdk).await)).await
}
