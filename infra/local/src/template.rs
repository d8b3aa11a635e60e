//! Reads what the local stack needs from `template.yaml`: queues, the sends table and its
//! index, secrets, the SES configuration set, functions (Timeout, environment, SQS event
//! sources, Function URL) and parameter defaults. CloudFormation tags (`!Ref`, `!GetAtt`) are
//! kept as references and resolved against provisioned resources.

use anyhow::{bail, Context, Result};
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    pub logical_id: String,
    pub visibility_timeout: u32,
    pub retention: Option<u32>,
    /// (dead-letter queue logical id, maxReceiveCount)
    pub redrive: Option<(String, u32)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub logical_id: String,
    pub hash_key: String,
    pub range_key: Option<String>,
    pub ttl_attribute: Option<String>,
    /// Global secondary indexes (all attributes projected).
    pub indexes: Vec<IndexSpec>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    pub hash_key: String,
    pub range_key: Option<String>,
}

/// An environment value: a literal, or a reference to a parameter or resource.
#[derive(Clone, Debug, PartialEq)]
pub enum EnvValue {
    Literal(String),
    Ref(String),
    /// `!GetAtt X.Arn`: a queue's or a role's ARN.
    Arn(String),
    /// `!Join [separator, [values...]]`.
    Join(String, Vec<EnvValue>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SqsEventSpec {
    /// The SAM-generated event source mapping's logical id (`<Function><Event>`), which
    /// `!Ref` gives the mapping's UUID.
    pub mapping: String,
    pub queue: String,
    pub batch_size: u32,
    /// MaximumBatchingWindowInSeconds: how long a poller gathers records for one batch.
    pub batching_window_seconds: u32,
    pub maximum_concurrency: Option<u32>,
    pub report_batch_item_failures: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionSpec {
    pub logical_id: String,
    pub binary: Option<String>,
    pub timeout: u32,
    /// MemorySize in MB (the function's, else the Globals', else Lambda's default 128).
    pub memory_size: u32,
    pub env: BTreeMap<String, EnvValue>,
    pub sqs_events: Vec<SqsEventSpec>,
    pub schedule: Option<String>,
    /// Whether it has a Function URL (`FunctionUrlConfig`), referred to as `<id>Url`.
    pub function_url: bool,
    /// `ReservedConcurrentExecutions` (its parameter resolved): the most invocations at once,
    /// and ten times that per second (the local Function URL answers 429 beyond either).
    pub reserved_concurrency: Option<u32>,
    /// What Lambda does with its asynchronous invocations (`EventInvokeConfig`).
    pub async_invoke: AsyncInvokeSpec,
    /// The logical id of its execution role (`Role: !GetAtt XRole.Arn`).
    pub role: Option<String>,
}

/// `EventInvokeConfig`: how often Lambda retries a failed asynchronous invocation (2 unless
/// `MaximumRetryAttempts` says otherwise) and where the event goes after the last failure
/// (`DestinationConfig.OnFailure`, a queue here; without one Lambda drops it).
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncInvokeSpec {
    pub maximum_retry_attempts: u32,
    /// The logical id of the on-failure destination queue.
    pub on_failure_queue: Option<String>,
}

impl Default for AsyncInvokeSpec {
    fn default() -> Self {
        Self {
            maximum_retry_attempts: 2,
            on_failure_queue: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Template {
    /// The text it was read from (to resolve again with other parameter values).
    pub source: String,
    pub parameters: BTreeMap<String, Option<String>>,
    pub queues: Vec<QueueSpec>,
    pub tables: Vec<TableSpec>,
    pub functions: Vec<FunctionSpec>,
    /// Secrets whose value the deployment generates (logical ids).
    pub generated_secrets: Vec<String>,
    /// SES configuration sets (logical ids).
    pub configuration_sets: Vec<String>,
    /// EventBridge Scheduler schedule groups (logical ids).
    pub schedule_groups: Vec<String>,
    /// IAM roles (logical ids): locally they have an ARN and nothing more.
    pub roles: Vec<String>,
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A whole number, literal or `!Ref` to a parameter (resolved with its current value).
fn uint(
    v: Option<&Value>,
    what: &str,
    params: &BTreeMap<String, Option<String>>,
) -> Result<Option<u32>> {
    match v {
        None => Ok(None),
        Some(Value::Tagged(t)) if t.tag == "!Ref" => {
            let name = scalar(&t.value).unwrap_or_default();
            params
                .get(&name)
                .cloned()
                .flatten()
                .and_then(|s| s.parse().ok())
                .map(Some)
                .with_context(|| {
                    format!("{what} refers to parameter {name}, which has no numeric value")
                })
        }
        Some(v) => scalar(v)
            .and_then(|s| s.parse().ok())
            .map(Some)
            .with_context(|| format!("{what} is not a whole number: {v:?}")),
    }
}

/// The attribute of a table's (or index's) `KeySchema` with this KeyType.
fn key(spec: &Value, kind: &str) -> Option<String> {
    spec.get("KeySchema")
        .and_then(Value::as_sequence)?
        .iter()
        .find(|k| k.get("KeyType").and_then(Value::as_str) == Some(kind))
        .and_then(|k| k.get("AttributeName").and_then(scalar))
}

/// The logical id in `!Ref X`, `!GetAtt X.Arn` or `{"Fn::GetAtt": [X, Arn]}`.
fn env_value(v: &Value) -> Option<EnvValue> {
    if let Some(literal) = scalar(v) {
        return Some(EnvValue::Literal(literal));
    }
    let get_att = match v {
        Value::Tagged(t) if t.tag == "!GetAtt" => scalar(&t.value),
        Value::Mapping(m) => m
            .get("Fn::GetAtt")
            .and_then(|g| Some(format!("{}.{}", scalar(g.get(0)?)?, scalar(g.get(1)?)?))),
        _ => None,
    };
    if let Some(id) = get_att.as_deref().and_then(|a| a.strip_suffix(".Arn")) {
        return Some(EnvValue::Arn(id.to_owned()));
    }
    if let Some(id) = reference(v) {
        return Some(EnvValue::Ref(id));
    }
    let join = match v {
        Value::Tagged(t) if t.tag == "!Join" => &t.value,
        Value::Mapping(m) => m.get("Fn::Join")?,
        _ => return None,
    };
    let separator = scalar(join.get(0)?)?;
    let parts = join.get(1)?.as_sequence()?;
    let parts = parts.iter().map(env_value).collect::<Option<Vec<_>>>()?;
    Some(EnvValue::Join(separator, parts))
}

fn reference(v: &Value) -> Option<String> {
    match v {
        Value::Tagged(t) if t.tag == "!Ref" => scalar(&t.value),
        Value::Tagged(t) if t.tag == "!GetAtt" => {
            scalar(&t.value).map(|s| s.split('.').next().unwrap_or_default().to_owned())
        }
        Value::Mapping(m) => m
            .get("Ref")
            .and_then(scalar)
            .or_else(|| m.get("Fn::GetAtt")?.get(0).and_then(scalar)),
        _ => None,
    }
}

impl Template {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text)
            .with_context(|| format!("{} is not a template mailctl understands", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_with(text, &BTreeMap::new())
    }

    /// Parses with parameter values over the defaults (numbers given as `!Ref` follow them).
    pub fn parse_with(text: &str, overrides: &BTreeMap<String, String>) -> Result<Self> {
        let doc: Value = serde_yaml::from_str(text)?;
        let mut template = Template {
            source: text.to_owned(),
            ..Default::default()
        };
        if let Some(params) = doc.get("Parameters").and_then(Value::as_mapping) {
            for (name, spec) in params {
                let name = scalar(name).context("parameter name")?;
                let value = overrides
                    .get(&name)
                    .cloned()
                    .or_else(|| spec.get("Default").and_then(scalar));
                template.parameters.insert(name, value);
            }
        }
        let params = template.parameters.clone();
        let params = &params;
        let resources = doc
            .get("Resources")
            .and_then(Value::as_mapping)
            .context("no Resources")?;
        for (id, resource) in resources {
            let id = scalar(id).context("resource id")?;
            let props = resource.get("Properties").cloned().unwrap_or(Value::Null);
            match resource.get("Type").and_then(Value::as_str) {
                Some("AWS::SQS::Queue") => template.queues.push(QueueSpec {
                    visibility_timeout: uint(
                        props.get("VisibilityTimeout"),
                        "VisibilityTimeout",
                        params,
                    )?
                    .unwrap_or(30),
                    retention: uint(
                        props.get("MessageRetentionPeriod"),
                        "MessageRetentionPeriod",
                        params,
                    )?,
                    redrive: match props.get("RedrivePolicy") {
                        None => None,
                        Some(policy) => Some((
                            policy
                                .get("deadLetterTargetArn")
                                .and_then(reference)
                                .with_context(|| {
                                    format!("{id}: deadLetterTargetArn must be !GetAtt Queue.Arn")
                                })?,
                            uint(policy.get("maxReceiveCount"), "maxReceiveCount", params)?
                                .with_context(|| {
                                    format!("{id}: RedrivePolicy needs maxReceiveCount")
                                })?,
                        )),
                    },
                    logical_id: id,
                }),
                Some("AWS::DynamoDB::Table") => {
                    let mut indexes = Vec::new();
                    for index in props
                        .get("GlobalSecondaryIndexes")
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                    {
                        let name = index
                            .get("IndexName")
                            .and_then(scalar)
                            .with_context(|| format!("{id}: an index without IndexName"))?;
                        indexes.push(IndexSpec {
                            hash_key: key(index, "HASH")
                                .with_context(|| format!("{id}: index {name} has no HASH key"))?,
                            range_key: key(index, "RANGE"),
                            name,
                        });
                    }
                    template.tables.push(TableSpec {
                        hash_key: key(&props, "HASH")
                            .with_context(|| format!("{id}: no HASH key"))?,
                        range_key: key(&props, "RANGE"),
                        ttl_attribute: props
                            .get("TimeToLiveSpecification")
                            .and_then(|t| t.get("AttributeName"))
                            .and_then(scalar),
                        indexes,
                        logical_id: id,
                    });
                }
                Some("AWS::SecretsManager::Secret")
                    if props.get("GenerateSecretString").is_some() =>
                {
                    template.generated_secrets.push(id)
                }
                Some("AWS::SES::ConfigurationSet") => template.configuration_sets.push(id),
                Some("AWS::Scheduler::ScheduleGroup") => template.schedule_groups.push(id),
                Some("AWS::IAM::Role") => template.roles.push(id),
                Some("AWS::Serverless::Function") => template
                    .functions
                    .push(function(&id, resource, &props, &doc, params)?),
                _ => {}
            }
        }
        Ok(template)
    }

    pub fn function(&self, logical_id: &str) -> Result<&FunctionSpec> {
        match self.functions.iter().find(|f| f.logical_id == logical_id) {
            Some(f) => Ok(f),
            None => bail!("template.yaml has no function {logical_id}"),
        }
    }

    pub fn queue(&self, logical_id: &str) -> Option<&QueueSpec> {
        self.queues.iter().find(|q| q.logical_id == logical_id)
    }
}

fn function(
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
    let mut sqs_events = Vec::new();
    let mut schedule = None;
    if let Some(events) = props.get("Events").and_then(Value::as_mapping) {
        for (event_id, event) in events {
            let p = event.get("Properties").cloned().unwrap_or(Value::Null);
            match event.get("Type").and_then(Value::as_str) {
                Some("SQS") => sqs_events.push(SqsEventSpec {
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
                }),
                Some("Schedule" | "ScheduleV2") => {
                    schedule = p
                        .get("ScheduleExpression")
                        .map(|s| scalar(s).or_else(|| reference(s)).unwrap_or_default())
                }
                _ => {}
            }
        }
    }
    Ok(FunctionSpec {
        logical_id: id.to_owned(),
        binary: resource
            .get("Metadata")
            .and_then(|m| m.get("BuildProperties"))
            .and_then(|b| b.get("Binary"))
            .and_then(scalar),
        timeout: uint(props.get("Timeout"), "Timeout", params)?.unwrap_or(3),
        memory_size,
        env,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;

    #[test]
    fn reads_the_projects_template() {
        let t = Template::load(&crate::repo_root().join("template.yaml")).unwrap();
        let emails = t.queue(names::EMAILS_QUEUE).unwrap();
        assert_eq!(emails.redrive.as_ref().unwrap().0, names::EMAILS_DLQ);
        let send = t.function("SendEmailFunction").unwrap();
        assert_eq!(send.binary.as_deref(), Some("send-email"));
        assert_eq!(
            send.env["EMAILS_QUEUE_URL"],
            EnvValue::Ref(names::EMAILS_QUEUE.into())
        );
        assert_eq!(send.sqs_events[0].queue, names::EMAILS_QUEUE);
        assert!(send.sqs_events[0].report_batch_item_failures);
        assert_eq!(t.tables[0].range_key.as_deref(), Some("campaignId"));
        assert_eq!(t.tables[0].indexes[0].hash_key, "campaignShard");
        assert!(t.function("GetUsersFunction").unwrap().schedule.is_some());
        assert!(t.function("UnsubscribeFunction").unwrap().function_url);
        // Reserved concurrency: a parameter's value, a literal, or none.
        assert_eq!(
            t.function("UnsubscribeFunction")
                .unwrap()
                .reserved_concurrency,
            Some(26)
        );
        assert_eq!(
            t.function("RateControlFunction")
                .unwrap()
                .reserved_concurrency,
            Some(1)
        );
        assert_eq!(send.reserved_concurrency, None);
        let overrides = [("OpenContentConcurrency".to_string(), "7".to_string())].into();
        let smaller = Template::parse_with(&t.source, &overrides).unwrap();
        assert_eq!(
            smaller
                .function("OpenContentFunction")
                .unwrap()
                .reserved_concurrency,
            Some(7)
        );
        assert_eq!(
            t.function("CreateEmailsFunction").unwrap().env["UNSUBSCRIBE_BASE_URL"],
            EnvValue::Ref("UnsubscribeFunctionUrl".into())
        );
        assert_eq!(t.generated_secrets, ["UnsubscribeSigningKey"]);
        assert_eq!(t.configuration_sets, ["EmailConfigurationSet"]);
    }
}
