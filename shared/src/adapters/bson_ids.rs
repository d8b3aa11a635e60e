//! User ids between BSON and their text form (`crate::domain::user_id`), and the one-line reasons that
//! name a document whose field holds something else.

use crate::domain::user_id::UserId;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document};

pub fn to_bson(id: &UserId) -> Bson {
    match id {
        UserId::Text(s) => Bson::String(s.clone()),
        UserId::ObjectId(bytes) => Bson::ObjectId(ObjectId::from_bytes(*bytes)),
    }
}

/// The id a BSON value holds, or None for any other type (a number, null, an array...).
pub fn from_bson(value: &Bson) -> Option<UserId> {
    match value {
        Bson::String(s) if !s.is_empty() => Some(UserId::Text(s.clone())),
        Bson::ObjectId(oid) => Some(UserId::ObjectId(oid.bytes())),
        _ => None,
    }
}

/// A BSON value's type as MongoDB names it (`$type`), for messages.
pub fn type_name(value: Option<&Bson>) -> &'static str {
    let Some(value) = value else {
        return "missing";
    };
    match value {
        Bson::String(s) if s.is_empty() => "an empty string",
        Bson::String(_) => "string",
        Bson::ObjectId(_) => "objectId",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Double(_) => "double",
        Bson::Decimal128(_) => "decimal",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Array(_) => "array",
        Bson::Document(_) => "object",
        Bson::DateTime(_) => "date",
        Bson::Binary(_) => "binData",
        _ => "another type",
    }
}

/// How a document names itself in a message: its `_id` in text form, or a short rendering
/// of whatever else it is.
pub fn describe_id(doc: &Document) -> String {
    match doc.get("_id") {
        Some(value) => from_bson(value).map_or_else(|| value.to_string(), |id| id.to_string()),
        None => "(no _id)".into(),
    }
}

/// "follows 65a...: followerId is int (expected a string or an ObjectId)"
pub fn bad_field(collection: &str, doc: &Document, field: &str, expected: &str) -> String {
    format!(
        "{collection} {}: {field} is {} (expected {expected})",
        describe_id(doc),
        type_name(doc.get(field)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn ids_convert_both_ways_and_other_types_are_named() {
        let oid = ObjectId::parse_str("65a1f0c2e4b0a1b2c3d4e5f6").unwrap();
        for value in [Bson::String("u1".into()), Bson::ObjectId(oid)] {
            let id = from_bson(&value).unwrap();
            assert_eq!(to_bson(&id), value);
        }
        assert_eq!(from_bson(&Bson::Int32(7)), None);
        assert_eq!(from_bson(&Bson::String(String::new())), None);
        let follow = doc! { "_id": oid, "followerId": 7 };
        assert_eq!(
            bad_field("follows", &follow, "followerId", "a string or an ObjectId"),
            "follows oid:65a1f0c2e4b0a1b2c3d4e5f6: followerId is int (expected a string or an ObjectId)"
        );
        assert!(bad_field("users", &doc! {}, "email", "a string")
            .contains("(no _id): email is missing"));
    }
}
