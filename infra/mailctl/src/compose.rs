//! The email one user gets in one campaign, composed by the same code as CreateEmails
//! (`CreateEmails::compose`) with the configuration that function has: read from
//! template.yaml for a local stack, from the deployed function otherwise. `mailctl preview`,
//! `test-send` and `plan` (`commands/preview.rs`) use it, for the weekly digest or a
//! campaign definition (`definition_source`).

use anyhow::{bail, Context, Result};
use mailflow::assemble::LambdaCreateEmails;
use mailflow::config::CreateEmailsConfig;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow::domain::messages::{EmailJob, UserMessage};
use mailflow_local::stack::Stack;
use std::collections::BTreeMap;

/// CreateEmails as configured by `env` (its function's environment).
pub async fn create_emails(
    sdk: &aws_config::SdkConfig,
    env: &BTreeMap<String, String>,
) -> Result<LambdaCreateEmails> {
    let config = CreateEmailsConfig::from_source(&|k: &str| env.get(k).cloned())?;
    Ok(mailflow::assemble::create_emails(config, sdk, "mailctl", false).await?)
}

/// The environment of a local stack's CreateEmails, as template.yaml sets it.
pub fn local_env(stack: &Stack) -> Result<BTreeMap<String, String>> {
    stack.env(mailflow_local::pipeline::CREATE_EMAILS)
}

/// The environment of the deployed CreateEmails function.
pub async fn deployed_env(
    sdk: &aws_config::SdkConfig,
    function: &str,
) -> Result<BTreeMap<String, String>> {
    let config = aws_sdk_lambda::Client::new(sdk)
        .get_function_configuration()
        .function_name(function)
        .send()
        .await
        .with_context(|| format!("reading the configuration of {function}"))?;
    Ok(config
        .environment
        .and_then(|e| e.variables)
        .unwrap_or_default()
        .into_iter()
        .collect())
}

/// The email `user` gets in `campaign`, or why they get none: the weekly digest's, or with
/// `definition` that version's (the stage given its loader: `definition_source`).
pub async fn compose(
    stage: &LambdaCreateEmails,
    user: &str,
    campaign: &Campaign,
    definition: Option<&PinnedDefinition>,
) -> Result<EmailJob> {
    let message = UserMessage {
        campaign_id: campaign.id.clone(),
        user_id: user.to_owned(),
        window: campaign.window,
        topic: campaign.topic.clone(),
        include_failed: false,
        include_cancelled: false,
        due: None,
        zone: None,
        variant: None,
        definition: definition.cloned(),
    };
    match stage.compose(message).await? {
        Ok(job) => Ok(job),
        Err(reason) => bail!(
            "{user} gets no email in {}: {}",
            campaign.id,
            reason.as_str()
        ),
    }
}

/// The headers and text part, as an operator reads them.
pub fn describe(job: &EmailJob) -> String {
    let mut out = format!("To: {}\nSubject: {}\n", job.to, job.subject);
    if let Some(url) = &job.unsubscribe_url {
        for (name, value) in mailflow::domain::mime::unsubscribe_headers(url) {
            out.push_str(&format!("{name}: {value}\n"));
        }
    }
    out.push('\n');
    out.push_str(&job.text);
    out
}
