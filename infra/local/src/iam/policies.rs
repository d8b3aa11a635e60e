//! template.yaml's role policies read as the local IAM check evaluates them: every role's
//! statements (inline `Policies` and `AWS::IAM::Policy` resources naming it), their `!Ref`,
//! `!GetAtt` and `!Sub` resolved, and what the check cannot evaluate refused here.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use yaml_serde::Value;

/// The condition operators `infra/moto_iam.py` evaluates (its `OPERATORS`); a statement with
/// any other is refused at registration, so that a Deny it could not evaluate is never
/// skipped.
const CONDITION_OPERATORS: [&str; 2] = ["StringEquals", "ForAllValues:StringEquals"];

/// One statement of a role's policy, its references resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    pub sid: Option<String>,
    pub effect: String,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    /// `{operator: {key: [values]}}`, as the template writes it.
    pub conditions: serde_json::Value,
}

/// Every role's statements (inline `Policies` and `AWS::IAM::Policy` resources naming it),
/// resolved with `resolve` (a reference's value: `X` for `!Ref X`, `X.Arn` for `!GetAtt`).
pub fn role_statements(
    template: &str,
    resolve: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, Vec<Statement>>> {
    let doc: Value = yaml_serde::from_str(template).context("template.yaml")?;
    let resources = doc
        .get("Resources")
        .and_then(Value::as_mapping)
        .context("template.yaml has no Resources")?;
    let mut roles: BTreeMap<String, Vec<Statement>> = BTreeMap::new();
    for (id, resource) in resources {
        let id = id.as_str().unwrap_or_default();
        let props = resource.get("Properties");
        match resource.get("Type").and_then(Value::as_str) {
            Some("AWS::IAM::Role") => {
                let statements = roles.entry(id.to_owned()).or_default();
                for policy in props
                    .and_then(|p| p.get("Policies"))
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                {
                    statements.extend(statements_of(id, policy.get("PolicyDocument"), resolve)?);
                }
            }
            Some("AWS::IAM::Policy") => {
                let statements =
                    statements_of(id, props.and_then(|p| p.get("PolicyDocument")), resolve)?;
                for role in props
                    .and_then(|p| p.get("Roles"))
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                {
                    let role = reference(role)
                        .with_context(|| format!("{id}: Roles must be !Ref of roles"))?;
                    roles.entry(role).or_default().extend(statements.clone());
                }
            }
            _ => {}
        }
    }
    Ok(roles)
}

fn statements_of(
    id: &str,
    document: Option<&Value>,
    resolve: &dyn Fn(&str) -> String,
) -> Result<Vec<Statement>> {
    let mut out = Vec::new();
    for statement in document
        .and_then(|d| d.get("Statement"))
        .and_then(Value::as_sequence)
        .with_context(|| format!("{id}: a PolicyDocument without Statement"))?
    {
        for unsupported in ["NotAction", "NotResource", "Principal"] {
            if statement.get(unsupported).is_some() {
                bail!("{id}: {unsupported} in an identity policy is not modelled by the local IAM check");
            }
        }
        let strings = |field: &str| -> Result<Vec<String>> {
            let value = statement
                .get(field)
                .with_context(|| format!("{id}: a statement without {field}"))?;
            Ok(match value {
                Value::Sequence(items) => items
                    .iter()
                    .map(|v| resolved(v, resolve))
                    .collect::<Result<_>>()?,
                one => vec![resolved(one, resolve)?],
            })
        };
        let conditions = match statement.get("Condition") {
            Some(c) => condition_json(c, resolve)?,
            None => serde_json::Value::Null,
        };
        if let Some(operators) = conditions.as_object() {
            if let Some(other) = operators
                .keys()
                .find(|o| !CONDITION_OPERATORS.contains(&o.as_str()))
            {
                bail!("{id}: the condition operator {other} is not modelled by the local IAM check (infra/moto_iam.py)");
            }
        }
        out.push(Statement {
            sid: statement
                .get("Sid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            effect: statement
                .get("Effect")
                .and_then(Value::as_str)
                .with_context(|| format!("{id}: a statement without Effect"))?
                .to_owned(),
            actions: strings("Action")?,
            resources: strings("Resource")?,
            conditions,
        });
    }
    Ok(out)
}

fn condition_json(value: &Value, resolve: &dyn Fn(&str) -> String) -> Result<serde_json::Value> {
    Ok(match value {
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| {
                    Ok((
                        k.as_str().unwrap_or_default().to_owned(),
                        condition_json(v, resolve)?,
                    ))
                })
                .collect::<Result<_>>()?,
        ),
        Value::Sequence(items) => serde_json::Value::Array(
            items
                .iter()
                .map(|v| condition_json(v, resolve))
                .collect::<Result<_>>()?,
        ),
        other => serde_json::Value::String(resolved(other, resolve)?),
    })
}

