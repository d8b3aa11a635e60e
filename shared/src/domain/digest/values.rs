//! One email's values as its templates are given them: the user's names made printable,
//! the window's dates, the topic's label in the email's locale, and the footer's links.

use super::Digest;
use crate::domain::campaign::Window;
use crate::domain::open_content::SlotUrls;
use crate::domain::topics::Topic;
use crate::domain::unsubscribe_link;
use minijinja::{context, Value};

/// One email's window, topic, preference-centre URL and pick slots.
pub type Email<'a> = (&'a Window, &'a Topic, &'a str, &'a [SlotUrls]);

/// One email's values as the templates are given them, each made printable once.
pub(super) struct Values<'a> {
    pub(super) locale: &'static str,
    pub(super) name: String,
    pub(super) recent: Vec<String>,
    /// New followers not named.
    pub(super) others: u64,
    pub(super) since: Value,
    pub(super) until: Value,
    pub(super) topic: &'a str,
    /// The footer's first link: leave this email's topic (the second is the whole centre).
    pub(super) leave_url: String,
    /// Every template's variables, the plain text's links among them.
    pub(super) ctx: Value,
}

impl<'a> Values<'a> {
    pub(super) fn of(digest: &Digest, email: Email<'a>, locale: &'static str) -> Self {
        let (window, topic, unsubscribe_url, picks) = email;
        let leave_url = unsubscribe_link::leave_link(unsubscribe_url);
        let last_day = window.until - time::Duration::seconds(1);
        let text_picks: Vec<Value> = picks
            .iter()
            .map(|p| context! { image => &p.image, badge => &p.badge, link => &p.link })
            .collect();
        // Whatever the directory read, no control character reaches a template.
        let name = crate::domain::text::printable(&digest.name);
        let recent: Vec<String> = digest
            .recent
            .iter()
            .map(|n| crate::domain::text::printable(n))
            .collect();
        let others = digest
            .new_followers
            .saturating_sub(digest.recent.len() as u64);
        let since = date(window.since);
        let until = date(last_day);
        let topic = topic.label(locale);
        let ctx = context! {
            locale => locale,
            name => &name,
            new_followers => digest.new_followers,
            recent => &recent,
            others => others,
            since => since.clone(),
            until => until.clone(),
            topic => topic,
            leave_url => &leave_url,
            manage_url => unsubscribe_url,
            picks => &text_picks,
        };
        Values {
            locale,
            name,
            recent,
            others,
            since,
            until,
            topic,
            leave_url,
            ctx,
        }
    }
}

/// A date as the templates format it (each locale names its months).
fn date(t: time::OffsetDateTime) -> Value {
    context! { day => t.day(), month => u8::from(t.month()), year => t.year() }
}
