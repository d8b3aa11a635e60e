//! The pure types and rules of the product: no AWS SDK, no MongoDB driver, no I/O.

pub mod address;
pub mod aws_limits;
pub mod campaign;
pub mod campaign_start;
pub mod campaign_state;
pub mod capacity;
pub mod definition;
pub mod definition_pin;
pub mod delivery;
pub mod digest;
pub mod events_path;
pub mod experiment;
pub mod fan_out;
pub mod guardrails;
pub mod language;
pub mod ledger;
pub mod local_time;
pub mod messages;
pub mod mime;
pub mod open_content;
pub mod public_urls;
pub mod send_rate;
pub mod ses_event;
pub mod ses_tags;
pub mod signing;
pub mod text;
pub mod topics;
pub mod unsubscribe_link;
pub mod user_id;

/// `raw` as a message may quote it: at most 40 characters, and its length when shortened.
pub fn quoted(raw: &str) -> String {
    const SHOWN: usize = 40;
    match raw.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{:?}... ({} characters)", &raw[..end], raw.chars().count()),
        None => format!("{raw:?}"),
    }
}
