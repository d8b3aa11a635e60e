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
    #[error("the sender cannot be written as a From header: {0}")]
    Sender(String),
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
    encoded_words(subject)
}

/// The From header's value for a configured sender (`news@example.com`,
/// `Équipe <news@example.com>`, `"Acme, Inc." <news@example.com>`), in 7-bit ASCII as SES
/// takes raw mail: a display name of atoms as it is, one with specials (`,` `.` `"` ...) as a
/// quoted string, one with any other character as RFC 2047 encoded words; an
/// internationalised domain in its ASCII form (punycode). A local part that is not ASCII
/// is refused: it needs SMTPUTF8, which SES does not offer. SendEmail checks its sender with
/// this at cold start (`config::send_email`).
pub fn from_header(sender: &str) -> Result<String, String> {
    let sender = sender.trim();
    if sender.chars().any(char::is_control) {
        return Err("it contains a control character or a line break".into());
    }
    let (name, address) = match sender.strip_suffix('>').and_then(|s| s.rsplit_once('<')) {
        Some((name, address)) => (unquote(name.trim()), address.trim()),
        None if sender.contains(['<', '>']) => {
            return Err("write it as `Name <address>` or as the address alone".into());
        }
        None => (String::new(), sender),
    };
    let address = ascii_address(address)?;
    if name.is_empty() {
        return Ok(address);
    }
    let atoms = name.split(' ').all(|atom| {
        !atom.is_empty()
            && atom
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b))
    });
    // A name with `=?` anywhere is encoded, so no reader decodes a word of it as one.
    let name = if atoms && !name.contains("=?") {
        name
    } else if name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        encoded_words(&name)
    };
    // The address on a line of its own when the name's last line leaves no room for it
    // (78 characters a line, `From: ` included).
    let last = name.rsplit("\r\n ").next().unwrap_or(&name).len();
    let gap = if last + address.len() + 3 > 72 {
        "\r\n "
    } else {
        " "
    };
    Ok(format!("{name}{gap}<{address}>"))
}

/// A display name as written: a quoted string's content unescaped, else as it is.
fn unquote(name: &str) -> String {
    match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(quoted) => {
            let mut out = String::with_capacity(quoted.len());
            let mut chars = quoted.chars();
            while let Some(c) = chars.next() {
                out.push(if c == '\\' {
                    chars.next().unwrap_or(c)
                } else {
                    c
                });
            }
            out
        }
        None => name.to_owned(),
    }
}

/// The address with its domain in ASCII, or why SES could not send from it.
fn ascii_address(address: &str) -> Result<String, String> {
    let Some((local, domain)) = address.rsplit_once('@') else {
        return Err(format!("{address:?} is not an email address (no @)"));
    };
    if !local.is_ascii() {
        return Err("the address's local part is not ASCII: SES sends only from 7-bit ASCII addresses (no SMTPUTF8); use an ASCII address, the name may be in any script".into());
    }
    let domain = idna::domain_to_ascii(domain)
        .map_err(|_| format!("the address's domain {domain:?} is not a valid domain name"))?;
    let address = format!("{local}@{domain}");
    if !email_address::EmailAddress::is_valid(&address) {
        return Err(format!("{address:?} is not a valid email address"));
    }
    Ok(address)
}

