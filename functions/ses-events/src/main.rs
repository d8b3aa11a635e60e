//! SesEvents Lambda: wiring only; the logic is `mailflow::stages::ses_events`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::adapters::{dynamo::SendRecords, subscribers::Subscribers};
use mailflow::config::{ProcessEnv, SesEventsConfig};
use mailflow::stages::ses_events::SesEvents;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::telemetry::init();
    let config = SesEventsConfig::from_source(&ProcessEnv)?;
    let sdk = mailflow::adapters::aws_config().await;
    let db = mailflow::adapters::mongo::connect(&config.mongo, &sdk, "ses-events").await?;
    let records = SendRecords::new(
        mailflow::adapters::dynamodb_client(&sdk),
        &config.sends_table_name,
    );
    let stage = SesEvents::new(records, Subscribers::new(&db), config);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let (response, _) = stage.handle(event.payload).await;
        mailflow::metering::log_invocation_requests();
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
