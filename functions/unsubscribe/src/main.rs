//! Unsubscribe Lambda (behind a Function URL): wiring only; the logic is
//! `mailflow::stages::unsubscribe`.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::config::{ProcessEnv, UnsubscribeFunctionConfig};
use serde_json::Value;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::runtime::telemetry::init();
    let config =
        mailflow::runtime::telemetry::or_exit(UnsubscribeFunctionConfig::from_source(&ProcessEnv));
    let sdk = mailflow::adapters::aws_config().await;
    let stage =
        mailflow::runtime::telemetry::or_exit(mailflow::assemble::unsubscribe(config, &sdk).await);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let response = stage.handle_function_url(&event.payload).await;
        mailflow::runtime::metering::log_invocation_requests();
        Ok::<Value, Error>(response)
    }))
    .await
}
