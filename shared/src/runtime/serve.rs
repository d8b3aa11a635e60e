//! The one way a stage is hosted: `serve` (the Lambda Runtime API loop) in each binary, after
//! `assemble::start` (logs, configuration, the SDK's configuration); the local simulator calls the same
//! `Stage::invoke` (`mailflow_local::pipeline::stage_handler`).

use super::{emf, metering, Invocation};
use lambda_runtime::{service_fn, LambdaEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

/// A stage as a function hosts it: one event in, one response out, and what it counted.
pub trait Stage: Send + Sync {
    type Event: DeserializeOwned + Send;
    type Response: Serialize + Send;
    /// What one invocation did, for runners that total a campaign and for its metrics
    /// (`()`: nothing counted).
    type Summary: Send + super::emf::Measured;
    type Error: std::error::Error + Send + Sync + 'static;

    fn invoke(
        &self,
        event: Self::Event,
        invocation: &Invocation,
    ) -> impl Future<Output = Result<(Self::Response, Self::Summary), Self::Error>> + Send;

    /// What the environment holds after an invocation, as metrics (SendEmail: the shared
    /// rate it sent at).
    fn gauges(&self) -> Vec<emf::Metric> {
        Vec::new()
    }
}

/// Implements `Stage` for a stage type: the event it takes, what it answers (response,
/// summary, error), the call that handles one event, `|stage, event, invocation| ...`, and
/// optionally what it holds as metrics, `gauges: |stage| ...`.
macro_rules! stage {
    (
        impl<$($param:ident: $bound:path),*> for $stage:ty {
            $event:ty => Result<($response:ty, $summary:ty), $error:ty>,
            |$this:ident, $e:ident, $invocation:ident| $call:expr
            $(, gauges: |$held:ident| $gauges:expr)? $(,)?
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

            $(
                fn gauges(&self) -> Vec<$crate::runtime::emf::Metric> {
                    let $held = self;
                    $gauges
                }
            )?
        }
    };
}
pub(crate) use stage;

/// Serves `stage` on the Lambda Runtime API until the environment ends. Every invocation logs
/// its metering line and its metrics (EMF: invocations, cold starts, errors, duration,
/// backend requests, its summary's counts and its gauges), whether the stage succeeded or failed.
pub async fn serve<S: Stage>(stage: S) -> Result<(), lambda_runtime::Error> {
    let stage = &stage;
    let function = emf::stage_name::<S>();
    let cold = &std::sync::atomic::AtomicBool::new(true);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<S::Event>| async move {
        let invocation = Invocation::from_context(&event.context);
        let started = std::time::Instant::now();
        let result = stage.invoke(event.payload, &invocation).await;
        let requests = metering::log_invocation_requests();
        let cold_start = cold.swap(false, std::sync::atomic::Ordering::Relaxed);
        let [invocations, cold_starts, errors, backend_requests, duration] =
            emf::INVOCATION_METRICS;
        let mut metrics = emf::nonzero(vec![
            emf::Metric::count(invocations, 1.0),
            emf::Metric::count(cold_starts, f64::from(u8::from(cold_start))),
            emf::Metric::count(errors, f64::from(u8::from(result.is_err()))),
            emf::Metric::count(backend_requests, requests as f64),
            emf::Metric::ms(duration, started.elapsed().as_secs_f64() * 1000.0),
        ]);
        if let Ok((_, summary)) = &result {
            metrics.extend(emf::Measured::metrics(summary));
        }
        metrics.extend(stage.gauges());
        emf::emit(function, &metrics);
        result
            .map(|(response, _summary)| response)
            .map_err(lambda_runtime::Error::from)
    }))
    .await
}
