//! CreateEmails Lambda: wiring only; the logic is `mailflow::stages::create_emails`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::config::{CreateEmailsConfig, ProcessEnv};
use mailflow::digest::Renderer;
use mailflow::stages::create_emails::CreateEmails;

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::telemetry::init();
    let config = CreateEmailsConfig::from_source(&ProcessEnv)?;
    let renderer = Renderer::new(&config.default_locale)?;
    let sdk = mailflow::adapters::aws_config().await;
    let signer = mailflow::adapters::secrets::unsubscribe_signer(&config.unsubscribe, &sdk).await?;
    let db = mailflow::adapters::mongo::connect(&config.mongo, &sdk, "create-emails").await?;
    let sqs = mailflow::adapters::sqs_client(&sdk);
    let stage = CreateEmails::new(db, sqs, renderer, signer, config);
    stage.prepare().await?;
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let (response, _) = stage.handle(event.payload).await;
        mailflow::metering::log_invocation_requests();
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
