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
//!
//! Reading the template's policies is `policies`; the key each role signs with is
//! `crate::role_keys`.

pub mod policies;

use crate::role_keys::{access_key, SECRET};
use crate::stack::Stack;
use anyhow::{bail, Context, Result};
use policies::role_statements;
use serde::Deserialize;

/// The account the local emulator serves (moto's default).
pub const ACCOUNT: &str = "123456789012";
/// A generated physical name's random suffix, as CloudFormation appends it.
const SUFFIX_LEN: usize = 12;
/// Lambda's limit on a function name.
const FUNCTION_NAME_MAX: usize = 64;

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
}
