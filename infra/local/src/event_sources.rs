//! The event source mappings template.yaml's SQS events create, registered on the local
//! stack's Lambda emulator (moto) as SAM creates them on AWS: one per SQS event, named by
//! `!Ref <Function><Event>`. moto keeps them as records (infra/moto_server.py, fix 5); the
//! local runner is the poller and reads each one's State, so that `mailctl pause` and the
//! reputation guard stop it exactly as they stop Lambda's pollers.

use crate::http;
use crate::stack::Stack;
use anyhow::{bail, Context, Result};
use mailflow::adapters::event_sources::{EventSourceMappings, DISABLED, DISABLING};

/// The role the local functions are registered with (moto checks that a role exists).
const ROLE: &str = "mailflow-local-functions";
/// An empty zip archive: the local functions' code runs elsewhere (the runner, the Runtime
/// API host); moto only needs a package to register them.
const EMPTY_ZIP: &[u8] = b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

/// Creates the role once per emulator, through IAM's query API (no IAM SDK is compiled for
/// this one call).
async fn ensure_role(sdk: &aws_config::SdkConfig) -> Result<String> {
    let endpoint = sdk
        .endpoint_url()
        .context("the local stack needs AWS_ENDPOINT_URL (moto's address)")?;
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let body = format!(
        "Action=CreateRole&Version=2010-05-08&RoleName={ROLE}&AssumeRolePolicyDocument={}",
        form_encode(trust)
    );
    let response = http::request(
        &format!("{}/", endpoint.trim_end_matches('/')),
        "POST",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            // moto routes a request by the service in its credential scope.
            (
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
            ),
        ],
        body.as_bytes(),
    )
    .await
    .context("creating the local functions' IAM role")?;
    let text = response.text();
    if response.status != 200 && !text.contains("EntityAlreadyExists") {
        bail!(
            "creating the local functions' IAM role: HTTP {}: {text}",
            response.status
        );
    }
    Ok(format!("arn:aws:iam::123456789012:role/{ROLE}"))
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Registers each function that has SQS events, and one mapping per event (idempotent: an
/// existing mapping is kept, with its state). Records each mapping's UUID in `stack.names`
/// under its logical id.
pub async fn register(stack: &mut Stack) -> Result<()> {
    let lambda = aws_sdk_lambda::Client::new(&stack.sdk);
    let functions: Vec<_> = stack
        .template
        .functions
        .iter()
        .filter(|f| !f.sqs_events.is_empty())
        .cloned()
        .collect();
    if functions.is_empty() {
        return Ok(());
    }
    let role = ensure_role(&stack.sdk).await?;
    for function in functions {
        let name = format!("{}-{}", stack.prefix, function.logical_id);
        let created = lambda
            .create_function()
            .function_name(&name)
            .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
            .handler("bootstrap")
            .role(&role)
            .code(
                aws_sdk_lambda::types::FunctionCode::builder()
                    .zip_file(aws_sdk_lambda::primitives::Blob::new(EMPTY_ZIP))
                    .build(),
            )
            .send()
            .await;
        if let Err(e) = created {
            if !e
                .as_service_error()
                .is_some_and(|e| e.is_resource_conflict_exception())
            {
                return Err(e).with_context(|| format!("registering function {name}"));
            }
        }
        for event in &function.sqs_events {
            let arn = stack
                .queue_arns
                .get(&event.queue)
                .with_context(|| format!("{name}: no queue {}", event.queue))?
                .clone();
            let existing = lambda
                .list_event_source_mappings()
                .function_name(&name)
                .event_source_arn(&arn)
                .send()
                .await
                .with_context(|| format!("listing the event source mappings of {name}"))?
                .event_source_mappings
                .unwrap_or_default()
                .into_iter()
                .find_map(|m| m.uuid);
            let uuid = match existing {
                Some(uuid) => uuid,
                None => lambda
                    .create_event_source_mapping()
                    .function_name(&name)
                    .event_source_arn(&arn)
                    .batch_size(event.batch_size as i32)
                    .enabled(true)
                    .send()
                    .await
                    .with_context(|| format!("creating the event source mapping of {name}"))?
                    .uuid
                    .with_context(|| format!("{name}: the event source mapping has no UUID"))?,
            };
            stack.names.insert(event.mapping.clone(), uuid);
        }
    }
    Ok(())
}

/// Reads a mapping's State for a poller, at most once a second (Lambda's pollers see a
/// disable within seconds too), through the adapter `mailctl pause` uses.
pub struct MappingState {
    mapping: EventSourceMappings,
    seen: tokio::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

impl MappingState {
    pub fn new(sdk: &aws_config::SdkConfig, uuid: String) -> Self {
        Self {
            mapping: EventSourceMappings::new(aws_sdk_lambda::Client::new(sdk), vec![uuid]),
            seen: tokio::sync::Mutex::default(),
        }
    }

    /// Whether the mapping is on (not Disabled or Disabling); a read that fails counts as
    /// on: the runner keeps polling rather than stall on an emulator hiccup.
    pub async fn enabled(&self) -> bool {
        let mut seen = self.seen.lock().await;
        if let Some((at, enabled)) = *seen {
            if at.elapsed() < std::time::Duration::from_secs(1) {
                return enabled;
            }
        }
        let enabled = match self.mapping.states().await {
            Ok(states) => !states
                .iter()
                .any(|(_, state)| state == DISABLED || state == DISABLING),
            Err(_) => true,
        };
        *seen = Some((std::time::Instant::now(), enabled));
        enabled
    }
}
