//! Metrics through CloudWatch's Embedded Metric Format: one JSON line per invocation on
//! stdout, which CloudWatch Logs turns into metrics with no agent, no API call and no
//! dependency (the format is one JSON object; docs/metrics.md says why no crate). EMF is
//! at least once and sampled by nothing: the exact counts stay the ledger's.
//!
//! Dimensions stay bounded: the stack and the function, never a user or a campaign (a
//! campaign is found by the time its sends ran, and `mailctl status` has its exact counts).

use serde_json::{json, Map, Value};

/// The namespace every mailflow metric is in.
pub const NAMESPACE: &str = "Mailflow";

/// One metric of an invocation: its name, its values (one, or up to `MAX_VALUES` samples
/// CloudWatch turns into a distribution: percentiles) and its CloudWatch unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: String,
    pub values: Vec<f64>,
    pub unit: &'static str,
}

/// The most values one metric of one EMF document may carry (CloudWatch's limit).
pub const MAX_VALUES: usize = 100;

impl Metric {
    pub fn count(name: impl Into<String>, value: f64) -> Self {
        Self::of(name, value, "Count")
    }

    pub fn ms(name: impl Into<String>, value: f64) -> Self {
        Self::of(name, value, "Milliseconds")
    }

    /// A rate, e.g. emails per second.
    pub fn per_second(name: impl Into<String>, value: f64) -> Self {
        Self::of(name, value, "Count/Second")
    }

    fn of(name: impl Into<String>, value: f64, unit: &'static str) -> Self {
        Self {
            name: name.into(),
            values: vec![value],
            unit,
        }
    }

    /// Samples of one quantity (the first `MAX_VALUES`), in `unit`.
    pub fn samples(name: impl Into<String>, mut values: Vec<f64>, unit: &'static str) -> Self {
        values.truncate(MAX_VALUES);
        Self {
            name: name.into(),
            values,
            unit,
        }
    }

    /// The unit a summary's field is in, by its name: `...Ms` milliseconds, else a count.
    fn unit_of(name: &str) -> &'static str {
        if name.ends_with("Ms") {
            "Milliseconds"
        } else {
            "Count"
        }
    }
}

/// What a stage's summary contributes: every count in it, a map of counts by reason as one
/// metric per reason (`skipped.held_out`: reasons are a closed set, so names stay bounded).
pub trait Measured {
    fn metrics(&self) -> Vec<Metric>;
}

impl Measured for () {
    fn metrics(&self) -> Vec<Metric> {
        Vec::new()
    }
}

/// Metrics a stage worked out itself (GetUsers' run or release, a Function URL's request).
impl Measured for Vec<Metric> {
    fn metrics(&self) -> Vec<Metric> {
        self.clone()
    }
}