fn reference(value: &Value) -> Option<String> {
    match value {
        Value::Tagged(t) if t.tag == "!Ref" => t.value.as_str().map(str::to_owned),
        _ => None,
    }
}

/// A policy string: a literal, `!Ref X`, `!GetAtt X.Arn` or `!Sub` over `${...}`.
fn resolved(value: &Value, resolve: &dyn Fn(&str) -> String) -> Result<String> {
    Ok(match value {
        Value::String(s) => s.clone(),
        Value::Tagged(t) if t.tag == "!Ref" => resolve(t.value.as_str().unwrap_or_default()),
        Value::Tagged(t) if t.tag == "!GetAtt" => match &t.value {
            Value::Sequence(parts) => resolve(
                &parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("."),
            ),
            other => resolve(other.as_str().unwrap_or_default()),
        },
        Value::Tagged(t) if t.tag == "!Sub" => {
            let text = t
                .value
                .as_str()
                .context("!Sub with variables is not modelled")?;
            let mut out = String::new();
            let mut rest = text;
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let end = rest[start..].find('}').context("!Sub: an unclosed ${")? + start;
                out.push_str(&resolve(&rest[start + 2..end]));
                rest = &rest[end + 1..];
            }
            out.push_str(rest);
            out
        }
        other => bail!("a policy value that is not a string, !Ref, !GetAtt or !Sub: {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_resolve_refs_getatts_and_subs_and_name_their_roles() {
        let template = r##"
Resources:
  Q: {Type: AWS::SQS::Queue}
  ARole:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
              - Sid: One
                Effect: Allow
                Action: [sqs:SendMessage, sqs:DeleteMessage]
                Resource: !GetAtt Q.Arn
              - Effect: Allow
                Action: dynamodb:UpdateItem
                Resource: !Sub "arn:${AWS::Partition}:x:${AWS::Region}:${T.Arn}/index/I"
                Condition:
                  ForAllValues:StringEquals:
                    dynamodb:LeadingKeys: ["#send-rate"]
  Extra:
    Type: AWS::IAM::Policy
    Properties:
      Roles: [!Ref ARole]
      PolicyDocument:
        Statement:
          - Effect: Allow
            Action: lambda:InvokeFunction
            Resource: [!GetAtt [F, Arn], !Ref S]
"##;
        let roles = role_statements(template, &|name| format!("<{name}>")).unwrap();
        let statements = &roles["ARole"];
        assert_eq!(statements.len(), 3);
        assert_eq!(statements[0].sid.as_deref(), Some("One"));
        assert_eq!(
            statements[0].actions,
            ["sqs:SendMessage", "sqs:DeleteMessage"]
        );
        assert_eq!(statements[0].resources, ["<Q.Arn>"]);
        assert_eq!(
            statements[1].resources,
            ["arn:<AWS::Partition>:x:<AWS::Region>:<T.Arn>/index/I"]
        );
        assert_eq!(
            statements[1].conditions,
            serde_json::json!({"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#send-rate"]}})
        );
        assert_eq!(statements[2].resources, ["<F.Arn>", "<S>"]);
    }

    #[test]
    fn what_the_check_cannot_evaluate_is_refused_at_registration() {
        let template = r#"
Resources:
  R:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyDocument:
            Statement:
              - {Effect: Allow, NotAction: "s3:*", Resource: "*"}
"#;
        let err = role_statements(template, &|n| n.to_owned()).unwrap_err();
        assert!(format!("{err:#}").contains("NotAction"), "{err:#}");
        let template = r#"
Resources:
  R:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyDocument:
            Statement:
              - Effect: Deny
                Action: "sqs:*"
                Resource: "*"
                Condition: {StringNotEquals: {"aws:SourceVpc": "vpc-1"}}
"#;
        let err = role_statements(template, &|n| n.to_owned()).unwrap_err();
        assert!(format!("{err:#}").contains("StringNotEquals"), "{err:#}");
    }

    #[test]
    fn the_projects_roles_all_resolve() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
                .unwrap();
        let roles = role_statements(&text, &|n| n.to_owned()).unwrap();
        for role in [
            "GetUsersRole",
            "CreateEmailsRole",
            "SendEmailRole",
            "ReleaseSchedulerRole",
        ] {
            assert!(!roles[role].is_empty(), "{role}");
        }
    }
}
