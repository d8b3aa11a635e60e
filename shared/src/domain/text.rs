//! Text from users' data as an email or a page may show it (names are data, never markup
//! or template source): shared by the digest, open-time content and the directories.

/// Text from the user's data as an email may show it: names are data, never template source,
/// and control characters are neither (a NUL makes the MJML unparseable), so whitespace ones
/// become spaces and every other one is dropped. So are U+FFFE and U+FFFF, which are not
/// characters to XML or mrml (a follower's name holding one made every digest listing them
/// unrenderable). Text without them comes back unchanged.
pub fn printable(raw: &str) -> String {
    raw.chars()
        .filter_map(|c| match c {
            '\u{FFFE}' | '\u{FFFF}' => None,
            c if !c.is_control() => Some(c),
            c if c.is_whitespace() => Some(' '),
            _ => None,
        })
        .collect()
}

/// A name to show, or None when nothing printable is left of it (then it is no name).
pub fn printable_name(raw: &str) -> Option<String> {
    let name = printable(raw);
    (!name.trim().is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_a_template() {
        assert_eq!(printable("Ada\0 Lovelace"), "Ada Lovelace");
        assert_eq!(printable("Ada\tLove\r\nlace\u{7}"), "Ada Love  lace");
        assert_eq!(
            printable("Zoë 李 👩‍💻 <b>&"),
            "Zoë 李 👩‍💻 <b>&",
            "printable text unchanged"
        );
        assert_eq!(printable_name("\0\u{1b}"), None);
        assert_eq!(printable_name(" \n "), None);
        assert_eq!(printable_name("\0Ada").as_deref(), Some("Ada"));
        assert_eq!(printable("Bob\u{FFFF}\u{FFFE} \u{FFFD}"), "Bob \u{FFFD}");
    }
}
