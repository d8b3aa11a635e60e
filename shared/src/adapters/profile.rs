//! What an email needs from its recipient's own document, or why they get none: read the
//! one way for the digest (`directory`) and for a campaign definition (`definition`), whose
//! users keep these fields wherever `recipients` says.

use super::bson_ids;
use super::field_path::{self, Field};
use super::mongo::{EMAIL, LOCALE, NAME, TIMEZONE, USERS};
use super::preferences::StandingFields;
use crate::domain::definition::Recipients;
use crate::domain::digest::SkipReason;
use crate::domain::text::printable_name;
use crate::domain::topics::{Exclusion, Topic};
use mongodb::bson::{Bson, Document};
use std::sync::LazyLock;

/// Where a users collection keeps a recipient's fields (dotted paths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileFields {
    pub collection: String,
    pub email: String,
    pub name: Option<String>,
    pub language: Option<String>,
    pub zone: Option<String>,
    pub standing: StandingFields,
}

static USERS_FIELDS: LazyLock<ProfileFields> = LazyLock::new(|| ProfileFields {
    collection: USERS.into(),
    email: EMAIL.into(),
    name: Some(NAME.into()),
    language: Some(LOCALE.into()),
    zone: Some(TIMEZONE.into()),
    standing: StandingFields::users().clone(),
});

impl ProfileFields {
    /// Our users collection's fields.
    pub fn users() -> &'static Self {
        &USERS_FIELDS
    }

    /// The fields a definition's `[recipients]` names.
    pub fn of(recipients: &Recipients) -> Self {
        let r = recipients;
        Self {
            collection: r.collection.clone(),
            email: r.email.clone(),
            name: r.name.clone(),
            language: r.language.clone(),
            zone: r.zone.clone(),
            standing: StandingFields::at(&r.subscribed, &r.suppressed, &r.topics),
        }
    }

    /// The fields `Profile::read` reads for `topic`, for a projection: each path's top
    /// field whole, since projecting `contact.email` would drop a `contact` of the wrong
    /// type (read as missing, where it is invalid).
    pub fn projection(&self, topic: &Topic) -> Document {
        let standing = self.standing.paths(&topic.id);
        let own = [
            Some(&self.email),
            self.name.as_ref(),
            self.language.as_ref(),
            self.zone.as_ref(),
        ];
        field_path::projection(
            standing
                .iter()
                .chain(own.into_iter().flatten())
                .map(|path| path.split('.').next().unwrap_or(path)),
        )
    }
}

/// What the email needs from the user's own document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub email: String,
    /// Printable (`printable_name`), or none.
    pub name: Option<String>,
    pub language: Option<String>,
    /// The time zone as stored; a value of another type is none (local-time delivery reads
    /// its own copy from the audience scan).
    pub zone: Option<String>,
}

impl Profile {
    /// The profile, or why they get nothing (the audience rule of `topic` read again: the
    /// person may have chosen since; a field of the wrong type is `InvalidDocument`, logged
    /// with the document and the field, never the address).
    pub fn read(
        user: &Document,
        fields: &ProfileFields,
        topic: &Topic,
    ) -> Result<Self, SkipReason> {
        Self::read_or_describe(user, fields, topic).unwrap_or_else(|detail| {
            tracing::warn!(%detail, "user skipped: a field of the wrong type");
            Err(SkipReason::InvalidDocument)
        })
    }

    fn read_or_describe(
        user: &Document,
        fields: &ProfileFields,
        topic: &Topic,
    ) -> Result<Result<Self, SkipReason>, String> {
        let collection = fields.collection.as_str();
        let bad = |field: &str, expected: &str| describe(collection, user, field, expected);
        match fields.standing.standing(user, &topic.id).exclusion(topic) {
            None => {}
            Some(Exclusion::Unsubscribed) => return Ok(Err(SkipReason::Unsubscribed)),
            Some(Exclusion::Suppressed) => return Ok(Err(SkipReason::Suppressed)),
            Some(Exclusion::LeftTopic) => return Ok(Err(SkipReason::LeftTopic)),
            Some(Exclusion::Unreadable) => {
                let subscribed = &fields.standing.subscribed;
                let field = match field_path::get(user, subscribed) {
                    Field::Value(Bson::Boolean(_) | Bson::Null) | Field::Missing => {
                        fields.standing.choice_field(&topic.id)
                    }
                    _ => subscribed.clone(),
                };
                return Err(bad(&field, "true or false"));
            }
        }
        let email = match optional_text(user, &fields.email) {
            Ok(Some(email)) => email,
            Ok(None) => return Ok(Err(SkipReason::NoAddress)),
            Err(()) => return Err(bad(&fields.email, "a string")),
        };
        let text = |path: &Option<String>| match path {
            Some(path) => optional_text(user, path).map_err(|()| bad(path, "a string")),
            None => Ok(None),
        };
        let name = text(&fields.name)?.and_then(|name| printable_name(&name));
        let language = text(&fields.language)?;
        let zone = fields
            .zone
            .as_ref()
            .and_then(|path| optional_text(user, path).ok().flatten());
        Ok(Ok(Self {
            email,
            name,
            language,
            zone,
        }))
    }
}

/// A string field as stored; None when missing, null or blank; Err for any other type (or
/// one behind an ancestor of another type).
fn optional_text(doc: &Document, path: &str) -> Result<Option<String>, ()> {
    match field_path::get(doc, path) {
        Field::Missing | Field::Value(Bson::Null) => Ok(None),
        Field::Value(Bson::String(s)) if s.trim().is_empty() => Ok(None),
        Field::Value(Bson::String(s)) => Ok(Some(s.clone())),
        _ => Err(()),
    }
}

/// "users 65a...: contact.email is int (expected a string)"; a path blocked by an ancestor
/// names the ancestor.
pub(crate) fn describe(collection: &str, doc: &Document, path: &str, expected: &str) -> String {
    match field_path::get(doc, path) {
        Field::Blocked { at, found } => format!(
            "{collection} {}: {at} is {} (expected a document holding {path})",
            bson_ids::describe_id(doc),
            bson_ids::type_name(Some(found)),
        ),
        field => format!(
            "{collection} {}: {path} is {} (expected {expected})",
            bson_ids::describe_id(doc),
            bson_ids::type_name(field.value()),
        ),
    }
}