/// The counts of a summary serialised as JSON (numbers, objects of numbers, and arrays of
/// samples, such as SendEmail's `lateMs`), those of 0 left out (`nonzero`).
pub fn counts_of(summary: &impl serde::Serialize) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Ok(Value::Object(fields)) = serde_json::to_value(summary) {
        for (name, value) in fields {
            match value {
                Value::Number(n) => out.extend(n.as_f64().map(|v| Metric::count(name.clone(), v))),
                Value::Array(samples) => {
                    let values: Vec<f64> = samples.iter().filter_map(Value::as_f64).collect();
                    if !values.is_empty() {
                        let unit = Metric::unit_of(&name);
                        out.push(Metric::samples(name, values, unit));
                    }
                }
                Value::Object(by_reason) => {
                    for (reason, n) in by_reason {
                        if let Some(v) = n.as_f64() {
                            out.push(Metric::count(format!("{name}.{reason}"), v));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    nonzero(out)
}

/// `metrics` without the counts of 0. CloudWatch bills a custom metric for each hour it
/// receives data: a count that stayed 0 (`busy`, `failed`, most reasons) costs nothing then
/// (the dashboard draws a missing minute as 0 with `FILL`). Gauges, times and samples
/// stay whatever their value (a rate at its floor is 0 most of the time, and must say so).
pub fn nonzero(metrics: Vec<Metric>) -> Vec<Metric> {
    metrics
        .into_iter()
        .filter(|m| m.unit != "Count" || m.values.len() != 1 || m.values[0] != 0.0)
        .collect()
}

/// The metrics every invocation of every function writes (`runtime::serve`).
pub const INVOCATION_METRICS: [&str; 5] = [
    "Invocations",
    "ColdStarts",
    "Errors",
    "BackendRequests",
    "DurationMs",
];

/// The stack a function belongs to: from its log group's name as CloudFormation makes it
/// (`{stack}-{logical id}-{suffix}`, the stack's name whole: a log group's name may be 512
/// characters, a function's only 64), else from the function's name the same way.
pub fn stack() -> String {
    let var = |name| std::env::var(name).unwrap_or_default();
    let group = var("AWS_LAMBDA_LOG_GROUP_NAME");
    match group.strip_prefix("/aws/lambda/") {
        // Lambda's own group, named after the function.
        Some(function) => stack_of(function).to_owned(),
        None if !group.is_empty() => stack_of(&group).to_owned(),
        None => stack_of(&var("AWS_LAMBDA_FUNCTION_NAME")).to_owned(),
    }
}

/// The stack in a name CloudFormation generated (`{stack}-{logical id}-{suffix}`); the whole
/// name when it has another shape.
pub fn stack_of(function_name: &str) -> &str {
    let mut parts = function_name.rsplitn(3, '-');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(_), Some(stack)) if !stack.is_empty() => stack,
        _ => function_name,
    }
}

/// A stage's name from its type (`mailflow::stages::send_email::SendEmail<...>`: `SendEmail`).
pub fn stage_name<S>() -> &'static str {
    let full = std::any::type_name::<S>();
    let bare = full.split('<').next().unwrap_or(full);
    bare.rsplit("::").next().unwrap_or(bare)
}

/// CloudWatch's limits on one EMF metric directive: the metrics it declares, the characters
/// of a metric's name, the dimensions of one dimension set.
pub const MAX_METRICS: usize = 100;
pub const MAX_NAME_CHARS: usize = 255;
pub const MAX_DIMENSIONS: usize = 30;

/// The dimensions every metric is written under (one set).
pub const DIMENSIONS: [&str; 2] = ["Stack", "Function"];
/// Keys at a document's root that are not metrics (the dimensions are the others).
const RESERVED: [&str; 3] = ["_aws", "level", "timestamp"];
const _: () = assert!(DIMENSIONS.len() <= MAX_DIMENSIONS);

/// The EMF documents of one invocation: one, or one more for each further `MAX_METRICS`
/// metrics (CloudWatch drops a directive that declares more, with every metric in it). Each
/// carries the dimensions and the `_aws` block that declares its metrics.
pub fn documents(stack: &str, function: &str, timestamp_ms: u64, metrics: &[Metric]) -> Vec<Value> {
    valid(metrics)
        .chunks(MAX_METRICS)
        .map(|chunk| document(stack, function, timestamp_ms, chunk))
        .collect()
}

fn document(stack: &str, function: &str, timestamp_ms: u64, metrics: &[Metric]) -> Value {
    let declared: Vec<Value> = metrics
        .iter()
        .map(|m| json!({"Name": m.name, "Unit": m.unit}))
        .collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [DIMENSIONS],
                "Metrics": declared,
            }],
        }),
    );
    root.insert(DIMENSIONS[0].into(), stack.into());
    root.insert(DIMENSIONS[1].into(), function.into());
    for m in metrics {
        let value = match m.values.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        root.insert(m.name.clone(), value);
    }
    Value::Object(root)
}

