//! What a user's document says of their preferences, read the one way the audience scan,
//! CreateEmails and the preference centre all read it.
//!
//! Data model (in the user's document, beside `subscribed`):
//! `topics: { <topic id>: { subscribed: bool, at: date, via: "one-click" | "page",
//! campaignId: string } }`. A topic absent from `topics` follows its default, unless an
//! earlier `topics` that was not a document was moved aside to `topicsUnreadable`: then it
//! stays unreadable (not sent) until the user chooses.

use super::mongo::{SUBSCRIBED, SUPPRESSION, TOPICS, TOPICS_UNREADABLE};
use crate::domain::topics::{Choice, Overall, Preferences, Standing, TopicId, Topics};
use mongodb::bson::{doc, Bson, Document};

/// `topics.<id>.subscribed`: the field a topic's choice is kept in.
pub fn choice_field(topic: &TopicId) -> String {
    format!("{TOPICS}.{topic}.{SUBSCRIBED}")
}

/// The fields `standing` reads, for a projection.
pub fn standing_projection(topic: &TopicId) -> Document {
    doc! { SUBSCRIBED: 1, SUPPRESSION: 1, choice_field(topic): 1, TOPICS_UNREADABLE: 1 }
}

fn overall(user: &Document) -> Overall {
    match user.get(SUBSCRIBED) {
        Some(Bson::Boolean(true)) => Overall::Subscribed,
        None | Some(Bson::Null | Bson::Boolean(false)) => Overall::Unsubscribed,
        Some(_) => Overall::Unreadable,
    }
}

fn choice(user: &Document, topic: &TopicId) -> Choice {
    // No choice of its own under a `topics` that was unreadable: still unreadable.
    let unset = match user.contains_key(TOPICS_UNREADABLE) {
        true => Choice::Unreadable,
        false => Choice::Unset,
    };
    let Some(topics) = user.get(TOPICS) else {
        return unset;
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

/// The user's standing for a campaign of `topic`.
pub fn standing(user: &Document, topic: &TopicId) -> Standing {
    Standing {
        overall: overall(user),
        suppressed: user.contains_key(SUPPRESSION),
        choice: choice(user, topic),
    }
}

/// Every topic's choice, as the preference centre shows it.
pub fn preferences(user: &Document, topics: &Topics) -> Preferences {
    Preferences {
        overall: overall(user),
        choices: topics
            .all()
            .iter()
            .map(|t| (t.id.clone(), choice(user, &t.id)))
            .filter(|(_, c)| *c != Choice::Unset)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
