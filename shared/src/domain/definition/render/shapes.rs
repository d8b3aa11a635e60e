//! mrml once per shape of a definition's email, not once per email (it is most of a
//! definition's render: about 50 µs an email, docs/benchmarks.md).
//!
//! The digest's renderer puts sentinels into the template's context (`digest::shape`); a
//! definition's templates compute with their values (`count - names|length`, `== 1`), so
//! here MiniJinja renders with the real values and the sentinels go into the MJML it wrote:
//! each run of text between tags (its whitespace at either end kept, which mrml trims in
//! places), and the values of the attributes mrml copies as they are (`COPIED_ATTRIBUTES`:
//! the links, images and their alt text). What is left, the tags and every other attribute,
//! is the shape's key: mrml renders it once, and each email of the same shape gets that HTML
//! with its own text put back (`Shape::fill`).
//!
//! mrml copies text as it is and writes attributes escaped character by character, so an
//! email made from its shape is byte for byte mrml's own. That is checked, not assumed: the
//! first email of every shape is also rendered by mrml alone and the shape is kept only if
//! the two agree (else that key is always rendered directly). The head's other text (styles,
//! attributes) stays in the key. A definition whose emails are each a shape of their own (a
//! user's value in a style attribute) stops using the cache after `MAX_SHAPES` misses, and
//! costs one more mrml render for each of those first emails.

use crate::domain::digest::mjml_to_html;
use crate::domain::digest::shape::{Shape, CLOSE, OPEN};
use crate::domain::digest::RenderError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Attributes whose values mrml writes as they are (escaped as every attribute is): a
/// user's link, image and its text; every other attribute may shape the layout.
const COPIED_ATTRIBUTES: [&str; 4] = ["href", "src", "alt", "title"];

/// Shapes made at most, and the bytes they may hold (key and HTML): a campaign has tens
/// (which languages, how many rows a loop prints, which branches are taken). Past either,
/// each new shape's emails are rendered by mrml alone.
const MAX_SHAPES: usize = 512;
const MAX_BYTES: usize = 16 << 20;

/// A character XML does not allow (mrml's parser refuses the document): such an email is
/// rendered directly, so that it fails as mrml fails it, not from a shape made without it.
fn not_xml(c: char) -> bool {
    (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{FFFE}' || c == '\u{FFFF}'
}

/// The HTML of each shape met so far (None: a shape whose HTML is not mrml's own, rendered
/// directly).
#[derive(Default)]
pub(super) struct Shapes {
    shapes: Mutex<HashMap<String, Option<Arc<Shape>>>>,
    made: AtomicUsize,
    bytes: AtomicUsize,
}

impl Shapes {
    /// The responsive HTML of `mjml` (written by `template`), as `mjml_to_html` makes it.
    pub(super) fn html(
        &self,
        options: &mrml::prelude::render::RenderOptions,
        template: &str,
        mjml: &str,
    ) -> Result<String, RenderError> {
        let direct = || mjml_to_html(options, template, mjml);
        if mjml.contains(|c| c == OPEN || c == CLOSE || not_xml(c)) {
            return direct();
        }
        let Some((key, holes)) = skeleton(mjml) else {
            return direct();
        };
        let cached = self
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        match cached {
            Some(Some(shape)) => match shape.fill(&holes) {
                Some(html) => Ok(html),
                None => direct(),
            },
            Some(None) => direct(),
            None if self.made.load(Ordering::Relaxed) >= MAX_SHAPES
                || self.bytes.load(Ordering::Relaxed) >= MAX_BYTES =>
            {
                direct()
            }
            None => {
                let html = direct()?;
                // The key's HTML, kept only if it gives this email's byte for byte.
                let shape = mjml_to_html(options, template, &key)
                    .ok()
                    .and_then(|made| Shape::new(&made, holes.len()))
                    .filter(|shape| shape.fill(&holes).as_deref() == Some(html.as_str()))
                    .map(Arc::new);
                self.made.fetch_add(1, Ordering::Relaxed);
                (self.bytes).fetch_add(key.len() + html.len(), Ordering::Relaxed);
                self.shapes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, shape);
                Ok(html)
            }
        }
    }

    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        let shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        (
            shapes.len(),
            shapes.values().filter(|s| s.is_some()).count(),
        )
    }
}