/// The metrics CloudWatch takes: finite values (JSON has no NaN: one would be written as
/// null and the whole document dropped), at least one each; a name of 1 to `MAX_NAME_CHARS`
/// characters that is not a dimension's or the `_aws` block's (it would overwrite them), and
/// each name once. A metric refused is logged and the others written.
fn valid(metrics: &[Metric]) -> Vec<Metric> {
    let mut seen = std::collections::BTreeSet::new();
    metrics
        .iter()
        .filter(|m| {
            let chars = m.name.chars().count();
            let reserved = RESERVED.contains(&m.name.as_str()) || DIMENSIONS.contains(&m.name.as_str());
            let ok = (1..=MAX_NAME_CHARS).contains(&chars) && !reserved && seen.insert(&m.name);
            if !ok {
                let shown: String = m.name.chars().take(80).collect();
                tracing::warn!(metric = %shown, chars, "metric not written: its name is empty, longer than CloudWatch takes (255), reserved or repeated");
            }
            ok
        })
        .map(|m| Metric {
            values: m.values.iter().copied().filter(|v| v.is_finite()).take(MAX_VALUES).collect(),
            ..m.clone()
        })
        .filter(|m| !m.values.is_empty())
        .collect()
}

/// The lines of one invocation's documents, each with the `level` Lambda's log filter keeps
/// (`telemetry::metrics_level`: a line without one is INFO to Lambda, and dropped under WARN)
/// and an RFC 3339 `timestamp` (without a valid one Lambda takes the line for INFO whatever
/// its level).
pub fn lines(
    level: crate::runtime::telemetry::LambdaLevel,
    stack: &str,
    function: &str,
    timestamp_ms: u64,
    metrics: &[Metric],
) -> Vec<String> {
    documents(stack, function, timestamp_ms, metrics)
        .into_iter()
        .map(|mut document| {
            if let Value::Object(root) = &mut document {
                root.insert("level".into(), level.as_str().into());
                let at = time::OffsetDateTime::UNIX_EPOCH
                    + time::Duration::milliseconds(timestamp_ms as i64);
                root.insert(
                    "timestamp".into(),
                    crate::domain::campaign::rfc3339(at).into(),
                );
            }
            document.to_string()
        })
        .collect()
}

