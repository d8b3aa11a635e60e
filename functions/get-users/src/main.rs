//! GetUsers Lambda: wiring only; the logic is `mailflow::stages::get_users`.

use mailflow::assemble::start;
use mailflow::config::GetUsersConfig;
use mailflow::runtime::{serve, telemetry::or_exit};

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(GetUsersConfig::from_source).await;
    serve(or_exit(mailflow::assemble::get_users(config, &sdk).await)).await
}
