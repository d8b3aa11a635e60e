//! Reads what the local stack needs from `template.yaml`: queues, the sends table and its
//! index, secrets, the SES configuration set, functions (Timeout, environment, SQS event
//! sources, Function URL) and parameter defaults. CloudFormation tags (`!Ref`, `!GetAtt`) are
//! kept as references and resolved against provisioned resources. Reading those values is
//! `values`; reading a function, `functions`.

mod functions;
mod values;

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use values::{key, reference, scalar, uint, warm_writes};
use yaml_serde::Value;

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
    /// `WarmThroughput`'s write units, where the template sets them.
    pub warm_writes: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    pub hash_key: String,
    pub range_key: Option<String>,
    pub warm_writes: Option<u32>,
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
        let doc: Value = yaml_serde::from_str(text)?;
        let mut template = Template {
            source: text.to_owned(),
            parameters: parameters(&doc, overrides)?,
            ..Default::default()
        };
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
                Some("AWS::SQS::Queue") => template.queues.push(queue(id, &props, params)?),
                Some("AWS::DynamoDB::Table") => {
                    template.tables.push(table(id, &props, &doc, params)?)
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
                    .push(functions::function(&id, resource, &props, &doc, params)?),
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

/// Every parameter with its value: `overrides`' if it has one, else its Default, if any.
fn parameters(
    doc: &Value,
    overrides: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Option<String>>> {
    let mut parameters = BTreeMap::new();
    if let Some(params) = doc.get("Parameters").and_then(Value::as_mapping) {
        for (name, spec) in params {
            let name = scalar(name).context("parameter name")?;
            let value = overrides
                .get(&name)
                .cloned()
                .or_else(|| spec.get("Default").and_then(scalar));
            parameters.insert(name, value);
        }
    }
    Ok(parameters)
}

/// An `AWS::SQS::Queue`: its visibility timeout, retention and redrive policy.
fn queue(
    id: String,
    props: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<QueueSpec> {
    Ok(QueueSpec {
        visibility_timeout: uint(props.get("VisibilityTimeout"), "VisibilityTimeout", params)?
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
                    .with_context(|| format!("{id}: RedrivePolicy needs maxReceiveCount"))?,
            )),
        },
        logical_id: id,
    })
}

/// An `AWS::DynamoDB::Table`: its keys, global secondary indexes, TTL attribute and warm
/// throughput.
fn table(
    id: String,
    props: &Value,
    doc: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<TableSpec> {
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
            warm_writes: warm_writes(index.get("WarmThroughput"), doc, params)
                .with_context(|| format!("{id}: index {name}"))?,
            name,
        });
    }
    Ok(TableSpec {
        hash_key: key(props, "HASH").with_context(|| format!("{id}: no HASH key"))?,
        range_key: key(props, "RANGE"),
        ttl_attribute: props
            .get("TimeToLiveSpecification")
            .and_then(|t| t.get("AttributeName"))
            .and_then(scalar),
        warm_writes: warm_writes(props.get("WarmThroughput"), doc, params)
            .with_context(|| format!("{id}: WarmThroughput"))?,
        indexes,
        logical_id: id,
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
        // The sends table's warm throughput: DynamoDB's own unless the parameters set it.
        let sends = &t.tables[0];
        assert_eq!(
            (sends.warm_writes, sends.indexes[0].warm_writes),
            (None, None)
        );
        let waiting = |t: &Template| {
            let table = (t.tables.iter()).find(|t| t.logical_id == "WaitingTable");
            table.unwrap().warm_writes
        };
        assert_eq!(waiting(&t), None);
        let warm = [
            ("SendsTableWarmWrites".to_string(), "60200".to_string()),
            ("SendsIndexWarmWrites".to_string(), "40200".to_string()),
            ("WaitingTableWarmWrites".to_string(), "34000".to_string()),
        ]
        .into();
        let warmed = Template::parse_with(&t.source, &warm).unwrap();
        let sends = &warmed.tables[0];
        assert_eq!(
            (sends.warm_writes, sends.indexes[0].warm_writes),
            (Some(60_200), Some(40_200))
        );
        assert_eq!(waiting(&warmed), Some(34_000));
        assert_eq!(
            t.function("CreateEmailsFunction").unwrap().env["UNSUBSCRIBE_BASE_URL"],
            EnvValue::Ref("UnsubscribeFunctionUrl".into())
        );
        assert_eq!(t.generated_secrets, ["UnsubscribeSigningKey"]);
        assert_eq!(t.configuration_sets, ["EmailConfigurationSet"]);
    }

    #[test]
    fn evaluates_the_conditions_a_warm_throughput_names() {
        let text = r#"
Parameters:
  Warm: {Type: Number, Default: 0}
  Mode: {Type: String, Default: "on"}
Conditions:
  Warms: !Not [!Equals [!Ref Warm, "0"]]
  Both: !And [!Condition Warms, !Or [!Equals [!Ref Mode, "on"], !Equals ["a", "b"]]]
  Odd: !Select [0, [true]]
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{AttributeName: id, KeyType: HASH}]
      WarmThroughput: !If [Both, {WriteUnitsPerSecond: !Ref Warm}, !Ref AWS::NoValue]
"#;
        let with = |warm: &str| {
            let overrides = [("Warm".to_string(), warm.to_string())].into();
            Template::parse_with(text, &overrides).map(|t| t.tables[0].warm_writes)
        };
        assert_eq!(with("0").unwrap(), None);
        assert_eq!(with("5000").unwrap(), Some(5000));
        let odd = text.replace("[Both,", "[Odd,");
        let err = format!("{:#}", Template::parse(&odd).unwrap_err());
        assert!(err.contains("!Select is not a condition function"), "{err}");
        let looping = text.replace("Odd: !Select [0, [true]]", "Odd: !Condition Odd");
        let err = format!(
            "{:#}",
            Template::parse(&looping.replace("[Both,", "[Odd,")).unwrap_err()
        );
        assert!(err.contains("condition Odd refers back to itself"), "{err}");
        let single = text.replace(
            "!And [!Condition Warms, !Or [!Equals [!Ref Mode, \"on\"], !Equals [\"a\", \"b\"]]]",
            "!And [!Condition Warms]",
        );
        let err = format!("{:#}", Template::parse(&single).unwrap_err());
        assert!(err.contains("takes 2 to 10 conditions"), "{err}");
        let long_form = text.replace(
            "!If [Both, {WriteUnitsPerSecond: !Ref Warm}, !Ref AWS::NoValue]",
            "{\"Fn::If\": [Both, {WriteUnitsPerSecond: 5}, {Ref: AWS::NoValue}]}",
        );
        let err = format!("{:#}", Template::parse(&long_form).unwrap_err());
        assert!(err.contains("short tags"), "{err}");
        let missing = text.replace("[Both,", "[Nowhere,");
        let err = format!("{:#}", Template::parse(&missing).unwrap_err());
        assert!(
            err.contains("condition Nowhere is not in Conditions"),
            "{err}"
        );
    }
}
