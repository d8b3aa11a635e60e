//! Every metric the dashboard and the alarms of template.yaml name is one a function writes
//! (EMF, `mailflow::runtime::emf`, under the stack and the function that writes it) or one
//! AWS publishes for that kind of resource, with the dimension that resource has.

use std::collections::{BTreeMap, BTreeSet};
use yaml_serde::Value;

fn template() -> Value {
    let path = mailctl::repo_root().join("template.yaml");
    yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn of_type<'a>(t: &'a Value, kind: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(move |(_, r)| r["Type"].as_str() == Some(kind))
        .map(|(id, r)| (id.as_str().unwrap(), r))
}

/// What each function writes, under the `Function` its binary names itself by (the stage's
/// type, as `runtime::serve` reads it): every invocation's metrics, and its summary's counts.
fn written() -> BTreeMap<&'static str, Vec<String>> {
    use mailflow::assemble::*;
    use mailflow::runtime::emf::stage_name;
    let invocation: Vec<String> = mailflow::runtime::emf::INVOCATION_METRICS
        .iter()
        .map(|m| m.to_string())
        .collect();
    let with = |summary: Vec<String>| [invocation.clone(), summary].concat();
    let named = |names: &[&str]| with(names.iter().map(|n| n.to_string()).collect());
    let functions = BTreeMap::from([
        (
            stage_name::<LambdaSendEmail>(),
            [
                with(mailflow::stages::send_email::Summary::metric_names()),
                named(&mailflow::stages::send_email::pacing::GAUGE_NAMES),
            ]
            .concat(),
        ),
        (
            stage_name::<LambdaCreateEmails>(),
            with(mailflow::stages::create_emails::Summary::metric_names()),
        ),
        (
            stage_name::<LambdaSesEvents>(),
            with(mailflow::stages::ses_events::Summary::metric_names()),
        ),
        (
            stage_name::<LambdaGetUsers>(),
            named(&mailflow::stages::get_users::METRIC_NAMES),
        ),
        (
            stage_name::<LambdaRateControl>(),
            named(&mailflow::stages::rate_control::METRIC_NAMES),
        ),
        (
            stage_name::<LambdaUnsubscribe>(),
            named(&mailflow::runtime::function_url::REQUEST_METRICS),
        ),
        (
            stage_name::<LambdaOpenContent>(),
            named(&mailflow::runtime::function_url::REQUEST_METRICS),
        ),
        (stage_name::<LambdaReputationGuard>(), invocation.clone()),
    ]);
    assert_eq!(
        functions.len(),
        8,
        "each its own name: {:?}",
        functions.keys()
    );
    functions
}

/// The reasons a count by reason can have, per function.
fn reasons(function: &str) -> Vec<&'static str> {
    match function {
        "SendEmail" => mailflow::domain::guardrails::Skip::ALL
            .iter()
            .map(|s| s.as_str())
            .collect(),
        "CreateEmails" => mailflow::domain::digest::SkipReason::ALL
            .iter()
            .map(|s| s.as_str())
            .collect(),
        // The routes a public request is counted by.
        "OpenContent" => mailflow::stages::open_content::ROUTES.to_vec(),
        "Unsubscribe" => mailflow::stages::preferences::ROUTES.to_vec(),
        _ => Vec::new(),
    }
}

/// AWS's metrics the template may name, by namespace, and the dimension they need.
const AWS_METRICS: &[(&str, &[&str], Option<&str>)] = &[
    (
        "AWS/SQS",
        &[
            "ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage",
            "ApproximateNumberOfMessagesNotVisible",
        ],
        Some("QueueName"),
    ),
    (
        "AWS/Lambda",
        &[
            "Errors",
            "Throttles",
            "Invocations",
            "Duration",
            "DestinationDeliveryFailures",
            "Url4xxCount",
            "Url5xxCount",
            "UrlRequestLatency",
        ],
        Some("FunctionName"),
    ),
    (
        "AWS/SES",
        &["Reputation.BounceRate", "Reputation.ComplaintRate"],
        None,
    ),
];

/// One metric the template names: namespace, name, dimensions (value as the template
/// spells it: `queue:X`, `function:X`, `STACK`, or a literal).
#[derive(Debug)]
struct Named {
    place: String,
    namespace: String,
    name: String,
    dimensions: BTreeMap<String, String>,
}

