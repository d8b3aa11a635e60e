//! RateControl Lambda: wiring only; the logic is `mailflow::stages::rate_control`.

use mailflow::assemble::start;
use mailflow::config::RateControlConfig;
use mailflow::runtime::serve;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(RateControlConfig::from_source).await;
    serve(mailflow::assemble::rate_control(config, &sdk)).await
}
