//! The raw MIME message SendEmail hands to SES v2 (`Content.Raw`): the one way to set the
//! List-Unsubscribe headers and keep them visible in the local emulator's record.
//! `multipart/alternative` with a text and an HTML part, both quoted-printable, CRLF line
//! ends, a subject encoded per RFC 2047 when it is not plain ASCII.

use base64::Engine;

/// One email, ready to be written as MIME.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub subject: &'a str,
    pub text: &'a str,
    pub html: &'a str,
    /// The one-click unsubscribe URL, written as the RFC 8058 headers (`unsubscribe_headers`).
    pub unsubscribe_url: Option<&'a str>,
    /// Extra headers (name, value), written in this order after the standard ones.
    pub headers: &'a [(&'a str, &'a str)],
}

/// RFC 8058 one-click unsubscribe: the https URL, and the header that says a POST to it
/// unsubscribes without any further step.
pub fn unsubscribe_headers(url: &str) -> [(&'static str, String); 2] {
    [
        ("List-Unsubscribe", format!("<{url}>")),
        (
            "List-Unsubscribe-Post",
            "List-Unsubscribe=One-Click".to_owned(),
        ),
    ]
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MimeError {
    #[error("header {0} contains a line break")]
    LineBreak(String),
    #[error("header {0} is longer than the 998 characters a mail line may hold")]
    TooLong(String),
}

/// A quoted-printable part can never contain `=_` (an `=` is always followed by two hex
/// digits or a line break), so this boundary cannot occur inside either part.
const BOUNDARY: &str = "=_mailflow_alternative";
const MAX_LINE: usize = 998;

fn header(out: &mut String, name: &str, value: &str) -> Result<(), MimeError> {
    if value.contains(['\r', '\n']) || name.contains(['\r', '\n', ':']) {
        return Err(MimeError::LineBreak(name.to_owned()));
    }
    if name.len() + 2 + value.len() > MAX_LINE {
        return Err(MimeError::TooLong(name.to_owned()));
    }
    out.push_str(name);
    out.push_str(": ");
    out.push_str(value);
    out.push_str("\r\n");
    Ok(())
}

/// Printable ASCII stays as it is; anything else becomes RFC 2047 encoded words of at most
/// 75 characters, folded onto continuation lines.
fn encode_subject(subject: &str) -> String {
    if subject.bytes().all(|b| (0x20..0x7f).contains(&b)) && subject.len() <= 900 {
        return subject.to_owned();
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in subject.chars() {
        // 45 bytes are 60 base64 characters: 12 more for `=?UTF-8?B?` and `?=` make 72.
        if chunk.len() + c.len_utf8() > 45 {
            words.push(format!("=?UTF-8?B?{}?=", engine.encode(&chunk)));
            chunk.clear();
        }
        chunk.push(c);
    }
    if !chunk.is_empty() {
        words.push(format!("=?UTF-8?B?{}?=", engine.encode(&chunk)));
    }
    words.join("\r\n ")
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Quoted-printable (RFC 2045): lines end in CRLF, none longer than 76 characters.
pub fn quoted_printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let normalised = text.replace("\r\n", "\n");
    for (i, line) in normalised.split('\n').enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        let mut width = 0;
        let bytes = line.as_bytes();
        for (j, &b) in bytes.iter().enumerate() {
            let last = j + 1 == bytes.len();
            let literal = matches!(b, 33..=60 | 62..=126) || (matches!(b, b' ' | b'\t') && !last);
            let token_len = if literal { 1 } else { 3 };
            // Leave room for the soft break `=` (and, mid-line, for the next character).
            if width + token_len > 75 {
                out.push_str("=\r\n");
                width = 0;
            }
            if literal {
                out.push(b as char);
            } else {
                // By table, not `format!`: a non-ASCII text escapes most of its bytes.
                out.push('=');
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 0x0f)] as char);
            }
            width += token_len;
        }
    }
    out
}