fn check(t: &Value, named: &Named) {
    let queues: BTreeSet<&str> = of_type(t, "AWS::SQS::Queue").map(|(id, _)| id).collect();
    let functions: BTreeMap<&str, &Value> = of_type(t, "AWS::Serverless::Function").collect();
    let place = &named.place;
    if named.namespace == mailflow::runtime::emf::NAMESPACE {
        let keys: Vec<&str> = named.dimensions.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["Function", "Stack"],
            "{place}: {named:?}: the dimensions written"
        );
        assert_eq!(
            named.dimensions.get("Stack").map(String::as_str),
            Some("STACK"),
            "{place}: {named:?} is the stack's own"
        );
        let function = named.dimensions.get("Function").expect("a function");
        let written = written();
        let names = written
            .get(function.as_str())
            .unwrap_or_else(|| panic!("{place}: no function {function}"));
        let ok = names.iter().any(|n| match n.strip_suffix(".*") {
            Some(field) => named
                .name
                .strip_prefix(&format!("{field}."))
                .is_some_and(|reason| reasons(function).contains(&reason)),
            None => *n == named.name,
        });
        assert!(
            ok,
            "{place}: {function} writes no {} ({names:?})",
            named.name
        );
        return;
    }
    let (_, metrics, dimension) = AWS_METRICS
        .iter()
        .find(|(ns, _, _)| *ns == named.namespace)
        .unwrap_or_else(|| panic!("{place}: namespace {} is not known here", named.namespace));
    assert!(metrics.contains(&named.name.as_str()), "{place}: {named:?}");
    match dimension {
        Some("QueueName") => {
            let queue = named.dimensions["QueueName"]
                .strip_prefix("queue:")
                .unwrap_or("");
            assert!(queues.contains(queue), "{place}: {named:?} names no queue");
        }
        Some(_) => {
            let id = named.dimensions["FunctionName"]
                .strip_prefix("function:")
                .unwrap_or("");
            let function = functions
                .get(id)
                .unwrap_or_else(|| panic!("{place}: {named:?} names no function"));
            if named.name.starts_with("Url") {
                assert!(
                    function["Properties"].get("FunctionUrlConfig").is_some(),
                    "{place}: {id} has no Function URL"
                );
            }
        }
        None => assert!(named.dimensions.is_empty(), "{place}: {named:?}"),
    }
}

/// The dashboard's body with its `!Sub` references spelled as `check` reads them.
fn dashboard(t: &Value) -> serde_json::Value {
    let (_, dashboard) = of_type(t, "AWS::CloudWatch::Dashboard")
        .next()
        .expect("a dashboard");
    let Value::Tagged(sub) = &dashboard["Properties"]["DashboardBody"] else {
        panic!("the body is a !Sub");
    };
    let mut body = sub.value.as_str().unwrap().to_owned();
    while let Some(start) = body.find("${") {
        let end = start + body[start..].find('}').unwrap();
        let reference = &body[start + 2..end];
        let spelled = match reference {
            "AWS::StackName" => "STACK".to_owned(),
            "AWS::Region" => "us-east-1".to_owned(),
            "SendRatePerSecond" => "14".to_owned(),
            r if r.ends_with(".QueueName") => format!("queue:{}", &r[..r.len() - 10]),
            r => format!("function:{r}"),
        };
        body.replace_range(start..=end, &spelled);
    }
    serde_json::from_str(&body).expect("the dashboard's body is JSON")
}

