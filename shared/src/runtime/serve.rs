//! The one way a stage is hosted: `start` (logs, configuration, the SDK's configuration) and
//! `serve` (the Lambda Runtime API loop) in each binary; the local simulator calls the same
//! `Stage::invoke` (`mailflow_local::runner::stage_handler`).

use super::{metering, telemetry, Invocation};
use crate::config::{ConfigError, ProcessEnv, Source};
use lambda_runtime::{service_fn, LambdaEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

/// A stage as a function hosts it: one event in, one response out, and what it counted.
pub trait Stage: Send + Sync {
    type Event: DeserializeOwned + Send;
    type Response: Serialize + Send;
    /// What one invocation did, for runners that total a campaign (`()`: nothing counted).
    type Summary: Send;
    type Error: std::error::Error + Send + Sync + 'static;

    fn invoke(
        &self,
        event: Self::Event,
        invocation: &Invocation,
    ) -> impl Future<Output = Result<(Self::Response, Self::Summary), Self::Error>> + Send;
}

/// Implements `Stage` for a stage type: the event it takes, what it answers (response,
/// summary, error), and the call that handles one event, `|stage, event, invocation| ...`.
macro_rules! stage {
    (
        impl<$($param:ident: $bound:path),*> for $stage:ty {
            $event:ty => Result<($response:ty, $summary:ty), $error:ty>,
            |$this:ident, $e:ident, $invocation:ident| $call:expr $(,)?
        }
    ) => {
        impl<$($param: $bound),*> $crate::runtime::Stage for $stage {
            type Event = $event;
            type Response = $response;
            type Summary = $summary;
            type Error = $error;

            async fn invoke(
                &self,
                $e: $event,
                $invocation: &$crate::runtime::Invocation,
            ) -> Result<($response, $summary), $error> {
                let $this = self;
                $call
            }
        }
    };
}
pub(crate) use stage;

/// A function's cold start up to its stage: logs, then its configuration (or exit with one
/// line naming the variable), then the SDK's configuration.
pub async fn start<C>(
    config: impl FnOnce(&dyn Source) -> Result<C, ConfigError>,
) -> (C, aws_config::SdkConfig) {
    telemetry::init();
    let config = telemetry::or_exit(config(&ProcessEnv));
    (config, crate::adapters::aws_config().await)
}

/// Serves `stage` on the Lambda Runtime API until the environment ends. Every invocation logs
/// its metering line, whether the stage succeeded or failed.
pub async fn serve<S: Stage>(stage: S) -> Result<(), lambda_runtime::Error> {
    let stage = &stage;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<S::Event>| async move {
        let invocation = Invocation::from_context(&event.context);
        let result = stage.invoke(event.payload, &invocation).await;
        metering::log_invocation_requests();
        result
            .map(|(response, _summary)| response)
            .map_err(lambda_runtime::Error::from)
    }))
    .await
}