/// The MJML with a sentinel for each value (`OPEN`, its index, `CLOSE`), and the values.
/// None when it cannot be split with certainty (a tag left open, an attribute unquoted, a
/// `>` in text, which mrml's parser reads with the characters before it): that email is
/// rendered directly.
fn skeleton(mjml: &str) -> Option<(String, Vec<&str>)> {
    let mut key = String::with_capacity(mjml.len());
    let mut holes = Vec::new();
    let mut hole = |key: &mut String, value| {
        key.push(OPEN);
        key.push_str(&holes.len().to_string());
        key.push(CLOSE);
        holes.push(value);
    };
    // In the head only the title and preview are text a reader sees.
    let mut in_head = false;
    let mut in_head_text = false;
    let mut rest = mjml;
    while !rest.is_empty() {
        if let Some(comment) = rest.strip_prefix("<!--") {
            let end = comment.find("-->")? + "<!---->".len();
            key.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if rest.starts_with('<') {
            let (tag, len) = tag(rest, &mut key, &mut hole)?;
            let self_closing = rest[..len].ends_with("/>");
            match tag {
                _ if self_closing => {}
                "mj-head" => in_head = true,
                "/mj-head" => in_head = false,
                "mj-title" | "mj-preview" => in_head_text = true,
                "/mj-title" | "/mj-preview" => in_head_text = false,
                _ => {}
            }
            rest = &rest[len..];
        } else {
            let end = rest.find('<').unwrap_or(rest.len());
            let text = &rest[..end];
            if text.contains('>') {
                return None;
            }
            let core = text.trim();
            if core.is_empty() || (in_head && !in_head_text) {
                key.push_str(text);
            } else {
                let lead = text.len() - text.trim_start().len();
                key.push_str(&text[..lead]);
                hole(&mut key, core);
                key.push_str(&text[lead + core.len()..]);
            }
            rest = &rest[end..];
        }
    }
    Some((key, holes))
}

/// One tag at the start of `rest` into the key, with a sentinel for each non-empty value of
/// a `COPIED_ATTRIBUTES` attribute: its name (`/name` when closing) and its length.
fn tag<'a>(
    rest: &'a str,
    key: &mut String,
    hole: &mut impl FnMut(&mut String, &'a str),
) -> Option<(&'a str, usize)> {
    let is_name_end = |c: char| c.is_whitespace() || c == '>' || c == '/';
    let name_start = if rest[1..].starts_with('/') { 2 } else { 1 };
    let name_len = rest[name_start..].find(is_name_end)?;
    if name_len == 0 {
        return None;
    }
    let name = &rest[1..name_start + name_len];
    let mut at = name_start + name_len;
    key.push_str(&rest[..at]);
    loop {
        let spaces = rest[at..].len() - rest[at..].trim_start().len();
        key.push_str(&rest[at..at + spaces]);
        at += spaces;
        let here = &rest[at..];
        if here.starts_with('>') {
            key.push('>');
            return Some((name, at + 1));
        }
        if here.starts_with("/>") {
            key.push_str("/>");
            return Some((name, at + 2));
        }
        let attribute_len = here.find(|c: char| is_name_end(c) || c == '=')?;
        if attribute_len == 0 {
            return None;
        }
        let attribute = &here[..attribute_len];
        at += attribute_len;
        key.push_str(attribute);
        if !rest[at..].starts_with('=') {
            continue; // an attribute without a value
        }
        let quote = rest[at + 1..]
            .chars()
            .next()
            .filter(|q| *q == '"' || *q == '\'')?;
        key.push('=');
        key.push(quote);
        at += 2;
        let value_len = rest[at..].find(quote)?;
        let value = &rest[at..at + value_len];
        if value.is_empty() || !COPIED_ATTRIBUTES.contains(&attribute) {
            key.push_str(value);
        } else {
            hole(key, value);
        }
        key.push(quote);
        at += value_len + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::digest::mjml_options;

    #[test]
    fn text_and_copied_attributes_are_holes_the_rest_is_the_key() {
        let mjml = "<mjml><mj-head><mj-title>Hi &amp; you</mj-title><mj-style>p { x }</mj-style></mj-head>\
            <mj-body><!-- a > b --><mj-text align=\"left\">  Hi <b>Ada</b>,\n</mj-text>\
            <mj-button href='https://x/?a=1&amp;b' css-class=\"c\">Go</mj-button><mj-image src=\"\" /></mj-body></mjml>";
        let (key, holes) = skeleton(mjml).unwrap();
        assert_eq!(
            holes,
            [
                "Hi &amp; you",
                "Hi",
                "Ada",
                ",",
                "https://x/?a=1&amp;b",
                "Go"
            ]
        );
        assert_eq!(
            key,
            "<mjml><mj-head><mj-title>\u{E000}0\u{E001}</mj-title><mj-style>p { x }</mj-style></mj-head>\
            <mj-body><!-- a > b --><mj-text align=\"left\">  \u{E000}1\u{E001} <b>\u{E000}2\u{E001}</b>\u{E000}3\u{E001}\n</mj-text>\
            <mj-button href='\u{E000}4\u{E001}' css-class=\"c\">\u{E000}5\u{E001}</mj-button><mj-image src=\"\" /></mj-body></mjml>"
        );
        for unsure in [
            "<mj-text",
            "<mj-text a=b>",
            "<mj-text a=\"b>",
            "<!-- x",
            "<mj-text =\"x\">",
        ] {
            assert!(skeleton(unsure).is_none(), "{unsure}");
        }
    }

    #[test]
    fn every_email_of_a_shape_is_mrmls_own_and_a_shape_that_is_not_is_never_used() {
        let options = mjml_options();
        let shapes = Shapes::default();
        let email = |name: &str, link: &str, width: &str| {
            format!(
                "<mjml><mj-head><mj-title>{name}</mj-title></mj-head><mj-body><mj-section><mj-column width=\"{width}\">\
                 <mj-text>Hi {name},</mj-text><mj-image src=\"{link}\" alt=\"{name}\" />\
                 <mj-button href=\"{link}\">Open</mj-button></mj-column></mj-section></mj-body></mjml>"
            )
        };
        let names = [
            "Ada",
            "Tom &amp; Jerry",
            "&lt;b&gt;",
            "李小龍 \u{301}\u{200B}",
            "a\\&quot;b",
            "x\ty  z",
        ];
        let links = ["https://a.example/?t=1&amp;b=2", "https://b.example/\\é"];
        for (i, name) in names.iter().enumerate() {
            for width in ["100%", "50%"] {
                let mjml = email(name, links[i % 2], width);
                let direct =
                    mjml_to_html(&options, "t", &mjml).unwrap_or_else(|e| panic!("{mjml}: {e}"));
                assert_eq!(
                    shapes.html(&options, "t", &mjml).unwrap(),
                    direct,
                    "{name} {width}"
                );
            }
        }
        // Two widths, two shapes, each mrml's own; every name and link was the same shape.
        assert_eq!(shapes.counts(), (2, 2));
        // Sentinel characters in the text: made directly, nothing cached.
        let mjml = email("\u{E000}0\u{E001}", links[0], "100%");
        let direct = mjml_to_html(&options, "t", &mjml).unwrap();
        assert_eq!(shapes.html(&options, "t", &mjml).unwrap(), direct);
        assert_eq!(shapes.counts(), (2, 2));
        // A character XML refuses, in a shape already made: refused as mrml refuses it.
        for refused in ["Hi\u{c}Ada", "\u{0}", "\u{1b}[31m", "\u{FFFE}"] {
            let mjml = email(refused, links[0], "100%");
            assert!(mjml_to_html(&options, "t", &mjml).is_err());
            assert!(shapes.html(&options, "t", &mjml).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn a_gt_in_text_is_mrmls_to_judge_and_its_panic_fails_one_email() {
        let options = mjml_options();
        let shapes = Shapes::default();
        let text = |t: &str| {
            format!("<mjml><mj-body><mj-section><mj-column><mj-text>{t}</mj-text></mj-column></mj-section></mj-body></mjml>")
        };
        // `]]>` in text is refused by mrml's parser, and by the cache after a shape
        // without it; a multibyte character before `>` panics in it, and fails the email.
        for sequence in [["Ada&gt;>", "x]]>", "李>"], ["李>", "Ada>", "é]>"]] {
            for t in sequence {
                let mjml = text(t);
                let direct = mjml_to_html(&options, "t", &mjml).map_err(|e| e.to_string());
                let cached = shapes.html(&options, "t", &mjml).map_err(|e| e.to_string());
                assert_eq!(cached, direct, "{t:?}");
            }
        }
        assert!(mjml_to_html(&options, "t", &text("李>"))
            .unwrap_err()
            .to_string()
            .contains("a character of several bytes just before a `>`"));
    }
}
