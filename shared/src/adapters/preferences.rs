//! What a user's document says of their preferences, read the one way the audience scan,
//! CreateEmails and the preference centre all read it.
//!
//! Data model (in the user's document, beside `subscribed`):
//! `topics: { <topic id>: { subscribed: bool, at: date, via: "one-click" | "page",
//! campaignId: string } }`. A topic absent from `topics` follows its default, unless an
//! earlier `topics` that was not a document was moved aside to `topicsUnreadable`: then it
//! stays unreadable (not sent) until the user chooses.

use super::field_path::{self, Field};
use super::mongo::{SUBSCRIBED, SUPPRESSION, TOPICS, TOPICS_UNREADABLE};
use crate::domain::topics::{Choice, Overall, Preferences, Standing, TopicId, Topics};
use mongodb::bson::{Bson, Document};
use std::sync::LazyLock;

/// Where a users collection keeps the fields of the audience rule: ours (`StandingFields::
/// users`), or the paths a campaign definition names (`recipients`). The rule reads them
/// the same way wherever they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandingFields {
    pub subscribed: String,
    pub suppression: String,
    pub topics: String,
    /// Beside `topics`: where an unreadable `topics` was moved (`TOPICS_UNREADABLE`).
    pub topics_unreadable: String,
}

static USERS: LazyLock<StandingFields> = LazyLock::new(|| StandingFields {
    subscribed: SUBSCRIBED.into(),
    suppression: SUPPRESSION.into(),
    topics: TOPICS.into(),
    topics_unreadable: TOPICS_UNREADABLE.into(),
});

impl StandingFields {
    /// Our users collection's fields.
    pub fn users() -> &'static Self {
        &USERS
    }

    /// The fields at these paths; the unreadable `topics` is kept beside `topics`
    /// (`prefs.topics` → `prefs.topicsUnreadable`), as the subscriber store writes it.
    pub fn at(subscribed: &str, suppression: &str, topics: &str) -> Self {
        Self {
            subscribed: subscribed.into(),
            suppression: suppression.into(),
            topics: topics.into(),
            topics_unreadable: beside(topics, TOPICS_UNREADABLE),
        }
    }

    /// `name` beside `subscribed` (`prefs.subscribed` → `prefs.unsubscribedAt`): where the
    /// subscriber store records when and from which email `subscribed` last changed.
    pub fn beside_subscribed(&self, name: &str) -> String {
        beside(&self.subscribed, name)
    }

    /// Every topic's choice, as the preference centre shows it.
    pub fn preferences(&self, user: &Document, topics: &Topics) -> Preferences {
        Preferences {
            overall: self.overall(user),
            choices: topics
                .all()
                .iter()
                .map(|t| (t.id.clone(), self.choice(user, &t.id)))
                .filter(|(_, c)| *c != Choice::Unset)
                .collect(),
        }
    }

    /// `<topics>.<id>.subscribed`: the field a topic's choice is kept in.
    pub fn choice_field(&self, topic: &TopicId) -> String {
        format!("{}.{topic}.{SUBSCRIBED}", self.topics)
    }

    /// The paths `standing` reads.
    pub fn paths(&self, topic: &TopicId) -> [String; 4] {
        [
            self.subscribed.clone(),
            self.suppression.clone(),
            self.choice_field(topic),
            self.topics_unreadable.clone(),
        ]
    }

    /// The user's standing for a campaign of `topic`.
    pub fn standing(&self, user: &Document, topic: &TopicId) -> Standing {
        Standing {
            overall: self.overall(user),
            // Present, even null, is suppressed; behind a wrong type it is never guessed.
            suppressed: !matches!(field_path::get(user, &self.suppression), Field::Missing),
            choice: self.choice(user, topic),
        }
    }

    fn overall(&self, user: &Document) -> Overall {
        match field_path::get(user, &self.subscribed) {
            Field::Value(Bson::Boolean(true)) => Overall::Subscribed,
            Field::Missing | Field::Value(Bson::Null | Bson::Boolean(false)) => {
                Overall::Unsubscribed
            }
            _ => Overall::Unreadable,
        }
    }

    fn choice(&self, user: &Document, topic: &TopicId) -> Choice {
        // No choice of its own under a `topics` that was unreadable: still unreadable.
        let unset = match field_path::get(user, &self.topics_unreadable) {
            Field::Missing => Choice::Unset,
            _ => Choice::Unreadable,
        };
        let topics = match field_path::get(user, &self.topics) {
            Field::Missing => return unset,
            Field::Blocked { .. } => return Choice::Unreadable,
            Field::Value(topics) => topics,
        };
        let Bson::Document(topics) = topics else {
            return match topics {
                Bson::Null => Choice::Unset,
                _ => Choice::Unreadable,
            };
        };
        match topics.get(topic.as_str()) {
            None | Some(Bson::Null) => unset,
            Some(Bson::Document(one)) => match one.get(SUBSCRIBED) {
                Some(Bson::Boolean(true)) => Choice::In,
                Some(Bson::Boolean(false)) => Choice::Out,
                None | Some(Bson::Null) => unset,
                Some(_) => Choice::Unreadable,
            },
            Some(_) => Choice::Unreadable,
        }
    }
}