#[test]
fn every_metric_the_dashboard_and_alarms_name_is_written_or_published() {
    let t = template();
    let mut named = Vec::new();
    for (i, widget) in dashboard(&t)["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let metrics = widget["properties"]["metrics"].as_array().unwrap();
        // An expression names only metrics of its widget, by their ids.
        let ids: BTreeSet<&str> = metrics
            .iter()
            .filter_map(|m| m.as_array()?.last()?.get("id")?.as_str())
            .collect();
        for metric in metrics {
            let parts = metric.as_array().unwrap();
            if let Some(expression) = parts[0].get("expression").and_then(|e| e.as_str()) {
                let named_ids: Vec<&str> = expression
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
                    .collect();
                assert!(!named_ids.is_empty(), "widget {i}: {expression}");
                for id in named_ids {
                    assert!(
                        ids.contains(id),
                        "widget {i}: {expression} names no metric {id}"
                    );
                }
                continue;
            }
            let namespace = parts[0].as_str().unwrap();
            let strings: Vec<&str> = parts.iter().filter_map(|p| p.as_str()).collect();
            named.push(Named {
                place: format!("dashboard widget {i}"),
                namespace: namespace.to_owned(),
                name: strings[1].to_owned(),
                dimensions: strings[2..]
                    .chunks(2)
                    .map(|kv| (kv[0].to_owned(), kv[1].to_owned()))
                    .collect(),
            });
        }
    }
    assert!(named.len() > 20, "{}", named.len());
    for (id, alarm) in of_type(&t, "AWS::CloudWatch::Alarm") {
        let p = &alarm["Properties"];
        let spell = |v: &Value| match v {
            Value::Tagged(tag) if tag.tag == "!GetAtt" => {
                let at = tag.value.as_str().unwrap();
                format!("queue:{}", at.strip_suffix(".QueueName").unwrap_or(at))
            }
            Value::Tagged(tag) if tag.tag == "!Ref" => match tag.value.as_str().unwrap() {
                "AWS::StackName" => "STACK".to_owned(),
                function => format!("function:{function}"),
            },
            other => other.as_str().unwrap_or_default().to_owned(),
        };
        named.push(Named {
            place: format!("alarm {id}"),
            namespace: p["Namespace"].as_str().unwrap().to_owned(),
            name: p["MetricName"].as_str().unwrap().to_owned(),
            dimensions: p["Dimensions"]
                .as_sequence()
                .map(|d| {
                    d.iter()
                        .map(|kv| (kv["Name"].as_str().unwrap().to_owned(), spell(&kv["Value"])))
                        .collect()
                })
                .unwrap_or_default(),
        });
        assert!(
            p.get("TreatMissingData").is_some(),
            "alarm {id}: say how missing data (an idle queue, no invocation) counts"
        );
    }
    for n in &named {
        check(&t, n);
    }
}

/// Every metric a function can write in one invocation, at once (each count by reason with
/// every reason it has), stays within what CloudWatch takes from an EMF line: each written,
/// under the longest stack name CloudFormation allows.
#[test]
fn every_functions_emf_lines_stay_within_cloudwatchs_limits() {
    use mailflow::runtime::emf::{self, Metric};
    let stack = "s".repeat(128);
    for (function, names) in written() {
        let every: Vec<String> = names
            .iter()
            .flat_map(|n| match n.strip_suffix(".*") {
                Some(field) => reasons(function)
                    .iter()
                    .map(|r| format!("{field}.{r}"))
                    .collect::<Vec<_>>(),
                None => vec![n.clone()],
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let metrics: Vec<Metric> = every
            .iter()
            .map(|n| Metric::samples(n.clone(), vec![1.0; emf::MAX_VALUES + 5], "Count"))
            .collect();
        let docs = emf::documents(&stack, function, 7, &metrics);
        let mut declared = Vec::new();
        for doc in &docs {
            let line = doc.to_string();
            assert!(!line.contains('\n'));
            for directive in doc["_aws"]["CloudWatchMetrics"].as_array().unwrap() {
                let metrics = directive["Metrics"].as_array().unwrap();
                assert!(
                    metrics.len() <= emf::MAX_METRICS,
                    "{function}: {}",
                    metrics.len()
                );
                for set in directive["Dimensions"].as_array().unwrap() {
                    let set = set.as_array().unwrap();
                    assert!((1..=emf::MAX_DIMENSIONS).contains(&set.len()), "{function}");
                    for d in set {
                        let value = doc[d.as_str().unwrap()].as_str().unwrap();
                        assert!((1..=1024).contains(&value.len()) && value.is_ascii());
                    }
                }
                for m in metrics {
                    let name = m["Name"].as_str().unwrap();
                    assert!(
                        (1..=emf::MAX_NAME_CHARS).contains(&name.chars().count()),
                        "{function}: {name}"
                    );
                    assert!(doc[name].as_array().unwrap().len() <= emf::MAX_VALUES);
                    declared.push(name.to_owned());
                }
            }
        }
        assert_eq!(declared, every, "{function}: every metric written once");
    }
}
