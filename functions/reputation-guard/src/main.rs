//! ReputationGuard Lambda: wiring only; the logic is `mailflow::stages::reputation_guard`.

use aws_lambda_events::event::sns::SnsEvent;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::config::{ProcessEnv, ReputationGuardConfig};

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::runtime::telemetry::init();
    let config =
        mailflow::runtime::telemetry::or_exit(ReputationGuardConfig::from_source(&ProcessEnv));
    let sdk = mailflow::adapters::aws_config().await;
    let stage = mailflow::assemble::reputation_guard(config, &sdk);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SnsEvent>| async move {
        let summary = stage.handle(event.payload).await?;
        mailflow::runtime::metering::log_invocation_requests();
        Ok::<_, Error>(summary)
    }))
    .await
}
