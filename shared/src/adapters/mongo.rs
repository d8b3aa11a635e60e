//! The MongoDB client: built once per execution environment, pool bounded by config.

use crate::config::{MongoConfig, SecretRef};
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

#[derive(Debug, thiserror::Error)]
pub enum MongoConnectError {
    #[error(transparent)]
    Secret(#[from] super::secrets::SecretError),
    #[error("MONGODB_URI_SECRET_ID ({secret}): {detail}")]
    SecretValue { secret: String, detail: String },
    #[error("MongoDB URI ({uri}): {detail}")]
    Uri { uri: String, detail: String },
}

/// The URI itself: read from Secrets Manager once at init, or given directly.
async fn resolve_uri(
    uri: &SecretRef,
    sdk: &aws_config::SdkConfig,
) -> Result<String, MongoConnectError> {
    let value = super::secrets::resolve(uri, "MONGODB_URI_SECRET_ID", sdk).await?;
    let SecretRef::Secret(secret) = uri else {
        return Ok(value);
    };
    // Either the URI itself, or JSON with a "uri" field.
    if value.trim_start().starts_with('{') {
        let error = |detail: &str| MongoConnectError::SecretValue {
            secret: secret.clone(),
            detail: detail.to_owned(),
        };
        let json: serde_json::Value = serde_json::from_str(&value)
            .map_err(|_| error("the secret is neither a URI nor valid JSON"))?;
        return json
            .get("uri")
            .and_then(|u| u.as_str())
            .map(str::to_owned)
            .ok_or_else(|| error("the secret's JSON has no \"uri\" string"));
    }
    Ok(value.trim().to_owned())
}

/// The URI with any password replaced and its options hidden (they can carry credentials:
/// `authMechanismProperties=AWS_SESSION_TOKEN:...`, `tlsCertificateKeyFilePassword=...`),
/// safe for logs and errors, which Lambda also returns to the caller of a failed init.
pub fn redact_uri(uri: &str) -> String {
    let (uri, options) = match uri.split_once('?') {
        Some((base, _)) => (base, "?***"),
        None => (uri, ""),
    };
    let base = match (uri.find("://"), uri.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &uri[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..scheme + 3], &uri[at..])
        }
        _ => uri.to_owned(),
    };
    format!("{base}{options}")
}

pub async fn connect(
    config: &MongoConfig,
    sdk: &aws_config::SdkConfig,
    app_name: &str,
) -> Result<Database, MongoConnectError> {
    let uri = resolve_uri(&config.uri, sdk).await?;
    let invalid = |detail: String| MongoConnectError::Uri {
        uri: redact_uri(&uri),
        detail,
    };
    let mut options = ClientOptions::parse(&uri).await.map_err(|e| {
        invalid(format!(
            "cannot be parsed ({}); expected mongodb://host:port/...",
            e.kind
        ))
    })?;
    options.max_pool_size = Some(config.max_pool_size);
    options.app_name = Some(app_name.to_owned());
    options.command_event_handler = Some(crate::runtime::metering::mongo_command_monitor());
    let client = Client::with_options(options).map_err(|e| invalid(e.to_string()))?;
    Ok(client.database(&config.database))
}

impl From<mongodb::error::Error> for crate::ports::StoreError {
    fn from(err: mongodb::error::Error) -> Self {
        Self(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact_uri("mongodb+srv://app:s3cret@cluster.example.net/db"),
            "mongodb+srv://app:***@cluster.example.net/db"
        );
        assert_eq!(
            super::redact_uri("mongodb://127.0.0.1:1/"),
            "mongodb://127.0.0.1:1/"
        );
        // Options can carry credentials too, and an '@' of theirs is not the host's.
        assert_eq!(
            super::redact_uri(
                "mongodb://app:s3cret@h:27017/db?authMechanism=MONGODB-AWS\
                 &authMechanismProperties=AWS_SESSION_TOKEN:t0ken@x"
            ),
            "mongodb://app:***@h:27017/db?***"
        );
    }
}