/// `topics.<id>.subscribed`: the field a topic's choice is kept in.
pub fn choice_field(topic: &TopicId) -> String {
    StandingFields::users().choice_field(topic)
}

/// The fields `standing` reads, for a projection.
pub fn standing_projection(topic: &TopicId) -> Document {
    let paths = StandingFields::users().paths(topic);
    field_path::projection(paths.iter().map(String::as_str))
}

/// The user's standing for a campaign of `topic`.
pub fn standing(user: &Document, topic: &TopicId) -> Standing {
    StandingFields::users().standing(user, topic)
}

/// Every topic's choice, as the preference centre shows it.
pub fn preferences(user: &Document, topics: &Topics) -> Preferences {
    StandingFields::users().preferences(user, topics)
}

/// The field `name` beside the one at `path` (in the same document).
fn beside(path: &str, name: &str) -> String {
    match path.rsplit_once('.') {
        Some((parent, _)) => format!("{parent}.{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn every_shape_of_the_fields_reads_as_one_standing() {
        let digest = TopicId::parse("digest").unwrap();
        let read = |d: Document| standing(&d, &digest);
        // Before topics existed: subscribed users follow each topic's default.
        let old = read(doc! { "subscribed": true });
        assert_eq!(
            (old.overall, old.choice),
            (Overall::Subscribed, Choice::Unset)
        );
        assert_eq!(read(doc! {}).overall, Overall::Unsubscribed);
        assert_eq!(
            read(doc! { "subscribed": "yes" }).overall,
            Overall::Unreadable
        );
        assert!(read(doc! { "subscribed": true, "suppression": {} }).suppressed);
        let topic = |v: Bson| read(doc! { "subscribed": true, "topics": v }).choice;
        assert_eq!(topic(Bson::Null), Choice::Unset);
        assert_eq!(
            topic(doc! { "digest": { "subscribed": false } }.into()),
            Choice::Out
        );
        assert_eq!(
            topic(doc! { "digest": { "subscribed": true } }.into()),
            Choice::In
        );
        assert_eq!(
            topic(doc! { "tips": { "subscribed": false } }.into()),
            Choice::Unset
        );
        assert_eq!(topic(doc! { "digest": {} }.into()), Choice::Unset);
        assert_eq!(topic(doc! { "digest": false }.into()), Choice::Unreadable);
        assert_eq!(
            topic(doc! { "digest": { "subscribed": 0 } }.into()),
            Choice::Unreadable
        );
        assert_eq!(topic(Bson::Array(vec![])), Choice::Unreadable);
        // An unreadable `topics` moved aside so that one choice could be written: that choice
        // counts, every other topic stays unreadable.
        let moved = |topics: Document| {
            read(doc! { "subscribed": true, "topics": topics, "topicsUnreadable": "x" }).choice
        };
        assert_eq!(
            moved(doc! { "digest": { "subscribed": false } }),
            Choice::Out
        );
        assert_eq!(
            moved(doc! { "tips": { "subscribed": true } }),
            Choice::Unreadable
        );
        assert_eq!(
            read(doc! { "subscribed": true, "topicsUnreadable": 7 }).choice,
            Choice::Unreadable
        );
        assert_eq!(choice_field(&digest), "topics.digest.subscribed");
    }

    #[test]
    fn a_definitions_paths_read_as_one_standing() {
        let digest = TopicId::parse("digest").unwrap();
        let fields = StandingFields::at("prefs.subscribed", "flags.suppression", "prefs.topics");
        assert_eq!(fields.topics_unreadable, "prefs.topicsUnreadable");
        assert_eq!(
            fields.beside_subscribed("unsubscribedAt"),
            "prefs.unsubscribedAt"
        );
        assert_eq!(
            StandingFields::users().beside_subscribed("unsubscribedAt"),
            "unsubscribedAt"
        );
        assert_eq!(
            fields.choice_field(&digest),
            "prefs.topics.digest.subscribed"
        );
        let read = |d: Document| fields.standing(&d, &digest);
        let nested = doc! { "prefs": { "subscribed": true, "topics": { "digest": { "subscribed": false } } } };
        assert_eq!(
            (read(nested.clone()).overall, read(nested).choice),
            (Overall::Subscribed, Choice::Out)
        );
        // An ancestor of the wrong type is never read as a choice.
        let blocked = read(doc! { "prefs": "yes", "flags": 1 });
        assert_eq!(blocked.overall, Overall::Unreadable);
        assert_eq!(blocked.choice, Choice::Unreadable);
        assert!(blocked.suppressed);
        assert!(!read(doc! { "prefs": { "subscribed": true } }).suppressed);
        // Ours, at the top level, as before.
        assert_eq!(
            StandingFields::users(),
            &StandingFields::at("subscribed", "suppression", "topics")
        );
    }
}
