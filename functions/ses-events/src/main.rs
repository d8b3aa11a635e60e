//! SesEvents Lambda: wiring only; the logic is `mailflow::stages::ses_events`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::config::{ProcessEnv, SesEventsConfig};

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::runtime::telemetry::init();
    let config = mailflow::runtime::telemetry::or_exit(SesEventsConfig::from_source(&ProcessEnv));
    let sdk = mailflow::adapters::aws_config().await;
    let stage =
        mailflow::runtime::telemetry::or_exit(mailflow::assemble::ses_events(config, &sdk).await);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let (response, _) = stage.handle(event.payload).await;
        mailflow::runtime::metering::log_invocation_requests();
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
