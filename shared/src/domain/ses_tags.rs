//! SES message tags that carry `campaignId` and `userId` with every email, so that SES events
//! (send, delivery, bounce, complaint, open, click) find their ledger record.
//!
//! SES allows only `[A-Za-z0-9_-]` in tag values (256 characters at most), and user ids may
//! hold anything else, so values are encoded reversibly: `_` becomes `__`, and every other
//! byte outside that set becomes `_` and two lowercase hex digits (`a.b` -> `a_2eb`).

pub const CAMPAIGN_TAG: &str = "campaignId";
pub const USER_TAG: &str = "userId";
/// SES's limit on a tag value.
pub const MAX_TAG_VALUE: usize = 256;

/// The tag value for `raw`, or None when its encoding exceeds SES's 256 characters (a
/// campaign id never does; a user id is carried by `user_tags`, which has no such limit).
pub fn encode(raw: &str) -> Option<String> {
    let out = encode_unbounded(raw);
    (out.len() <= MAX_TAG_VALUE).then_some(out)
}

/// The tags that carry `user_id`, whatever its length: its encoding cut into values of at
/// most 256 characters, named `userId`, `userId2`, `userId3`... in order (a 512-byte id needs
/// at most six), so that every email's events find its record.
pub fn user_tags(user_id: &str) -> Vec<(String, String)> {
    let encoded = encode_unbounded(user_id);
    // The encoding is ASCII: any byte offset is a character boundary.
    (0..encoded.len().max(1))
        .step_by(MAX_TAG_VALUE)
        .enumerate()
        .map(|(n, start)| {
            let end = (start + MAX_TAG_VALUE).min(encoded.len());
            (user_tag_name(n), encoded[start..end].to_owned())
        })
        .collect()
}

/// The name of the `n`th (from 0) tag that carries a user id.
pub fn user_tag_name(n: usize) -> String {
    match n {
        0 => USER_TAG.to_owned(),
        n => format!("{USER_TAG}{}", n + 1),
    }
}

fn encode_unbounded(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        match byte {
            b'_' => out.push_str("__"),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(byte as char),
            other => out.push_str(&format!("_{other:02x}")),
        }
    }
    out
}

/// The value `encode` made this tag from, or None if it is not such an encoding.
pub fn decode(tag: &str) -> Option<String> {
    let bytes = tag.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' if bytes.get(i + 1) == Some(&b'_') => {
                out.push(b'_');
                i += 2;
            }
            b'_' => {
                let hex = tag.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b @ (b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_stays_in_the_allowed_alphabet() {
        for raw in [
            "u0000003",
            "weekly-2026-W47",
            "spring.promo_2026",
            "user@example.com",
            "ünï cødé/_",
            "__",
        ] {
            let tag = encode(raw).unwrap();
            assert!(
                tag.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{tag}"
            );
            assert_eq!(decode(&tag).as_deref(), Some(raw), "{tag}");
        }
        assert_eq!(encode("a.b").as_deref(), Some("a_2eb"));
        assert_eq!(encode("u_1").as_deref(), Some("u__1"));
    }

    #[test]
    fn a_user_id_of_any_length_travels_in_tags_of_at_most_256_characters() {
        assert_eq!(user_tags("u1"), [("userId".to_owned(), "u1".to_owned())]);
        // 512 bytes, each encoded as three characters: six tags.
        let id = ".".repeat(512);
        let tags = user_tags(&id);
        assert_eq!(tags.len(), 6);
        assert!(tags.iter().all(|(_, v)| v.len() <= MAX_TAG_VALUE));
        let names: Vec<&str> = tags.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["userId", "userId2", "userId3", "userId4", "userId5", "userId6"]
        );
        let joined: String = tags.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(decode(&joined).as_deref(), Some(id.as_str()));
    }

    #[test]
    fn rejects_what_encode_never_makes() {
        for bad in ["a_", "a_2", "a_zz", "a_2E", "a.b", "a b", "_ff"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
        assert!(encode(&"é".repeat(50)).is_none(), "too long once encoded");
    }
}
