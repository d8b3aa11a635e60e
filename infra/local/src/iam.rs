//! IAM on the local stack. template.yaml's role policies are resolved for this stack as
//! CloudFormation resolves them and registered with the local AWS emulator
//! (`infra/moto_iam.py`), which then checks every request signed with a role's key as AWS
//! does: a request no statement allows fails with AccessDeniedException and is recorded.
//! Each function signs with its role's key ([`function_sdk`], and `AWS_ACCESS_KEY_ID` in the
//! environment of a function started as a process), as Lambda gives a function its role's
//! credentials; the local scheduler asks the emulator whether a schedule's role may invoke
//! its target ([`authorize`]). [`denials`] lists what was refused, and a run that met one
//! fails (`LocalPipeline::drain`).
//!
//! Names: a function's ARN is generated as CloudFormation generates it ([`function_name`]:
//! the release schedules target GetUsers by it, so a grant by a name pattern that a long
//! stack name breaks breaks here too). The other resources keep their local names
//! (`{prefix}-{logical id}`, never shortened), so a pattern over their generated names would
//! not be caught here; `security::no_grant_names_a_resource_by_the_stacks_name` refuses
//! every such pattern in the template instead.

use crate::stack::Stack;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_yaml::Value;
use std::collections::BTreeMap;

/// The account the local emulator serves (moto's default).
pub const ACCOUNT: &str = "123456789012";
/// The secret key every role's key signs with (the emulator checks only the key id).
const SECRET: &str = "local-role-secret";
/// A generated physical name's random suffix, as CloudFormation appends it.
const SUFFIX_LEN: usize = 12;
/// Lambda's limit on a function name.
const FUNCTION_NAME_MAX: usize = 64;
/// The condition operators `infra/moto_iam.py` evaluates (its `OPERATORS`); a statement with
/// any other is refused at registration, so that a Deny it could not evaluate is never
/// skipped.
const CONDITION_OPERATORS: [&str; 2] = ["StringEquals", "ForAllValues:StringEquals"];

/// The name CloudFormation generates for a function without `FunctionName`:
/// `{stack}-{logical id}-{suffix}`, shortened to Lambda's 64 characters. CloudFormation does
/// not document where it cuts; here the stack name is cut first (to no less than half of
/// what is left), then the logical id. Any cut drops the literal part of a
/// `${AWS::StackName}-LogicalId*` pattern, which is what matters: such a pattern stops
/// matching once the stack name is longer than 64 - 12 - 2 - the logical id's length.
pub fn function_name(stack: &str, logical_id: &str) -> String {
    let room = FUNCTION_NAME_MAX - SUFFIX_LEN - 2;
    let (mut stack_len, mut id_len) = (stack.len(), logical_id.len());
    if stack_len + id_len > room {
        stack_len = stack_len.min(room.saturating_sub(id_len).max(room / 2));
        id_len = id_len.min(room - stack_len);
    }
    let suffix: String = {
        // Deterministic for a stack and id (the local stack is provisioned again and again).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in stack.bytes().chain(logical_id.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..SUFFIX_LEN)
            .map(|i| ALPHABET[((h >> (i * 5)) % ALPHABET.len() as u64) as usize] as char)
            .collect()
    };
    format!(
        "{}-{}-{suffix}",
        stack[..stack_len].trim_end_matches('-'),
        &logical_id[..id_len]
    )
}

pub fn function_arn(region: &str, stack: &str, logical_id: &str) -> String {
    format!(
        "arn:aws:lambda:{region}:{ACCOUNT}:function:{}",
        function_name(stack, logical_id)
    )
}

/// The access key a role's requests are signed with on the local stack.
pub fn access_key(stack: &str, role: &str) -> String {
    format!("{stack}.{role}")
}

/// `sdk` signing with `function`'s role's key, when the function has a role.
pub fn function_sdk(
    sdk: &aws_config::SdkConfig,
    stack: &Stack,
    function: &str,
) -> Result<aws_config::SdkConfig> {
    let Some(role) = stack.template.function(function)?.role.clone() else {
        return Ok(sdk.clone());
    };
    let credentials = aws_sdk_sqs::config::Credentials::new(
        access_key(&stack.prefix, &role),
        SECRET,
        None,
        None,
        "local-role",
    );
    Ok(sdk
        .to_builder()
        .credentials_provider(aws_types::sdk_config::SharedCredentialsProvider::new(
            credentials,
        ))
        .build())
}

/// The environment Lambda adds for a function's role (for a function started as a process).
pub fn role_env(stack: &Stack, function: &str) -> Result<BTreeMap<String, String>> {
    Ok(match &stack.template.function(function)?.role {
        Some(role) => BTreeMap::from([
            (
                "AWS_ACCESS_KEY_ID".to_owned(),
                access_key(&stack.prefix, role),
            ),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET.to_owned()),
        ]),
        None => BTreeMap::new(),
    })
}

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

/// What the emulator refused.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Denial {
    pub role: String,
    pub action: String,
    pub resource: String,
    pub reason: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} may not {} on {} ({})",
            self.role, self.action, self.resource, self.reason
        )
    }
}

