//! The SES emulator's record of sent messages (moto: `GET /moto-api/data.json`, `ses` ->
//! `RawMessage`), read with `crate::http`'s minimal client. SendEmail
//! sends raw MIME; each message is parsed back into its headers and parts here, so tests see
//! exactly what a mailbox would get.

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::Deserialize;

/// What the emulator records of a raw email.
#[derive(Clone, Debug, Deserialize)]
struct RawRecord {
    id: String,
    source: Option<String>,
    #[serde(default)]
    destinations: Vec<String>,
    raw_data: String,
}

/// One email as the emulator recorded it, parsed.
#[derive(Clone, Debug)]
pub struct SentMessage {
    pub id: String,
    pub source: Option<String>,
    /// Recipients (the To header).
    pub to: Vec<String>,
    /// Every header, unfolded, in order (names as written).
    pub headers: Vec<(String, String)>,
    /// The subject, decoded.
    pub subject: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
}

impl SentMessage {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    fn parse(record: RawRecord) -> Self {
        let (head, body) = split_head(&record.raw_data);
        let headers = parse_headers(head);
        let find = |name: &str| find_header(&headers, name).map(str::to_owned);
        let (mut text, mut html) = (None, None);
        let content_type = find("Content-Type").unwrap_or_default();
        let parts = match boundary(&content_type) {
            Some(boundary) => split_parts(body, &boundary),
            None => vec![(
                content_type.clone(),
                find("Content-Transfer-Encoding"),
                body.to_owned(),
            )],
        };
        for (kind, encoding, content) in parts {
            let decoded = match encoding.as_deref() {
                Some(e) if e.eq_ignore_ascii_case("quoted-printable") => {
                    decode_quoted_printable(&content)
                }
                _ => content,
            };
            if kind.starts_with("text/html") {
                html = Some(decoded);
            } else if kind.starts_with("text/plain") {
                text = Some(decoded);
            }
        }
        // moto lists the destination and then the To header's addresses again: one each.
        let mut to: Vec<String> = Vec::new();
        for address in record.destinations {
            if !to.contains(&address) {
                to.push(address);
            }
        }
        if to.is_empty() {
            to.extend(find("To"));
        }
        Self {
            id: record.id,
            source: record.source,
            to,
            subject: find("Subject").map(|s| decode_words(&s)),
            headers,
            text,
            html,
        }
    }
}

fn split_head(raw: &str) -> (&str, &str) {
    raw.split_once("\r\n\r\n")
        .or_else(|| raw.split_once("\n\n"))
        .unwrap_or((raw, ""))
}

/// Headers, with continuation lines joined to the header they continue.
fn parse_headers(head: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = headers.last_mut() {
                value.push_str(line);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    headers
}

fn boundary(content_type: &str) -> Option<String> {
    let at = content_type.find("boundary=")? + "boundary=".len();
    let rest = &content_type[at..];
    Some(match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?.to_owned(),
        None => rest.split(';').next()?.trim().to_owned(),
    })
}

/// The first header of that name (case-insensitive).
fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// (Content-Type, Content-Transfer-Encoding, content) of each part.
fn split_parts(body: &str, boundary: &str) -> Vec<(String, Option<String>, String)> {
    let delimiter = format!("--{boundary}");
    body.split(delimiter.as_str())
        .skip(1)
        .filter(|part| !part.starts_with("--"))
        .map(|part| {
            let (head, content) = split_head(part.trim_start_matches(['\r', '\n']));
            let headers = parse_headers(head);
            let find = |name: &str| find_header(&headers, name).map(str::to_owned);
            let content = content.strip_suffix("\r\n").unwrap_or(content).to_owned();
            (
                find("Content-Type").unwrap_or_default(),
                find("Content-Transfer-Encoding"),
                content,
            )
        })
        .collect()
}

fn decode_quoted_printable(encoded: &str) -> String {
    let joined = encoded.replace("=\r\n", "").replace("=\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = joined
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).replace("\r\n", "\n")
}

/// RFC 2047 `=?UTF-8?B?...?=` words (what SendEmail writes for a non-ASCII subject).
fn decode_words(value: &str) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let words: Vec<&str> = value.split_whitespace().collect();
    let encoded = !words.is_empty()
        && words
            .iter()
            .all(|w| w.starts_with("=?UTF-8?B?") && w.ends_with("?="));
    if !encoded {
        return value.to_owned();
    }
    let bytes: Vec<u8> = words
        .iter()
        .filter_map(|w| engine.decode(&w[10..w.len() - 2]).ok())
        .flatten()
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
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
    // Only SES's models (infra/moto_server.py, fix 6): the whole state takes seconds to list.
    let url = format!(
        "http://{}/moto-api/data.json?service=ses",
        authority(endpoint)?
    );
    let response = crate::http::request(&url, "GET", &[], b"").await?;
    if response.status != 200 {
        bail!("emulator answered {}", response.status);
    }
    let data: serde_json::Value = serde_json::from_slice(&response.body)?;
    let records: Vec<RawRecord> = match data.get("ses").and_then(|s| s.get("RawMessage")) {
        Some(messages) => serde_json::from_value(messages.clone())?,
        None => Vec::new(),
    };
    Ok(records.into_iter().map(SentMessage::parse).collect())
}

/// The recorded messages sent to addresses in `domain`.
pub async fn sent_to_domain(endpoint: &str, domain: &str) -> Result<Vec<SentMessage>> {
    let suffix = format!("@{domain}");
    Ok(sent_messages(endpoint)
        .await?
        .into_iter()
        .filter(|m| m.to.iter().any(|to| to.ends_with(&suffix)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_send_email_writes() {
        let email = mailflow::ports::OutgoingEmail {
            to: "ada@example.com".into(),
            subject: "Vous avez 3 nouveaux abonnés".into(),
            html: "<p>Bonjour Ada = café</p>".into(),
            text: format!("Bonjour {}\nfin", "x".repeat(100)),
            key: mailflow::domain::ledger::SendKey::new(
                "u",
                mailflow::domain::campaign::CampaignId::parse("c").unwrap(),
            ),
            unsubscribe_url: Some("https://u.example/?token=abc.def".into()),
        };
        let raw = mailflow::adapters::ses::raw_message("news@example.com", &email).unwrap();
        let parsed = SentMessage::parse(RawRecord {
            id: "m1".into(),
            source: Some("news@example.com".into()),
            destinations: vec!["ada@example.com".into()],
            raw_data: raw,
        });
        assert_eq!(parsed.subject.as_deref(), Some(email.subject.as_str()));
        assert_eq!(parsed.html.as_deref(), Some(email.html.as_str()));
        assert_eq!(parsed.text.as_deref(), Some(email.text.as_str()));
        assert_eq!(
            parsed.header("list-unsubscribe"),
            Some("<https://u.example/?token=abc.def>")
        );
        assert_eq!(
            parsed.header("List-Unsubscribe-Post"),
            Some("List-Unsubscribe=One-Click")
        );
        assert_eq!(parsed.to, ["ada@example.com"]);
    }
}
