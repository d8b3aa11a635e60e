//! ReputationGuard Lambda: wiring only; the logic is `mailflow::stages::reputation_guard`.

use mailflow::assemble::start;
use mailflow::config::ReputationGuardConfig;
use mailflow::runtime::serve;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(ReputationGuardConfig::from_source).await;
    serve(mailflow::assemble::reputation_guard(config, &sdk)).await
}
