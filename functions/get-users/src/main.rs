//! GetUsers Lambda: wiring only; the logic is `mailflow::stages::get_users`.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::config::{GetUsersConfig, ProcessEnv};
use mailflow::runtime::Invocation;
use serde_json::Value;

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::runtime::telemetry::init();
    let config = mailflow::runtime::telemetry::or_exit(GetUsersConfig::from_source(&ProcessEnv));
    let sdk = mailflow::adapters::aws_config().await;
    let stage =
        mailflow::runtime::telemetry::or_exit(mailflow::assemble::get_users(config, &sdk).await);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let invocation = Invocation::from_context(&event.context);
        let result = stage.handle(event.payload, &invocation).await;
        mailflow::runtime::metering::log_invocation_requests();
        result.map_err(Error::from)
    }))
    .await
}
