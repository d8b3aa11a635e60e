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

fn count(key: &str) {
    add(key, 1);
}

/// Adds to a key's count; the key is copied only the first time it is seen.
fn add(key: &str, n: u64) {
    let mut counts = crate::runtime::lock(&COUNTS);
    match counts.get_mut(key) {
        Some(total) => *total += n,
        None => {
            counts.insert(key.to_owned(), n);
        }
    }
}

thread_local! {
    /// Where a request's key is spelled out: every request of every client is counted, so
    /// the key is built in place rather than allocated each time.
    static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Calls `f` with `parts` joined, spelled out in the thread's key buffer.
fn with_key<R>(parts: &[&str], f: impl FnOnce(&str) -> R) -> R {
    KEY.with(|key| {
        let mut key = key.borrow_mut();
        key.clear();
        for part in parts {
            key.push_str(part);
        }
        f(&key)
    })
}

/// The counts since the last call, and a fresh start.
pub fn take() -> BTreeMap<String, u64> {
    std::mem::take(&mut *crate::runtime::lock(&COUNTS))
}

/// Logs (and resets) the counts: called once at the end of each invocation. Returns the
/// requests made (SQS's 64 KiB billing chunks aside).
pub fn log_invocation_requests() -> u64 {
    let counts = take();
    if !counts.is_empty() {
        let requests = serde_json::to_string(&counts).unwrap_or_default();
        tracing::info!(requests = %requests, "{REQUESTS_LOG_MESSAGE}");
    }
    counts
        .iter()
        .filter(|(key, _)| !key.ends_with(SQS_CHUNKS_SUFFIX))
        .map(|(_, n)| n)
        .sum()
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
        let (service, operation) = match cfg.load::<Metadata>() {
            Some(m) => (service_key(m.service()), m.name()),
            None => ("aws", "unknown"),
        };
        with_key(&[service, ".", operation], count);
        // SQS bills each 64 KiB chunk of a payload as one request.
        if service == "sqs" {
            let bytes = context.request().body().content_length().unwrap_or(0);
            let chunks = bytes.div_ceil(SQS_BILLING_CHUNK).max(1);
            with_key(&[service, ".", operation, SQS_CHUNKS_SUFFIX], |k| {
                add(k, chunks)
            });
        }
        Ok(())
    }
}

/// The service as the keys name it (lower case, no spaces): the SDK names the services this
/// crate uses, spelled once here; any other is named as the SDK names it, lower-cased.
fn service_key(service: &str) -> &'static str {
    match service {
        "SQS" => "sqs",
        "DynamoDB" => "dynamodb",
        "SESv2" => "sesv2",
        "Secrets Manager" => "secretsmanager",
        "Lambda" => "lambda",
        "STS" => "sts",
        _ => "aws.other",
    }
}

/// The MongoDB command monitor: one count per command sent (`mongodb.find`, `mongodb.getMore`).
pub fn mongo_command_monitor() -> mongodb::event::EventHandler<mongodb::event::command::CommandEvent>
{
    mongodb::event::EventHandler::callback(|event| {
        if let mongodb::event::command::CommandEvent::Started(started) = event {
            with_key(&["mongodb.", &started.command_name], count);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_returns_the_counts_and_starts_again() {
        let _ = take();
        count("sqs.SendMessageBatch");
        with_key(&["sqs", ".", "SendMessageBatch"], count);
        with_key(&["mongodb.", "find"], count);
        let counts = take();
        assert_eq!(counts["sqs.SendMessageBatch"], 2);
        assert_eq!(counts["mongodb.find"], 1);
        assert!(take().is_empty());
    }
}
