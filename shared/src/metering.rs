//! Counts what this process asks of the backends: every transmitted AWS request attempt by
//! service and operation (each one is billed, retries included) and every MongoDB command
//! (a round trip). A Lambda serves one invocation at a time, so the counts taken at the end
//! of an invocation are that invocation's; each function logs them, which makes the cost of
//! a campaign visible in its logs and lets the benchmark add them up.

use aws_sdk_sqs::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The log message that carries an invocation's counts (the benchmark looks for it).
pub const REQUESTS_LOG_MESSAGE: &str = "backend requests";

/// SQS bills every 64 KiB of a request's payload as one request.
pub const SQS_BILLING_CHUNK: u64 = 64 * 1024;
/// Suffix of the keys that count SQS billing chunks (`sqs.SendMessageBatch#64KiB`).
pub const SQS_CHUNKS_SUFFIX: &str = "#64KiB";

static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn count(key: String) {
    add(key, 1);
}

fn add(key: String, n: u64) {
    *COUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += n;
}

/// The counts since the last call, and a fresh start.
pub fn take() -> BTreeMap<String, u64> {
    std::mem::take(&mut *COUNTS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Logs (and resets) the counts: called once at the end of each invocation.
pub fn log_invocation_requests() {
    let counts = take();
    if !counts.is_empty() {
        let requests = serde_json::to_string(&counts).unwrap_or_default();
        tracing::info!(requests = %requests, "{REQUESTS_LOG_MESSAGE}");
    }
}

/// The SDK interceptor; attach it to every AWS client (see `adapters`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestMeter;

impl Intercept for RequestMeter {
    fn name(&self) -> &'static str {
        "RequestMeter"
    }

    // Called once per attempt, right before it goes on the wire.
    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let key = match cfg.load::<Metadata>() {
            Some(m) => format!(
                "{}.{}",
                m.service().to_ascii_lowercase().replace(' ', ""),
                m.name()
            ),
            None => "aws.unknown".to_owned(),
        };
        // SQS bills each 64 KiB chunk of a payload as one request.
        if key.starts_with("sqs.") {
            let bytes = context.request().body().content_length().unwrap_or(0);
            let chunks = bytes.div_ceil(SQS_BILLING_CHUNK).max(1);
            add(format!("{key}{SQS_CHUNKS_SUFFIX}"), chunks);
        }
        count(key);
        Ok(())
    }
}

/// The MongoDB command monitor: one count per command sent (`mongodb.find`, `mongodb.getMore`).
pub fn mongo_command_monitor() -> mongodb::event::EventHandler<mongodb::event::command::CommandEvent>
{
    mongodb::event::EventHandler::callback(|event| {
        if let mongodb::event::command::CommandEvent::Started(started) = event {
            count(format!("mongodb.{}", started.command_name));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_returns_the_counts_and_starts_again() {
        let _ = take();
        count("sqs.SendMessageBatch".into());
        count("sqs.SendMessageBatch".into());
        count("mongodb.find".into());
        let counts = take();
        assert_eq!(counts["sqs.SendMessageBatch"], 2);
        assert_eq!(counts["mongodb.find"], 1);
        assert!(take().is_empty());
    }
}