/// RFC 2047 B-encoded UTF-8 words of at most 75 characters, folded onto continuation lines.
fn encoded_words(text: &str) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in text.chars() {
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

/// `=00=01...=FF`: a byte's escape is the three characters at three times its value.
const QP_ESCAPES: &str = {
    const BYTES: [u8; 768] = {
        let mut table = [0; 768];
        let mut b = 0;
        while b < 256 {
            table[b * 3] = b'=';
            table[b * 3 + 1] = HEX[b >> 4];
            table[b * 3 + 2] = HEX[b & 0x0f];
            b += 1;
        }
        table
    };
    match std::str::from_utf8(&BYTES) {
        Ok(table) => table,
        Err(_) => panic!("the escapes are ASCII"),
    }
};

/// The longest a line may be before its soft break `=` (RFC 2045: 76 with it).
const QP_WIDTH: usize = 75;

/// Quoted-printable (RFC 2045): lines end in CRLF, none longer than 76 characters.
pub fn quoted_printable(text: &str) -> String {
    let mut out = String::with_capacity(qp_capacity(text));
    write_quoted_printable(text, &mut out);
    out
}

/// Room for a part encoded: its markup's `=` become `=3D`, and a soft break every 75.
fn qp_capacity(text: &str) -> usize {
    text.len() + text.len() / 4 + 64
}

/// Writes `text` quoted-printable at the end of `out`: runs of bytes that stay as they are
/// are copied whole, not pushed one by one. Line ends (CRLF or LF) become CRLF.
fn write_quoted_printable(text: &str, out: &mut String) {
    let mut lines = text.split('\n').peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        // A CR before an LF is the line end's; any other CR is escaped.
        let line = match lines.peek() {
            Some(_) => line.strip_suffix('\r').unwrap_or(line),
            None => line,
        };
        if !first {
            out.push_str("\r\n");
        }
        first = false;
        write_qp_line(line, out);
    }
}

/// Whether a byte is written as it is: printable ASCII but `=`, and space and tab (escaped
/// only at the end of a line, where a mail system may drop them).
fn qp_literal(b: u8) -> bool {
    matches!(b, 33..=60 | 62..=126 | b' ' | b'\t')
}

fn write_qp_line(line: &str, out: &mut String) {
    let bytes = line.as_bytes();
    let mut width = 0;
    let mut at = 0;
    while at < bytes.len() {
        // The run of bytes written as they are (ASCII, so it starts and ends on characters).
        let mut end = at + bytes[at..].iter().take_while(|b| qp_literal(**b)).count();
        if end == bytes.len() && end > at && matches!(bytes[end - 1], b' ' | b'\t') {
            end -= 1;
        }
        while at < end {
            // Leave room for the soft break `=`.
            if width == QP_WIDTH {
                out.push_str("=\r\n");
                width = 0;
            }
            let take = (QP_WIDTH - width).min(end - at);
            out.push_str(&line[at..at + take]);
            width += take;
            at += take;
        }
        if let Some(&b) = bytes.get(at) {
            // By table, not `format!`: a non-ASCII text escapes most of its bytes.
            if width + 3 > QP_WIDTH {
                out.push_str("=\r\n");
                width = 0;
            }
            let b = usize::from(b) * 3;
            out.push_str(&QP_ESCAPES[b..b + 3]);
            width += 3;
            at += 1;
        }
    }
}

