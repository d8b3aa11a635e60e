//! Adapters: the only modules that talk to the AWS SDKs and to MongoDB. Each implements
//! ports (`crate::ports`) and translates its SDK's errors into our error kinds once, so the
//! stages never match on SDK or driver types.

pub mod account;
pub mod batch_get;
pub mod bson_ids;
pub mod campaigns;
pub mod definition;
pub mod definitions;
pub mod directory;
pub mod event_sources;
pub mod field_path;
pub mod item;
pub mod mongo;
pub mod mongo_directory;
pub mod open_content;
pub mod picks;
pub mod preferences;
pub mod profile;
pub mod rate_item;
pub mod recipients;
pub mod secrets;
pub mod sends;
pub mod ses;
pub mod sqs;
pub mod subscribers;
pub mod waiting;

use crate::runtime::metering::RequestMeter;

/// The SDK configuration for every AWS client: region, credentials and `AWS_ENDPOINT_URL`
/// from the environment (the SDK reads it itself), as on Lambda.
pub async fn aws_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// The AWS clients, each with the request meter attached (see `metering`).
pub fn sqs_client(sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk).interceptor(RequestMeter);
    aws_sdk_sqs::Client::from_conf(config.build())
}

pub fn dynamodb_client(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(RequestMeter);
    aws_sdk_dynamodb::Client::from_conf(config.build())
}

pub fn lambda_client(sdk: &aws_config::SdkConfig) -> aws_sdk_lambda::Client {
    let config = aws_sdk_lambda::config::Builder::from(sdk).interceptor(RequestMeter);
    aws_sdk_lambda::Client::from_conf(config.build())
}

pub fn scheduler_client(sdk: &aws_config::SdkConfig) -> aws_sdk_scheduler::Client {
    let config = aws_sdk_scheduler::config::Builder::from(sdk).interceptor(RequestMeter);
    aws_sdk_scheduler::Client::from_conf(config.build())
}

pub fn secrets_client(sdk: &aws_config::SdkConfig) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::config::Builder::from(sdk).interceptor(RequestMeter);
    aws_sdk_secretsmanager::Client::from_conf(config.build())
}

/// One line for an SDK error, with the service's code and message when it answered.
pub(crate) fn describe<E, R>(err: &aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_sqs::error::SdkError;
    match err {
        SdkError::ServiceError(e) => format!(
            "{}: {}",
            e.err().code().unwrap_or("ServiceError"),
            e.err().message().unwrap_or("no message")
        ),
        other => format!("{}", aws_sdk_sqs::error::DisplayErrorContext(other)),
    }
}
