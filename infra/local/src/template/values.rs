//! CloudFormation values as template.yaml writes them: scalars, whole numbers that may be a
//! `!Ref` to a parameter, key schemas, and the intrinsic functions (`!Ref`, `!GetAtt`,
//! `!Join`) kept as references to resolve against a provisioned stack.

use super::EnvValue;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use yaml_serde::Value;

pub(super) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A whole number, literal or `!Ref` to a parameter (resolved with its current value).
pub(super) fn uint(
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
pub(super) fn key(spec: &Value, kind: &str) -> Option<String> {
    spec.get("KeySchema")
        .and_then(Value::as_sequence)?
        .iter()
        .find(|k| k.get("KeyType").and_then(Value::as_str) == Some(kind))
        .and_then(|k| k.get("AttributeName").and_then(scalar))
}

/// The logical id in `!Ref X`, `!GetAtt X.Arn` or `{"Fn::GetAtt": [X, Arn]}`.
pub(super) fn env_value(v: &Value) -> Option<EnvValue> {
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

pub(super) fn reference(v: &Value) -> Option<String> {
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

/// A `WarmThroughput`'s write units: a mapping, or `!If [Condition, mapping, !Ref
/// AWS::NoValue]` with the condition evaluated on the parameters (None: DynamoDB's own).
pub(super) fn warm_writes(
    v: Option<&Value>,
    doc: &Value,
    params: &BTreeMap<String, Option<String>>,
) -> Result<Option<u32>> {
    match v {
        None => Ok(None),
        Some(Value::Tagged(t))
            if t.tag == "!Ref" && scalar(&t.value).as_deref() == Some("AWS::NoValue") =>
        {
            Ok(None)
        }
        Some(Value::Tagged(t)) if t.tag == "!If" => {
            let [name, then, otherwise] = t.value.as_sequence().map(Vec::as_slice).unwrap_or(&[])
            else {
                bail!("WarmThroughput: !If takes [condition, value, value]");
            };
            let name = scalar(name).context("WarmThroughput: !If's condition is not a name")?;
            let branch = if condition(doc, &name, params)? {
                then
            } else {
                otherwise
            };
            warm_writes(Some(branch), doc, params)
        }
        Some(Value::Mapping(mapping))
            if mapping
                .keys()
                .filter_map(Value::as_str)
                .any(|k| k == "Ref" || k.starts_with("Fn::")) =>
        {
            bail!(
                "WarmThroughput: write it with the short tags (!If, !Ref), which mailctl evaluates"
            )
        }
        Some(mapping) => uint(
            mapping.get("WriteUnitsPerSecond"),
            "WarmThroughput.WriteUnitsPerSecond",
            params,
        ),
    }
}

/// CloudFormation's nesting of conditions is finite: deeper than this is a cycle.
const CONDITION_DEPTH: usize = 32;

/// The template's condition `name` on the parameters' values.
fn condition(doc: &Value, name: &str, params: &BTreeMap<String, Option<String>>) -> Result<bool> {
    named(doc, name, params, 0)
}

fn named(
    doc: &Value,
    name: &str,
    params: &BTreeMap<String, Option<String>>,
    depth: usize,
) -> Result<bool> {
    if depth > CONDITION_DEPTH {
        bail!("condition {name} refers back to itself");
    }
    let body = doc
        .get("Conditions")
        .and_then(|c| c.get(name))
        .with_context(|| format!("condition {name} is not in Conditions"))?;
    truth(body, doc, params, depth).with_context(|| format!("condition {name}"))
}

/// `!Equals`, `!Not`, `!And`, `!Or` and `!Condition` over literals and parameters.
fn truth(
    v: &Value,
    doc: &Value,
    params: &BTreeMap<String, Option<String>>,
    depth: usize,
) -> Result<bool> {
    let Value::Tagged(t) = v else {
        bail!("{v:?} is not a condition function");
    };
    let inner = |c: &Value| truth(c, doc, params, depth + 1);
    let args = || t.value.as_sequence().map(Vec::as_slice).unwrap_or(&[]);
    let tag = |name: &str| t.tag == name;
    if tag("!Equals") {
        let [a, b] = args() else {
            bail!("!Equals takes two values");
        };
        Ok(operand(a, params)? == operand(b, params)?)
    } else if tag("!Not") {
        let [c] = args() else {
            bail!("!Not takes one condition");
        };
        Ok(!inner(c)?)
    } else if tag("!And") || tag("!Or") {
        // CloudFormation takes 2 to 10 conditions.
        let all = args();
        if !(2..=10).contains(&all.len()) {
            bail!("{} takes 2 to 10 conditions", t.tag);
        }
        let mut each = all.iter().map(inner);
        if tag("!And") {
            each.try_fold(true, |both, c| Ok(both && c?))
        } else {
            each.try_fold(false, |either, c| Ok(either || c?))
        }
    } else if tag("!Condition") {
        named(
            doc,
            &scalar(&t.value).unwrap_or_default(),
            params,
            depth + 1,
        )
    } else {
        bail!("{} is not a condition function mailctl evaluates", t.tag)
    }
}

/// A literal, or a parameter's value by `!Ref`.
fn operand(v: &Value, params: &BTreeMap<String, Option<String>>) -> Result<String> {
    match v {
        Value::Tagged(t) if t.tag == "!Ref" => {
            let name = scalar(&t.value).unwrap_or_default();
            params
                .get(&name)
                .cloned()
                .flatten()
                .with_context(|| format!("parameter {name} has no value"))
        }
        other => scalar(other).with_context(|| format!("{other:?} is not a value")),
    }
}