/// The whole message, headers and body, as SES v2 takes it in `Content.Raw.Data`.
pub fn build(message: &Message<'_>) -> Result<String, MimeError> {
    let mut out =
        String::with_capacity(qp_capacity(message.html) + qp_capacity(message.text) + 1024);
    out.push_str("From: ");
    out.push_str(&from_header(message.from).map_err(MimeError::Sender)?);
    out.push_str("\r\n");
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
        write_quoted_printable(body, &mut out);
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

    /// The encoder as it was (a byte at a time, after a copy with CRLF made LF): the new one
    /// must write exactly what it wrote.
    fn old_quoted_printable(text: &str) -> String {
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
                let literal =
                    matches!(b, 33..=60 | 62..=126) || (matches!(b, b' ' | b'\t') && !last);
                let token_len = if literal { 1 } else { 3 };
                if width + token_len > 75 {
                    out.push_str("=\r\n");
                    width = 0;
                }
                if literal {
                    out.push(b as char);
                } else {
                    out.push('=');
                    out.push(HEX[usize::from(b >> 4)] as char);
                    out.push(HEX[usize::from(b & 0x0f)] as char);
                }
                width += token_len;
            }
        }
        out
    }

    #[test]
    fn quoted_printable_writes_what_the_byte_at_a_time_encoder_wrote() {
        // Pieces whose joins land on every column: line ends of each kind, lone CRs, CR CR
        // LF, trailing spaces and tabs, `=`, non-ASCII, long words, markup.
        let mut pieces: Vec<String> = [
            "a",
            " ",
            "\t",
            "=",
            "\r\n",
            "\n",
            "\r",
            "\r\r\n",
            "\n\n",
            "é",
            "李",
            "👩‍💻",
            "\0",
            "~",
            "\u{7f}",
            "<td style=\"padding:0\">",
        ]
        .map(str::to_owned)
        .into();
        pieces.extend(["x".repeat(74), "y".repeat(75), "z".repeat(76)]);
        pieces.extend([" ".repeat(80), "=".repeat(30)]);
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut cases: Vec<String> = pieces.clone();
        cases.push(String::new());
        for a in &pieces {
            for b in &pieces {
                cases.push(format!("{a}{b}"));
                cases.push(format!("{}{a}{b}", "w".repeat(72)));
            }
        }
        for _ in 0..3000 {
            let len = (next() % 60) as usize;
            cases.push(
                (0..len)
                    .map(|_| pieces[(next() % pieces.len() as u64) as usize].as_str())
                    .collect(),
            );
        }
        for snapshot in
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots")).unwrap()
        {
            cases.push(std::fs::read_to_string(snapshot.unwrap().path()).unwrap());
        }
        for text in &cases {
            assert_eq!(
                quoted_printable(text),
                old_quoted_printable(text),
                "{text:?}"
            );
        }
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
    fn the_sender_is_written_in_ascii() {
        let from = |s: &str| from_header(s);
        assert_eq!(from("news@example.com").unwrap(), "news@example.com");
        assert_eq!(
            from(" Mailflow News <news@example.com> ").unwrap(),
            "Mailflow News <news@example.com>"
        );
        assert_eq!(from("<news@example.com>").unwrap(), "news@example.com");
        // Specials: a quoted string, with its quotes and backslashes escaped.
        assert_eq!(
            from("Acme, Inc. <n@example.com>").unwrap(),
            "\"Acme, Inc.\" <n@example.com>"
        );
        assert_eq!(
            from("\"Acme, Inc.\" <n@example.com>").unwrap(),
            "\"Acme, Inc.\" <n@example.com>"
        );
        assert_eq!(
            from(r#"Say "hi" \ bye <n@example.com>"#).unwrap(),
            r#""Say \"hi\" \\ bye" <n@example.com>"#
        );
        // What looks like an encoded word is quoted, never decoded by a reader.
        assert_eq!(
            from("=?UTF-8?B?QQ==?= <n@example.com>").unwrap(),
            "\"=?UTF-8?B?QQ==?=\" <n@example.com>"
        );
        // Non-ASCII: encoded words, nothing 8-bit.
        let encoded = from("Équipe <news@example.com>").unwrap();
        assert!(
            encoded.is_ascii() && encoded.starts_with("=?UTF-8?B?"),
            "{encoded}"
        );
        assert!(encoded.ends_with(" <news@example.com>"));
        let long = from(&format!("{} <news@example.com>", "日本".repeat(40))).unwrap();
        assert!(long.is_ascii());
        assert!(long.split("\r\n ").all(|l| l.len() <= 76), "{long}");
        // An internationalised domain in punycode.
        assert_eq!(
            from("Café <news@café.example>")
                .unwrap()
                .rsplit_once(' ')
                .unwrap()
                .1,
            "<news@xn--caf-dma.example>"
        );
    }

    #[test]
    fn a_sender_that_cannot_be_written_is_refused() {
        for bad in [
            "",
            "Name <>",
            "no-at-sign",
            "Name <news@example.com",
            "Name news@example.com>",
            "a\r\nBcc: x@example.com <news@example.com>",
            "Équipe <équipe@example.com>",
            "news@exa mple.com",
        ] {
            assert!(from_header(bad).is_err(), "{bad:?} accepted");
        }
        let raw = build(&Message {
            from: "x <\u{e9}@example.com>",
            to: "ada@example.com",
            subject: "hi",
            text: "",
            html: "",
            unsubscribe_url: None,
            headers: &[],
        });
        assert!(matches!(raw, Err(MimeError::Sender(_))), "{raw:?}");
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