/// The whole message, headers and body, as SES v2 takes it in `Content.Raw.Data`.
pub fn build(message: &Message<'_>) -> Result<String, MimeError> {
    let mut out = String::with_capacity(message.html.len() + message.text.len() + 1024);
    header(&mut out, "From", message.from)?;
    header(&mut out, "To", message.to)?;
    if message.subject.contains(['\r', '\n']) {
        return Err(MimeError::LineBreak("Subject".into()));
    }
    out.push_str("Subject: ");
    out.push_str(&encode_subject(message.subject));
    out.push_str("\r\n");
    header(&mut out, "MIME-Version", "1.0")?;
    for (name, value) in message
        .unsubscribe_url
        .map(unsubscribe_headers)
        .iter()
        .flatten()
    {
        header(&mut out, name, value)?;
    }
    for (name, value) in message.headers {
        header(&mut out, name, value)?;
    }
    header(
        &mut out,
        "Content-Type",
        &format!("multipart/alternative; boundary=\"{BOUNDARY}\""),
    )?;
    out.push_str("\r\n");
    for (kind, body) in [("plain", message.text), ("html", message.html)] {
        out.push_str(&format!("--{BOUNDARY}\r\n"));
        out.push_str(&format!("Content-Type: text/{kind}; charset=UTF-8\r\n"));
        out.push_str("Content-Transfer-Encoding: quoted-printable\r\n\r\n");
        out.push_str(&quoted_printable(body));
        out.push_str("\r\n");
    }
    out.push_str(&format!("--{BOUNDARY}--\r\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_qp(encoded: &str) -> String {
        let joined = encoded.replace("=\r\n", "");
        let mut out = Vec::new();
        let bytes = joined.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'=' {
                out.push(u8::from_str_radix(&joined[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap().replace("\r\n", "\n")
    }

    #[test]
    fn quoted_printable_round_trips_with_short_lines() {
        let text = format!(
            "Grüße, = sign, trailing space \nline {}\n\ttab\nlast",
            "long ".repeat(40)
        );
        let encoded = quoted_printable(&text);
        assert!(encoded.lines().all(|l| l.len() <= 76), "{encoded}");
        assert!(!encoded.contains("=_"));
        assert!(encoded.contains("space=20\r\n"), "trailing space encoded");
        assert_eq!(decode_qp(&encoded), text);
    }

    #[test]
    fn builds_headers_and_both_parts() {
        let raw = build(&Message {
            from: "Digest <digest@example.com>",
            to: "ada@example.com",
            subject: "Vous avez 3 nouveaux abonnés",
            text: "Bonjour",
            html: "<p>Bonjour</p>",
            unsubscribe_url: Some("https://u.example/?token=abc"),
            headers: &[],
        })
        .unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("\r\nList-Unsubscribe: <https://u.example/?token=abc>\r\n"));
        assert!(head.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"));
        assert!(head.contains("Subject: =?UTF-8?B?"));
        assert!(body.contains("Content-Type: text/plain; charset=UTF-8"));
        assert!(body.contains("=3Cp=3EBonjour=3C/p=3E") || body.contains("<p>Bonjour</p>"));
        assert!(raw.ends_with("--=_mailflow_alternative--\r\n"));
        assert!(raw.lines().all(|l| l.len() <= 998));
    }

    #[test]
    fn refuses_header_injection() {
        let message = Message {
            from: "a@example.com",
            to: "ada@example.com\r\nBcc: all@example.com",
            subject: "hi",
            text: "",
            html: "",
            unsubscribe_url: None,
            headers: &[],
        };
        assert_eq!(build(&message), Err(MimeError::LineBreak("To".into())));
        let subject = Message {
            to: "ada@example.com",
            subject: "hi\nBcc: x",
            ..message
        };
        assert!(build(&subject).is_err());
    }

    #[test]
    fn long_subjects_are_folded_into_short_encoded_words() {
        let subject = "é".repeat(100);
        let encoded = encode_subject(&subject);
        assert!(encoded.split("\r\n ").all(|w| w.len() <= 75));
        let engine = base64::engine::general_purpose::STANDARD;
        let decoded: String = encoded
            .split("\r\n ")
            .map(|w| {
                let b64 = w.trim_start_matches("=?UTF-8?B?").trim_end_matches("?=");
                String::from_utf8(engine.decode(b64).unwrap()).unwrap()
            })
            .collect();
        assert_eq!(decoded, subject);
    }
}
