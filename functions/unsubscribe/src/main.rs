//! Unsubscribe Lambda (behind a Function URL): wiring only; the logic is
//! `mailflow::stages::unsubscribe`.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use mailflow::adapters::{dynamo::SendRecords, subscribers::Subscribers};
use mailflow::config::{ProcessEnv, UnsubscribeFunctionConfig};
use mailflow::stages::unsubscribe::Unsubscribe;
use serde_json::Value;

// One thread: an execution environment serves one event at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    mailflow::telemetry::init();
    let config = UnsubscribeFunctionConfig::from_source(&ProcessEnv)?;
    let sdk = mailflow::adapters::aws_config().await;
    let signer = mailflow::adapters::secrets::unsubscribe_signer(&config.unsubscribe, &sdk).await?;
    let db = mailflow::adapters::mongo::connect(&config.mongo, &sdk, "unsubscribe").await?;
    let records = SendRecords::new(
        mailflow::adapters::dynamodb_client(&sdk),
        &config.sends_table_name,
    );
    let stage = Unsubscribe::new(signer, Subscribers::new(&db), records);
    let stage = &stage;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let response = stage.handle_function_url(&event.payload).await;
        mailflow::metering::log_invocation_requests();
        Ok::<Value, Error>(response)
    }))
    .await
}
