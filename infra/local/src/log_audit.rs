//! What must never be in a log line: email addresses, MongoDB connection strings with their
//! credentials (redacted ones, `user:***@`, are fine), AWS secret keys and unsubscribe tokens
//! (each is a credential for someone's subscription). `mailctl bench` checks every line the
//! function processes write; tests/cli.rs and tests/chaos.rs fail on any finding.

/// Why a line is sensitive, if it is.
pub fn finding(line: &str) -> Option<&'static str> {
    if contains_email_address(line) {
        return Some("email address");
    }
    if contains_credentialed_uri(line) {
        return Some("MongoDB connection string with credentials");
    }
    let lower = line.to_ascii_lowercase();
    if lower.contains("aws_secret_access_key") || lower.contains("secretaccesskey") {
        return Some("AWS secret key");
    }
    if contains_unsubscribe_token(line) {
        return Some("unsubscribe token");
    }
    None
}

/// `token=<payload>.<signature>` as in an unsubscribe link.
fn contains_unsubscribe_token(line: &str) -> bool {
    line.match_indices("token=").any(|(at, m)| {
        let value: String = line[at + m.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_.%".contains(*c))
            .collect();
        value.len() >= 20 && value.contains('.')
    })
}

/// `mongodb://user:password@host` with the password not redacted.
fn contains_credentialed_uri(line: &str) -> bool {
    line.match_indices("mongodb").any(|(at, _)| {
        let rest = &line[at..];
        let Some((_, after)) = rest.split_once("://") else {
            return false;
        };
        let authority = after
            .split(|c: char| c == '/' || c == '"' || c == '?' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        match authority.rsplit_once('@') {
            Some((userinfo, _)) => !userinfo.ends_with(":***"),
            None => false,
        }
    })
}

/// `local@domain.tld` anywhere in the line (JSON escapes and all).
fn contains_email_address(line: &str) -> bool {
    let bytes = line.as_bytes();
    let local = |b: &u8| b.is_ascii_alphanumeric() || b"._%+-".contains(b);
    let domain = |b: &u8| b.is_ascii_alphanumeric() || b".-".contains(b);
    bytes.iter().enumerate().any(|(at, b)| {
        if *b != b'@' || at == 0 || !local(&bytes[at - 1]) {
            return false;
        }
        let host: Vec<u8> = bytes[at + 1..].iter().copied().take_while(domain).collect();
        let host = String::from_utf8_lossy(&host);
        let host = host.trim_end_matches('.');
        match host.rsplit_once('.') {
            Some((name, tld)) => {
                !name.is_empty() && tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic())
            }
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::finding;

    #[test]
    fn finds_what_must_not_be_logged() {
        for (line, kind) in [
            (
                r#"{"message":"sent","to":"ana.lee+w47@example.com"}"#,
                "email address",
            ),
            ("rejected user@mail.example.org.", "email address"),
            (
                "cannot connect to mongodb+srv://app:pw@cluster0.x.net/",
                "email address",
            ),
            (
                r#"{"uri":"mongodb://app:pw@10.0.0.7:27017/db"}"#,
                "MongoDB connection string with credentials",
            ),
            ("AWS_SECRET_ACCESS_KEY=abc", "AWS secret key"),
            (
                "GET /?token=djEKd2Vla2x5LWRpZ2VzdAp3ZWVrbHk.c2lnbmF0dXJlc2lnbmF0dXJl HTTP/1.1",
                "unsubscribe token",
            ),
        ] {
            assert_eq!(finding(line), Some(kind), "{line}");
        }
        for line in [
            r#"{"level":"INFO","message":"SendEmail batch done","sent":10}"#,
            r#"{"message":"claim lost","userId":"u-000123","campaignId":"weekly-2026-W47"}"#,
            "version@2 of the schema",
            "a @ b",
            "user@localhost",
            "uri=mongodb://127.0.0.1:27017/?directConnection=true",
            "cannot connect to mongodb+srv://app:***@cluster0.x.net/",
            r#"{"message":"unsubscribe refused","reason":"the token's signature does not match"}"#,
        ] {
            assert_eq!(finding(line), None, "{line}");
        }
    }
}
