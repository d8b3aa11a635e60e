//! The shape cache's parts: the sentinels that stand for a user's values in the MJML, the
//! HTML mrml made of it split at them (`Shape`), and each value put back as MiniJinja and
//! mrml would have written it, in text or in an attribute. `definition::render::shapes`
//! says when a shape is used and holds it to mrml's own output.

use std::borrow::Cow;

/// Marks a sentinel's start and end: characters of Unicode's private use area, which no
/// template and no built-in topic's label contains (a shape whose HTML has one the renderer
/// did not place is made directly, `Shape::new`).
pub(crate) const OPEN: char = '\u{E000}';
pub(crate) const CLOSE: char = '\u{E001}';
const OPEN_IN_TEXT: &str = "\u{E000}";
const CLOSE_IN_TEXT: &str = "\u{E001}";

/// A sentinel as mrml writes it in an attribute's value: it writes every attribute with
/// Rust's `{:?}`, which escapes the private use area (and quotes, backslashes, control and
/// combining characters) as `\u{...}`. Text it copies as it is.
pub(crate) const OPEN_IN_ATTRIBUTE: &str = "\\u{e000}";
pub(crate) const CLOSE_IN_ATTRIBUTE: &str = "\\u{e001}";

/// The HTML of one shape: literal pieces, and between them the index of a value.
#[derive(Debug)]
pub(crate) struct Shape {
    pieces: Vec<Piece>,
}

#[derive(Debug)]
enum Piece {
    Literal(String),
    /// A value in text, as MiniJinja printed it.
    Text(usize),
    /// A value in an attribute, escaped as mrml escapes attributes (`attribute_value`).
    Attribute(usize),
}

/// A value as mrml writes it inside an attribute's quotes (`{:?}` escapes each character
/// alone, so a value's part of an attribute is escaped the same whatever surrounds it).
fn attribute_value(value: &str) -> Cow<'_, str> {
    if value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return Cow::Borrowed(value);
    }
    let quoted = format!("{value:?}");
    Cow::Owned(quoted[1..quoted.len() - 1].to_owned())
}

impl Shape {
    /// Splits mrml's HTML at the sentinels, in text or in attributes; None if it holds a
    /// sentinel's character (or its escape) that is not one of the `holes` placed: then the
    /// shape is not cached, and its emails are made directly.
    pub(crate) fn new(html: &str, holes: usize) -> Option<Self> {
        let mut pieces = Vec::new();
        let mut rest = html;
        loop {
            let raw = rest.find([OPEN, CLOSE]);
            let escaped = [OPEN_IN_ATTRIBUTE, CLOSE_IN_ATTRIBUTE]
                .iter()
                .filter_map(|mark| rest.find(mark))
                .min();
            let (start, in_attribute) = match (raw, escaped) {
                (None, None) => break,
                (Some(r), Some(e)) => (r.min(e), e < r),
                (None, Some(e)) => (e, true),
                (Some(r), None) => (r, false),
            };
            let (open, close) = match in_attribute {
                true => (OPEN_IN_ATTRIBUTE, CLOSE_IN_ATTRIBUTE),
                false => (OPEN_IN_TEXT, CLOSE_IN_TEXT),
            };
            let (literal, tail) = rest.split_at(start);
            let tail = tail.strip_prefix(open)?;
            let end = tail.find(close)?;
            let digits = &tail[..end];
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let index: usize = digits.parse().ok().filter(|i| *i < holes)?;
            if !literal.is_empty() {
                pieces.push(Piece::Literal(literal.to_owned()));
            }
            pieces.push(match in_attribute {
                true => Piece::Attribute(index),
                false => Piece::Text(index),
            });
            rest = &tail[end + close.len()..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Literal(rest.to_owned()));
        }
        Some(Self { pieces })
    }

    /// The HTML with this email's values in their places, in one pass: a value is written
    /// once and never read again, so sentinel characters in a user's name stay text. None if
    /// a value is missing (never, for an email of the shape's key).
    pub(crate) fn fill(&self, values: &[impl AsRef<str>]) -> Option<String> {
        let parts = self
            .pieces
            .iter()
            .map(|piece| {
                Some(match piece {
                    Piece::Literal(text) => Cow::Borrowed(text.as_str()),
                    Piece::Text(i) => Cow::Borrowed(values.get(*i)?.as_ref()),
                    Piece::Attribute(i) => attribute_value(values.get(*i)?.as_ref()),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(parts.concat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_with_a_sentinel_it_did_not_place_is_not_cached() {
        assert!(Shape::new("a\u{E000}0\u{E001}b", 1).is_some());
        assert!(Shape::new("a\u{E000}1\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}b", 1).is_none());
        assert!(Shape::new("a\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}+0\u{E001}b", 1).is_none());
        assert!(Shape::new("a\u{E000}\u{E001}b", 1).is_none());
        assert!(Shape::new("a\\u{e000}0\\u{e001}b", 1).is_some());
        assert!(Shape::new("a\\u{e000}0\u{E001}b", 1).is_none());
        assert!(Shape::new("a\\u{e001}b", 1).is_none());
        assert!(Shape::new("a\\u{e000}3\\u{e001}b", 1).is_none());
        let shape = Shape::new(
            "<p>\u{E000}0\u{E001} and \u{E000}1\u{E001}\u{E000}0\u{E001}</p><a href=\"\\u{e000}1\\u{e001}\">",
            2,
        )
        .unwrap();
        // Values are written once, never scanned for sentinels again.
        let values = ["\u{E000}1\u{E001}".to_owned(), "&lt;\\é\u{E000}".to_owned()];
        assert_eq!(
            shape.fill(&values).unwrap(),
            "<p>\u{E000}1\u{E001} and &lt;\\é\u{E000}\u{E000}1\u{E001}</p><a href=\"&lt;\\\\é\\u{e000}\">"
        );
        assert_eq!(shape.fill(&values[..1]), None);
    }
}