/// Writes one invocation's documents on stdout, each as one line (CloudWatch Logs reads
/// them there).
pub fn emit(function: &str, metrics: &[Metric]) {
    use std::io::Write;
    let now = crate::domain::ledger::epoch_ms(std::time::SystemTime::now());
    let level = crate::runtime::telemetry::metrics_level();
    let mut out = std::io::stdout().lock();
    for line in lines(level, &stack(), function, now, metrics) {
        // A log line that cannot be written loses a metric, never an invocation.
        let _ = writeln!(out, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        sent: usize,
        busy: usize,
        skipped: std::collections::BTreeMap<&'static str, usize>,
        late_ms: Vec<f64>,
        note: &'static str,
    }

    #[test]
    fn a_summary_becomes_counts_and_the_document_declares_each() {
        let sample = Sample {
            sent: 3,
            busy: 0,
            skipped: [("held_out", 2), ("expired", 0)].into(),
            late_ms: vec![1.5, 40.0],
            note: "not a count",
        };
        let metrics = counts_of(&sample);
        // In the summary's order of fields (serde_json keeps it).
        assert_eq!(
            metrics,
            [
                Metric::count("sent", 3.0),
                Metric::count("skipped.held_out", 2.0),
                Metric::samples("lateMs", vec![1.5, 40.0], "Milliseconds")
            ]
        );
        let [doc] = documents("prod", "SendEmail", 7, &metrics)
            .try_into()
            .unwrap();
        assert_eq!(doc["Stack"], "prod");
        assert_eq!(doc["sent"], 3.0);
        assert_eq!(doc["skipped.held_out"], 2.0);
        // Samples as an array: CloudWatch keeps each value (percentiles).
        assert_eq!(doc["lateMs"], json!([1.5, 40.0]));
        // What JSON cannot carry is left out, never written as null.
        let odd = [
            Metric::ms("a", f64::NAN),
            Metric::samples("b", vec![f64::INFINITY, 2.0], "Count"),
        ];
        let [kept] = documents("prod", "SendEmail", 7, &odd).try_into().unwrap();
        assert!(kept.get("a").is_none(), "{kept}");
        assert_eq!(kept["b"], 2.0);
        assert_eq!(
            kept["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(directive["Metrics"][1]["Name"], "skipped.held_out");
        assert_eq!(directive["Metrics"][2]["Unit"], "Milliseconds");
        assert_eq!(doc["_aws"]["Timestamp"], 7);
    }

    /// Every directive of `docs` within CloudWatch's limits; the names declared, in order.
    fn within_limits(docs: &[Value]) -> Vec<String> {
        let mut names = Vec::new();
        for doc in docs {
            let directives = doc["_aws"]["CloudWatchMetrics"].as_array().unwrap();
            for directive in directives {
                let declared = directive["Metrics"].as_array().unwrap();
                assert!(declared.len() <= MAX_METRICS, "{} metrics", declared.len());
                for set in directive["Dimensions"].as_array().unwrap() {
                    let set = set.as_array().unwrap();
                    assert!((1..=MAX_DIMENSIONS).contains(&set.len()));
                    for d in set {
                        assert!(doc[d.as_str().unwrap()].is_string(), "{d} has no value");
                    }
                }
                for m in declared {
                    let name = m["Name"].as_str().unwrap();
                    assert!(
                        (1..=MAX_NAME_CHARS).contains(&name.chars().count()),
                        "{name}"
                    );
                    let values = &doc[name];
                    assert!(
                        values.is_number()
                            || values.as_array().is_some_and(|v| v.len() <= MAX_VALUES)
                    );
                    names.push(name.to_owned());
                }
            }
        }
        names
    }

    #[test]
    fn more_than_a_directive_takes_is_split_across_documents() {
        let metrics: Vec<Metric> = (0..250)
            .map(|i| Metric::count(format!("m{i}"), 1.0))
            .collect();
        let docs = documents("prod", "SendEmail", 7, &metrics);
        assert_eq!(docs.len(), 3);
        let names = within_limits(&docs);
        let wanted: Vec<String> = metrics.iter().map(|m| m.name.clone()).collect();
        assert_eq!(names, wanted, "each metric once, in order");
        for doc in &docs {
            assert_eq!(doc["Stack"], "prod");
            assert_eq!(doc["Function"], "SendEmail");
        }
        // Exactly a directive's worth: one document.
        assert_eq!(documents("p", "f", 7, &metrics[..MAX_METRICS]).len(), 1);
        assert!(documents("p", "f", 7, &[]).len() <= 1);
    }

    #[test]
    fn names_cloudwatch_would_refuse_are_left_out_and_the_rest_written() {
        let long = "x".repeat(MAX_NAME_CHARS + 1);
        let longest = "é".repeat(MAX_NAME_CHARS);
        let metrics = [
            Metric::count(long.clone(), 1.0),
            Metric::count("", 1.0),
            Metric::count("Stack", 1.0),
            Metric::count("Function", 1.0),
            Metric::count("_aws", 1.0),
            Metric::count("sent", 1.0),
            Metric::count("sent", 2.0),
            Metric::count(longest.clone(), 1.0),
            Metric::samples("lateMs", vec![1.0; 500], "Milliseconds"),
        ];
        let docs = documents("prod", "SendEmail", 7, &metrics);
        assert_eq!(within_limits(&docs), ["sent", longest.as_str(), "lateMs"]);
        assert_eq!(docs[0]["sent"], 1.0, "the first of a repeated name");
        assert_eq!(docs[0]["Stack"], "prod");
        assert_eq!(docs[0]["Function"], "SendEmail");
        assert!(docs[0].get(&long).is_none());
    }

    #[test]
    fn stack_and_stage_names_are_bounded() {
        assert_eq!(stack_of("mail-prod-SendEmailFunction-AbC123"), "mail-prod");
        assert_eq!(stack_of("SendEmailFunction"), "SendEmailFunction");
        assert_eq!(stage_name::<crate::runtime::Invocation>(), "Invocation");
    }
}
