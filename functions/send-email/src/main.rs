//! SendEmail Lambda: wiring only; the logic is `mailflow::stages::send_email`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::adapters::{dynamo::DynamoLedger, ses::SesMailer};
use mailflow::config::{ProcessEnv, SendEmailConfig};
use mailflow::stages::{send_email::SendEmail, Invocation};

#[tokio::main]
async fn main() -> Result<(), Error> {
    mailflow::telemetry::init();
    let config = SendEmailConfig::from_source(&ProcessEnv)?;
    let sdk = mailflow::adapters::aws_config().await;
    let ledger = DynamoLedger::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        &config.sends_table_name,
        config.retention_days,
    );
    let mailer = SesMailer::from_config(&sdk, &config);
    let stage = SendEmail::new(ledger, mailer, aws_sdk_sqs::Client::new(&sdk), config);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let invocation = Invocation::from_context(&event.context);
        Ok::<SqsBatchResponse, Error>(stage.handle(event.payload, &invocation).await.0)
    }))
    .await
}
