//! Secret values (the MongoDB URI, the unsubscribe signing key): read from Secrets Manager
//! once at init, as deployed, or given directly by local tools.

use crate::config::SecretRef;

#[derive(Debug, thiserror::Error)]
#[error("{var} ({secret}): cannot read the secret: {detail}")]
pub struct SecretError {
    /// The variable that named the secret.
    pub var: &'static str,
    pub secret: String,
    pub detail: String,
}

/// The secret's string value. `var` names the variable the reference came from.
pub async fn resolve(
    secret: &SecretRef,
    var: &'static str,
    sdk: &aws_config::SdkConfig,
) -> Result<String, SecretError> {
    let id = match secret {
        SecretRef::Plain(value) => return Ok(value.clone()),
        SecretRef::Secret(id) => id,
    };
    let error = |detail: String| SecretError {
        var,
        secret: id.clone(),
        detail,
    };
    let started = std::time::Instant::now();
    let value = super::secrets_client(sdk)
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .map_err(|e| error(aws_sdk_secretsmanager::error::DisplayErrorContext(&e).to_string()))?
        .secret_string
        .ok_or_else(|| error("the secret has no string value".into()))?;
    // Part of every cold start: worth seeing in the logs.
    tracing::info!(
        var,
        duration_ms = started.elapsed().as_millis() as u64,
        "secret read"
    );
    Ok(value)
}

/// The unsubscribe token signer, its keys read from the configured secret.
pub async fn unsubscribe_signer(
    config: &crate::config::UnsubscribeConfig,
    sdk: &aws_config::SdkConfig,
) -> Result<crate::domain::unsubscribe_link::Signer, SecretError> {
    const VAR: &str = "UNSUBSCRIBE_SECRET_ID";
    let keys = resolve(&config.secret, VAR, sdk).await?;
    crate::domain::unsubscribe_link::Signer::new(&keys, &config.list).map_err(|e| SecretError {
        var: VAR,
        secret: match &config.secret {
            crate::config::SecretRef::Secret(id) => id.clone(),
            crate::config::SecretRef::Plain(_) => "UNSUBSCRIBE_SECRET".into(),
        },
        detail: e.to_string(),
    })
}
