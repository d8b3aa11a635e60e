//! SendEmail Lambda: wiring only; the logic is `mailflow::stages::send_email`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::assemble;
use mailflow::config::{ProcessEnv, SendEmailConfig};
use mailflow::runtime::Invocation;

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::runtime::telemetry::init();
    let config = mailflow::runtime::telemetry::or_exit(SendEmailConfig::from_source(&ProcessEnv));
    let sdk = mailflow::adapters::aws_config().await;
    let mailer = assemble::ses_mailer(&config, &sdk);
    let stage = assemble::send_email(config, &sdk, mailer);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let invocation = Invocation::from_context(&event.context);
        let (response, _) = stage.handle(event.payload, &invocation).await;
        mailflow::runtime::metering::log_invocation_requests();
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
