//! What a POST's form asks for: a mail client's one-click, or one of the page's three
//! actions, understood whole or refused with what in it is not understood.

use crate::domain::topics::{TopicId, Topics};
use std::collections::BTreeSet;

/// The largest form a POST may carry: a one-click is under 200 bytes, the page's save under
/// 1 KiB. A bigger body is refused before it is parsed or the token read (the function has
/// 128 MB).
pub(super) const MAX_FORM_BYTES: usize = 8 * 1024;

/// What a POST asks for, once its form is understood whole.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Request {
    /// RFC 8058's one-click, from a mail client.
    OneClick,
    /// The page's "unsubscribe from this topic" button.
    Leave,
    /// The page's save: the topics ticked.
    Save(BTreeSet<TopicId>),
    UnsubscribeAll,
}

/// The form understood, or what in it is not (quoted for the page, never trusted).
pub(super) fn understand(form: &[(String, String)], topics: &Topics) -> Result<Request, String> {
    let quoted = |s: &str| crate::domain::quoted(s);
    // However the receiver encoded it (a trailing line break, the field repeated), and
    // nothing else in the form.
    let one_click = |(name, value): &(String, String)| {
        name.trim().eq_ignore_ascii_case("List-Unsubscribe")
            && value.trim().eq_ignore_ascii_case("One-Click")
    };
    if !form.is_empty() && form.iter().all(one_click) {
        return Ok(Request::OneClick);
    }
    let mut action = None;
    let mut ticked = BTreeSet::new();
    for (name, value) in form {
        match name.as_str() {
            "action" if action.is_none() => action = Some(value.as_str()),
            "topic" => {
                let topic = topics
                    .get(value)
                    .map_err(|_| format!("topic {}", quoted(value)))?;
                ticked.insert(topic.id.clone());
            }
            other => return Err(format!("field {}", quoted(other))),
        }
    }
    match action {
        Some("save") => Ok(Request::Save(ticked)),
        Some("leave") if ticked.is_empty() => Ok(Request::Leave),
        Some("unsubscribe-all") if ticked.is_empty() => Ok(Request::UnsubscribeAll),
        Some(other @ ("leave" | "unsubscribe-all")) => Err(format!("topic with action {other}")),
        Some(other) => Err(format!("action {}", quoted(other))),
        None => Err("no action".to_owned()),
    }
}