/// Every role's statements (inline `Policies` and `AWS::IAM::Policy` resources naming it),
/// resolved with `resolve` (a reference's value: `X` for `!Ref X`, `X.Arn` for `!GetAtt`).
pub fn role_statements(
    template: &str,
    resolve: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, Vec<Statement>>> {
    let doc: Value = serde_yaml::from_str(template).context("template.yaml")?;
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

/// `name`'s value in `stack` as CloudFormation gives it to a policy: `X` is `!Ref X`, `X.Arn`
/// is `!GetAtt X.Arn`. A resource with no local counterpart (a log group) resolves to an ARN
/// that matches no request.
pub fn resolve(stack: &Stack, region: &str, name: &str) -> String {
    let unresolved = || format!("arn:aws:unresolved:::{name}");
    match name {
        "AWS::Partition" => return "aws".into(),
        "AWS::Region" => return region.into(),
        "AWS::AccountId" => return ACCOUNT.into(),
        "AWS::StackName" => return stack.prefix.clone(),
        _ => {}
    }
    if let Some(id) = name.strip_suffix(".Arn") {
        if let Some(arn) = stack.queue_arns.get(id) {
            return arn.clone();
        }
        if let Some(table) = stack.table_names.get(id) {
            return format!("arn:aws:dynamodb:{region}:{ACCOUNT}:table/{table}");
        }
        if stack.template.roles.iter().any(|r| r == id) {
            return stack.names.get(id).cloned().unwrap_or_else(unresolved);
        }
        if stack.template.functions.iter().any(|f| f.logical_id == id) {
            return function_arn(region, &stack.prefix, id);
        }
        return unresolved();
    }
    if stack.template.generated_secrets.iter().any(|s| s == name) {
        // !Ref of a secret is its ARN, whose last six characters Secrets Manager draws.
        return match stack.names.get(name) {
            Some(secret) => {
                format!("arn:aws:secretsmanager:{region}:{ACCOUNT}:secret:{secret}-??????")
            }
            None => unresolved(),
        };
    }
    if let Some(value) = stack.parameters.get(name) {
        return value.clone();
    }
    if let Some(table) = stack.table_names.get(name) {
        return table.clone();
    }
    if let Some(value) = stack.names.get(name) {
        return value.clone();
    }
    unresolved()
}

/// The emulator's address (`host:port`), from the stack's SDK configuration.
fn emulator(stack: &Stack) -> Result<String> {
    let endpoint = stack
        .sdk
        .endpoint_url()
        .context("the local stack's SDK configuration has no endpoint")?;
    Ok(endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned())
}

async fn call(
    stack: &Stack,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value> {
    let url = format!("http://{}/mailflow-api/iam/{path}", emulator(stack)?);
    let body = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body)?
    };
    let response =
        crate::http::request(&url, method, &[("content-type", "application/json")], &body)
            .await
            .with_context(|| format!("the local IAM check at {url}"))?;
    if response.status != 200 {
        bail!(
            "the local IAM check answered {} to {method} {path} (is the emulator infra/moto_server.py?): {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        );
    }
    Ok(serde_json::from_slice(&response.body)?)
}

/// Registers every role of `stack` with the emulator, its policies resolved for this stack.
pub async fn register(stack: &Stack) -> Result<()> {
    let region = stack
        .sdk
        .region()
        .map_or("us-east-1".to_owned(), |r| r.to_string());
    let roles = role_statements(&stack.template.source, &|name| {
        resolve(stack, &region, name)
    })?;
    let roles: Vec<_> = roles
        .into_iter()
        .map(|(role, statements)| {
            serde_json::json!({
                "key": access_key(&stack.prefix, &role),
                "stack": stack.prefix,
                "role": role,
                "statements": statements,
            })
        })
        .collect();
    call(
        stack,
        "POST",
        "roles",
        &serde_json::json!({ "roles": roles }),
    )
    .await?;
    Ok(())
}

/// Whether `role` may do `action` on `resource` (recorded as a denial if not).
pub async fn authorize(stack: &Stack, role: &str, action: &str, resource: &str) -> Result<bool> {
    let answer = call(
        stack,
        "POST",
        "authorize",
        &serde_json::json!({
            "key": access_key(&stack.prefix, role),
            "action": action,
            "resource": resource,
        }),
    )
    .await?;
    Ok(answer["allowed"].as_bool() == Some(true))
}

/// What the emulator refused this stack's roles so far.
pub async fn denials(stack: &Stack) -> Result<Vec<Denial>> {
    let path = format!("denials?stack={}", stack.prefix);
    let answer = call(stack, "GET", &path, &serde_json::Value::Null).await?;
    Ok(serde_json::from_value(answer["denials"].clone())?)
}

/// An error naming every request refused to this stack's roles, if any was.
pub async fn ensure_no_denials(stack: &Stack) -> Result<()> {
    let denials = denials(stack).await?;
    if denials.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = denials.iter().map(|d| format!("  {d}")).collect();
    bail!(
        "template.yaml's roles refused {} request(s) a function made (on AWS each fails with AccessDeniedException):\n{}",
        denials.len(),
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_fit_lambda_and_keep_short_stack_names_whole() {
        let short = function_name("mailflow-prod", "GetUsersFunction");
        assert!(
            short.starts_with("mailflow-prod-GetUsersFunction-"),
            "{short}"
        );
        assert_eq!(
            short.len(),
            "mailflow-prod-GetUsersFunction-".len() + SUFFIX_LEN
        );
        let long = function_name(&"s".repeat(40), "GetUsersFunction");
        assert!(long.len() <= FUNCTION_NAME_MAX, "{long}");
        assert!(!long.starts_with(&format!("{}-GetUsersFunction", "s".repeat(40))));
        // The longest stack name a `${AWS::StackName}-GetUsersFunction*` pattern still matches.
        let edge = "e".repeat(FUNCTION_NAME_MAX - SUFFIX_LEN - 2 - "GetUsersFunction".len());
        assert!(function_name(&edge, "GetUsersFunction")
            .starts_with(&format!("{edge}-GetUsersFunction")));
        let over = format!("{edge}x");
        assert!(!function_name(&over, "GetUsersFunction")
            .starts_with(&format!("{over}-GetUsersFunction")));
        assert_eq!(function_name("a", "B"), function_name("a", "B"));
    }

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
