//! The one recipient of an email, parsed and checked before SES sees it.
//!
//! A user's `email` field is whatever the product stored: a bare address, `Name <address>`,
//! or something else entirely (`a@x.com, b@y.com`, a group, an address with a non-ASCII
//! domain or local part). SES takes the recipients from the `To` header when it is given no
//! destination, and accepts things its local emulator refuses and the other way round, so
//! nothing here relies on either: exactly one mailbox is accepted (RFC 5322, parsed by the
//! `email_address` crate), its domain is encoded as SES requires (IDNA to punycode, by the
//! `idna` crate), and the address goes to SES as both the `To` header and the destination.
//!
//! Reasons never contain the address (they are logged and stored in the send record).

use std::str::FromStr;

/// The ASCII addr-spec an email goes to (`local@domain`, the domain in punycode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipient(String);

impl Recipient {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why an address cannot be sent to. Each is permanent: the send is recorded FAILED.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("address holds {0} addresses; exactly one recipient is allowed")]
    SeveralAddresses(usize),
    #[error("address is not one RFC 5322 mailbox ({0})")]
    NotAMailbox(String),
    #[error("address has a display name that holds another address")]
    AddressInDisplayName,
    #[error(
        "address has a non-ASCII local part, which SES cannot send (it does not support SMTPUTF8)"
    )]
    NonAsciiLocalPart,
    #[error("address names an IP address instead of a domain")]
    DomainLiteral,
    #[error("address domain is not a valid domain name, internationalised or not")]
    InvalidDomain,
    #[error("address domain has a single label: no public mail server can be found for it")]
    SingleLabelDomain,
    #[error("address is longer than the 254 characters SMTP allows")]
    TooLong,
}

/// The longest forward path SMTP allows (RFC 5321: 256 with the angle brackets).
const MAX_ADDRESS: usize = 254;

