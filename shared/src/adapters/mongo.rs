//! The MongoDB client: built once per execution environment, pool bounded by config.

use crate::config::MongoConfig;
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

#[derive(Debug, thiserror::Error)]
#[error("MONGODB_URI ({uri}): {detail}")]
pub struct MongoConnectError {
    uri: String,
    detail: String,
}

/// The URI with any password replaced, safe for logs and errors.
pub fn redact_uri(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &uri[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..scheme + 3], &uri[at..])
        }
        _ => uri.to_owned(),
    }
}

pub async fn connect(config: &MongoConfig, app_name: &str) -> Result<Database, MongoConnectError> {
    let mut options = ClientOptions::parse(&config.uri)
        .await
        .map_err(|e| MongoConnectError {
            uri: redact_uri(&config.uri),
            detail: format!(
                "cannot be parsed ({}); expected mongodb://host:port/...",
                e.kind
            ),
        })?;
    options.max_pool_size = Some(config.max_pool_size);
    options.app_name = Some(app_name.to_owned());
    let client = Client::with_options(options).map_err(|e| MongoConnectError {
        uri: redact_uri(&config.uri),
        detail: e.to_string(),
    })?;
    Ok(client.database(&config.database))
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
    }
}
