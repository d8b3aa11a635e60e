//! The SES emulator's record of sent messages (moto: `GET /moto-api/data.json`, `ses` ->
//! `RawMessage`), read with `crate::http`'s minimal client. SendEmail sends raw MIME; each
//! message is parsed back here by `mail-parser`, a maintained MIME parser written by other
//! hands than the encoder (`mailflow::domain::mime`), so tests see what a mailbox would get.

use anyhow::{bail, Context, Result};
use mail_parser::{MessageParser, PartType};
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
    /// The From header's display name (decoded) and address.
    pub from_name: Option<String>,
    pub from_address: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
}

impl SentMessage {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn parse(record: RawRecord) -> Self {
        let raw = record.raw_data.as_bytes();
        let message = MessageParser::default().parse(raw);
        let mut headers = Vec::new();
        let (mut subject, mut from_name, mut from_address) = (None, None, None);
        let (mut text, mut html) = (None, None);
        if let Some(message) = &message {
            for h in message.headers() {
                let value = raw
                    .get(h.offset_start as usize..h.offset_end as usize)
                    .map(|v| {
                        String::from_utf8_lossy(v)
                            .replace("\r\n", "")
                            .replace('\n', "")
                    })
                    .unwrap_or_default();
                headers.push((h.name().to_owned(), value.trim().to_owned()));
            }
            subject = message.subject().map(str::to_owned);
            if let Some(from) = message.from().and_then(|f| f.first()) {
                from_name = from.name.as_deref().map(str::to_owned);
                from_address = from.address.as_deref().map(str::to_owned);
            }
            for part in &message.parts {
                match &part.body {
                    PartType::Html(body) if html.is_none() => {
                        html = Some(body.replace("\r\n", "\n"));
                    }
                    PartType::Text(body) if text.is_none() => {
                        text = Some(body.replace("\r\n", "\n"));
                    }
                    _ => {}
                }
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
            let addresses = message.as_ref().and_then(|m| m.to());
            to.extend(
                addresses
                    .into_iter()
                    .flat_map(|a| a.iter())
                    .filter_map(|a| a.address.as_deref().map(str::to_owned)),
            );
        }
        Self {
            id: record.id,
            source: record.source,
            to,
            headers,
            subject,
            from_name,
            from_address,
            text,
            html,
        }
    }
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
        assert_eq!(parsed.from_address.as_deref(), Some("news@example.com"));
        assert_eq!(parsed.from_name, None);
    }

    fn email() -> mailflow::ports::OutgoingEmail {
        mailflow::ports::OutgoingEmail {
            to: "ada@example.com".into(),
            subject: "hi".into(),
            html: "<p>hi</p>".into(),
            text: "hi".into(),
            key: mailflow::domain::ledger::SendKey::new(
                "u",
                mailflow::domain::campaign::CampaignId::parse("c").unwrap(),
            ),
            unsubscribe_url: None,
        }
    }

    /// The From header SendEmail writes for a sender, as a mailbox reads it: the display
    /// name back whole, the address in ASCII, nothing 8-bit on the wire.
    #[test]
    fn the_from_header_reads_back_in_an_independent_parser() {
        let long = format!("{} Équipe", "日本語のニュース".repeat(12));
        let cases = [
            ("news@example.com", None, "news@example.com"),
            (
                "Équipe <news@example.com>",
                Some("Équipe"),
                "news@example.com",
            ),
            (
                "Mailflow News <news@example.com>",
                Some("Mailflow News"),
                "news@example.com",
            ),
            (
                "Acme, Inc. <n@example.com>",
                Some("Acme, Inc."),
                "n@example.com",
            ),
            (
                r#"Say "hi" \ bye <n@example.com>"#,
                Some(r#"Say "hi" \ bye"#),
                "n@example.com",
            ),
            (
                "\"Dr. Ünal\" <n@example.com>",
                Some("Dr. Ünal"),
                "n@example.com",
            ),
            (
                "Café <news@café.example>",
                Some("Café"),
                "news@xn--caf-dma.example",
            ),
            (
                "<b>Bold</b> <n@example.com>",
                Some("<b>Bold</b>"),
                "n@example.com",
            ),
        ];
        let long_sender = format!("{long} <n@example.com>");
        let cases =
            cases
                .into_iter()
                .chain([(long_sender.as_str(), Some(long.as_str()), "n@example.com")]);
        for (sender, name, address) in cases {
            let raw = mailflow::adapters::ses::raw_message(sender, &email()).unwrap();
            assert!(raw.is_ascii(), "{sender}: 8-bit on the wire");
            let head = raw.split("\r\n\r\n").next().unwrap();
            assert!(head.lines().all(|l| l.len() <= 78), "{sender}: {head}");
            let parsed = SentMessage::parse(RawRecord {
                id: "m".into(),
                source: None,
                destinations: vec![],
                raw_data: raw,
            });
            assert_eq!(parsed.from_name.as_deref(), name, "{sender}");
            assert_eq!(parsed.from_address.as_deref(), Some(address), "{sender}");
        }
    }

    #[test]
    fn a_message_that_is_not_mime_is_read_without_failing() {
        for raw in [
            "",
            "\r\n\r\n",
            "no headers at all",
            "From: <\r\n\r\n=?UTF-8?B?@@@?=",
        ] {
            let parsed = SentMessage::parse(RawRecord {
                id: "m".into(),
                source: None,
                destinations: vec![],
                raw_data: raw.into(),
            });
            assert_eq!(parsed.subject, None, "{raw:?}");
            assert!(parsed.html.is_none() && parsed.to.is_empty(), "{raw:?}");
        }
    }
}