/// `raw` without its RFC 5322 comments (`(home)a@example.com`, `a@example.com (work)`),
/// which name no part of the mailbox, and without the angle brackets of an angle-addr with
/// no display name (`<a@example.com>`), which address books export. A quoted string keeps
/// its parentheses; text whose quotes or comments do not close comes back as it was, for the
/// parser to refuse.
fn without_comments(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.contains(['(', '<']) {
        return raw.into();
    }
    let mut out = String::with_capacity(raw.len());
    let (mut quoted, mut depth, mut escaped) = (false, 0usize, false);
    for c in raw.chars() {
        if escaped {
            escaped = false;
            if depth == 0 {
                out.push(c);
            }
            continue;
        }
        match c {
            '\\' if quoted || depth > 0 => {
                escaped = true;
                if depth == 0 {
                    out.push(c);
                }
            }
            '"' if depth == 0 => {
                quoted = !quoted;
                out.push(c);
            }
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    if quoted || depth > 0 || escaped {
        return raw.into();
    }
    let bare = out.trim();
    match bare.strip_prefix('<').and_then(|b| b.strip_suffix('>')) {
        Some(inner) if !inner.contains(['<', '>']) => inner.trim().to_owned().into(),
        _ => bare.to_owned().into(),
    }
}

/// The one mailbox `raw` names, ready for SES, or why there is none.
pub fn parse(raw: &str) -> Result<Recipient, AddressError> {
    let raw = without_comments(raw.trim());
    let raw = raw.as_ref();
    let parsed = email_address::EmailAddress::from_str(raw).map_err(|e| {
        // A list or a group is the likeliest cause of a parse failure with several '@':
        // say so, rather than the parser's first complaint.
        match raw.matches('@').count() {
            n if n > 1 && raw.contains([',', ';']) => AddressError::SeveralAddresses(n),
            _ => AddressError::NotAMailbox(e.to_string().trim_end_matches('.').to_lowercase()),
        }
    })?;
    if parsed.display_part().contains('@') {
        return Err(AddressError::AddressInDisplayName);
    }
    let local = parsed.local_part();
    if !local.is_ascii() {
        return Err(AddressError::NonAsciiLocalPart);
    }
    let domain = parsed.domain();
    if domain.starts_with('[') {
        return Err(AddressError::DomainLiteral);
    }
    let domain = idna::domain_to_ascii_strict(domain).map_err(|_| AddressError::InvalidDomain)?;
    if !domain.contains('.') {
        return Err(AddressError::SingleLabelDomain);
    }
    let address = format!("{local}@{domain}");
    if address.len() > MAX_ADDRESS {
        return Err(AddressError::TooLong);
    }
    Ok(Recipient(address))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        parse(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}")).0
    }

    #[test]
    fn one_mailbox_in_any_rfc_5322_shape_is_accepted() {
        assert_eq!(ok("someone@example.com"), "someone@example.com");
        assert_eq!(ok("  padded@example.com "), "padded@example.com");
        assert_eq!(ok("Ada Lovelace <ada@example.com>"), "ada@example.com");
        assert_eq!(ok("user+tag@example.com"), "user+tag@example.com");
        // RFC 5322 / RFC 3696 examples of unusual but valid local parts.
        assert_eq!(ok("\"john..doe\"@example.com"), "\"john..doe\"@example.com");
        assert_eq!(ok("\" \"@example.org"), "\" \"@example.org");
        assert_eq!(ok("o'brien@example.ie"), "o'brien@example.ie");
        assert_eq!(ok("x@xn--bcher-kva.example"), "x@xn--bcher-kva.example");
    }

    #[test]
    fn comments_and_a_bare_angle_addr_name_the_one_mailbox_inside() {
        assert_eq!(ok("<angle@example.com>"), "angle@example.com");
        assert_eq!(ok(" < angle@example.com > "), "angle@example.com");
        assert_eq!(ok("(home)a@example.com"), "a@example.com");
        assert_eq!(ok("a@example.com (work)"), "a@example.com");
        assert_eq!(ok("a(x)@example.com"), "a@example.com");
        assert_eq!(
            ok("Ada (work, \\(main\\)) <ada@example.com>"),
            "ada@example.com"
        );
        assert_eq!(
            ok("(nested (comment)) <ada@example.com>"),
            "ada@example.com"
        );
        // Parentheses inside a quoted string are not a comment.
        assert_eq!(ok("\"a(b)c\"@example.com"), "\"a(b)c\"@example.com");
        // A comment that names another address is no display name: the mailbox is the one.
        assert_eq!(ok("(ada@evil.com) <ada@example.com>"), "ada@example.com");
    }

    #[test]
    fn international_domains_are_encoded_as_ses_requires() {
        assert_eq!(ok("name@bücher.example"), "name@xn--bcher-kva.example");
        assert_eq!(ok("ada@例え.テスト"), "ada@xn--r8jz45g.xn--zckzah");
        assert_eq!(ok("ada@EXAMPLE.com"), "ada@example.com");
    }

    #[test]
    fn anything_but_exactly_one_sendable_mailbox_is_refused() {
        use AddressError::*;
        let cases: [(&str, AddressError); 14] = [
            (
                "someone@example.com, other@example.com",
                SeveralAddresses(2),
            ),
            ("Mary <mary@x.test>, jdoe@example.org", SeveralAddresses(2)),
            ("friends: a@x.com, b@y.com;", SeveralAddresses(2)),
            ("\"ada@evil.com\" <ada@example.com>", AddressInDisplayName),
            ("ada@evil.com <ada@example.com>", AddressInDisplayName),
            ("josé@example.com", NonAsciiLocalPart),
            ("user@[192.168.2.1]", DomainLiteral),
            ("user@[IPv6:2001:db8::1]", DomainLiteral),
            ("i_like@but_not_here.example.com", InvalidDomain),
            ("admin@mailserver1", SingleLabelDomain),
            (
                "Abc.example.com",
                NotAMailbox("missing separator character '@'".into()),
            ),
            ("A@b@c@example.com", NotAMailbox("invalid character".into())),
            ("ada@exa mple.com", NotAMailbox("invalid character".into())),
            (
                "undisclosed-recipients:;",
                NotAMailbox("missing separator character '@'".into()),
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(parse(raw), Err(expected), "{raw:?}");
        }
        for raw in [
            "just\"not\"right@example.com",
            "this is\"not\\allowed@example.com",
            "a\"b(c)d,e:f;g<h>i[j\\k]l@example.com",
            "1234567890123456789012345678901234567890123456789012345678901234+x@example.com",
            "ada@example.com.",
            "<ada@example.com",
            "(unclosed a@example.com",
            "<a@example.com> <b@example.com>",
            "",
        ] {
            assert!(parse(raw).is_err(), "{raw:?} accepted");
        }
    }

    #[test]
    fn reasons_never_repeat_the_address() {
        for raw in ["secret.person@bücher.example, b@c.d", "séçret@example.com"] {
            let reason = parse(raw).unwrap_err().to_string();
            assert!(
                !reason.contains("secret") && !reason.contains("séçret"),
                "{reason}"
            );
        }
    }
}
