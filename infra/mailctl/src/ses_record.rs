//! The SES emulator's record of sent messages (moto: `GET /moto-api/data.json`, `ses` ->
//! `Message`), read with a minimal HTTP/1.0 GET so no HTTP client crate is needed.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, Deserialize)]
pub struct SentMessage {
    pub id: String,
    pub destinations: Destinations,
    pub subject: Option<String>,
    /// The HTML body when the email has one.
    pub body: Option<String>,
    pub source: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Destinations {
    #[serde(rename = "ToAddresses", default)]
    pub to: Vec<String>,
}

/// `host:port` of an `http://host:port[/]` endpoint.
pub fn authority(endpoint: &str) -> Result<&str> {
    let rest = endpoint.strip_prefix("http://").with_context(|| {
        format!("AWS_ENDPOINT_URL {endpoint:?} is not an http:// URL of the emulator")
    })?;
    Ok(rest.split('/').next().unwrap_or(rest))
}

/// Reads the record, retrying: the emulator serialises its whole state for this call and
/// answers 500 when a concurrent request changes that state mid-way.
pub async fn sent_messages(endpoint: &str) -> Result<Vec<SentMessage>> {
    let mut attempt = 0;
    loop {
        match read_record(endpoint).await {
            Err(err) if attempt < 8 => {
                attempt += 1;
                tracing::debug!(error = %err, attempt, "reading the SES record again");
                tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
            }
            other => return other,
        }
    }
}

async fn read_record(endpoint: &str) -> Result<Vec<SentMessage>> {
    let host = authority(endpoint)?;
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to the emulator at {host}"))?;
    let request =
        format!("GET /moto-api/data.json HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("malformed HTTP response from the emulator")?;
    let status = String::from_utf8_lossy(&response[..split]);
    if !status.starts_with("HTTP/1.0 200") && !status.starts_with("HTTP/1.1 200") {
        bail!(
            "emulator answered {}",
            status.lines().next().unwrap_or_default()
        );
    }
    let data: serde_json::Value = serde_json::from_slice(&response[split + 4..])?;
    let messages = data
        .get("ses")
        .and_then(|s| s.get("Message"))
        .cloned()
        .unwrap_or(serde_json::Value::Array(Vec::new()));
    Ok(serde_json::from_value(messages)?)
}

/// The recorded messages sent to addresses in `domain`.
pub async fn sent_to_domain(endpoint: &str, domain: &str) -> Result<Vec<SentMessage>> {
    let suffix = format!("@{domain}");
    Ok(sent_messages(endpoint)
        .await?
        .into_iter()
        .filter(|m| m.destinations.to.iter().any(|to| to.ends_with(&suffix)))
        .collect())
}
