//! An `AWS::Serverless::Function` as the simulator needs it: its binary, Timeout and
//! MemorySize, environment, SQS event sources and schedule, Function URL, reserved
//! concurrency, role and `EventInvokeConfig`.

use super::values::{env_value, reference, scalar, uint};
use super::{AsyncInvokeSpec, EnvValue, FunctionSpec, SqsEventSpec};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use yaml_serde::Value;

pub(super) fn function(
    id: &str,
    resource: &Value,
    props: &Value,
    doc: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<FunctionSpec> {
    let globals = doc.get("Globals").and_then(|g| g.get("Function"));
    let memory_size = match uint(props.get("MemorySize"), "MemorySize", params)? {
        Some(mb) => mb,
        None => uint(
            globals.and_then(|g| g.get("MemorySize")),
            "MemorySize",
            params,
        )?
        .unwrap_or(128),
    };
    let (sqs_events, schedule) = events(id, props, params)?;
    Ok(FunctionSpec {
        logical_id: id.to_owned(),
        binary: resource
            .get("Metadata")
            .and_then(|m| m.get("BuildProperties"))
            .and_then(|b| b.get("Binary"))
            .and_then(scalar),
        timeout: uint(props.get("Timeout"), "Timeout", params)?.unwrap_or(3),
        memory_size,
        env: environment(id, props)?,
        sqs_events,
        schedule,
        function_url: props.get("FunctionUrlConfig").is_some(),
        reserved_concurrency: uint(
            props.get("ReservedConcurrentExecutions"),
            "ReservedConcurrentExecutions",
            params,
        )?,
        async_invoke: async_invoke(id, props.get("EventInvokeConfig"), params)?,
        role: props.get("Role").and_then(reference),
    })
}

/// `Environment.Variables`: each a literal, a reference or a `!Join` of them.
fn environment(id: &str, props: &Value) -> Result<BTreeMap<String, EnvValue>> {
    let mut env = BTreeMap::new();
    if let Some(vars) = props
        .get("Environment")
        .and_then(|e| e.get("Variables"))
        .and_then(Value::as_mapping)
    {
        for (name, value) in vars {
            let name = scalar(name).context("variable name")?;
            let value = env_value(value).with_context(|| {
                format!("{id}: {name} must be a literal, !Ref or !Join of them")
            })?;
            env.insert(name, value);
        }
    }
    Ok(env)
}

/// `Events`: its SQS event sources and its schedule expression, if any.
fn events(
    id: &str,
    props: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<(Vec<SqsEventSpec>, Option<String>)> {
    let mut sqs_events = Vec::new();
    let mut schedule = None;
    for (event_id, event) in props
        .get("Events")
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
    {
        let p = event.get("Properties").cloned().unwrap_or(Value::Null);
        match event.get("Type").and_then(Value::as_str) {
            Some("SQS") => sqs_events.push(sqs_event(id, event_id, &p, params)?),
            Some("Schedule" | "ScheduleV2") => {
                schedule = p
                    .get("ScheduleExpression")
                    .map(|s| scalar(s).or_else(|| reference(s)).unwrap_or_default())
            }
            _ => {}
        }
    }
    Ok((sqs_events, schedule))
}

/// Function `id`'s SQS event `event_id`, with properties `p`.
fn sqs_event(
    id: &str,
    event_id: &Value,
    p: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<SqsEventSpec> {
    Ok(SqsEventSpec {
        mapping: format!("{id}{}", scalar(event_id).unwrap_or_default()),
        queue: p
            .get("Queue")
            .and_then(reference)
            .with_context(|| format!("{id}: SQS event without Queue"))?,
        batch_size: uint(p.get("BatchSize"), "BatchSize", params)?.unwrap_or(10),
        batching_window_seconds: uint(
            p.get("MaximumBatchingWindowInSeconds"),
            "MaximumBatchingWindowInSeconds",
            params,
        )?
        .unwrap_or(0),
        maximum_concurrency: uint(
            p.get("ScalingConfig")
                .and_then(|s| s.get("MaximumConcurrency")),
            "MaximumConcurrency",
            params,
        )?,
        report_batch_item_failures: p
            .get("FunctionResponseTypes")
            .and_then(Value::as_sequence)
            .is_some_and(|t| {
                t.iter()
                    .any(|v| v.as_str() == Some("ReportBatchItemFailures"))
            }),
    })
}

fn async_invoke(
    id: &str,
    config: Option<&Value>,
    params: &BTreeMap<String, Option<String>>,
) -> Result<AsyncInvokeSpec> {
    let Some(config) = config else {
        return Ok(AsyncInvokeSpec::default());
    };
    let retries = uint(
        config.get("MaximumRetryAttempts"),
        "MaximumRetryAttempts",
        params,
    )?
    .unwrap_or(2);
    if retries > 2 {
        bail!("{id}: EventInvokeConfig MaximumRetryAttempts is {retries}; Lambda allows 0 to 2");
    }
    if config.get("MaximumEventAgeInSeconds").is_some() {
        bail!("{id}: EventInvokeConfig MaximumEventAgeInSeconds is not simulated: a test would see retries AWS would not make; remove it or teach infra/local/src/async_invoke.rs");
    }
    let on_failure = config
        .get("DestinationConfig")
        .and_then(|d| d.get("OnFailure"));
    let on_failure_queue = match on_failure {
        None => None,
        Some(target) => {
            let kind = target.get("Type").and_then(scalar).unwrap_or_default();
            if kind != "SQS" {
                bail!("{id}: the simulator delivers on-failure destinations of Type SQS only, not {kind:?}");
            }
            Some(
                target
                    .get("Destination")
                    .and_then(reference)
                    .with_context(|| {
                        format!("{id}: OnFailure Destination must be !GetAtt Queue.Arn")
                    })?,
            )
        }
    };
    Ok(AsyncInvokeSpec {
        maximum_retry_attempts: retries,
        on_failure_queue,
    })
}
