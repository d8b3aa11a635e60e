//! User ids as they travel outside MongoDB: in queue messages, send record keys, SES tags,
//! unsubscribe tokens and the operator tools.
//!
//! A MongoDB `_id` (and so a `followerId` / `followeeId`) is a string or an ObjectId, and one
//! collection may hold both after a migration. Everything outside MongoDB carries one text
//! form that maps back to exactly one MongoDB value:
//!
//! - an ObjectId is `oid:` and its 24 lowercase hex digits (`oid:65a1f0c2e4b0a1b2c3d4e5f6`);
//! - a string is itself, unless it starts with `oid:` or `str:`, in which case it is written
//!   `str:` + the string (`str:oid:x` is the string `oid:x`).
//!
//! So every string id that existed before ObjectIds were supported keeps its text form, and
//! no two MongoDB values share one. `adapters::bson_ids` converts to and from BSON.

use std::fmt;

/// The longest user id accepted (its text form). Ids are keys in MongoDB and DynamoDB (whose
/// partition keys stop at 2,048 bytes); a longer one is a bad message, failed up front.
pub const MAX_USER_ID_BYTES: usize = 512;

const OID: &str = "oid:";
const STR: &str = "str:";

/// A user id as MongoDB holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UserId {
    /// A string `_id`. Sorts before every ObjectId, as in MongoDB's BSON order.
    Text(String),
    /// An ObjectId `_id` (its 12 bytes, which sort as MongoDB sorts ObjectIds).
    ObjectId([u8; 12]),
}

/// Why a text is not a user id: one line that says what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UserIdError(String);

/// Whether an id's text form can travel in a message (a queue body, a token, a tag): 1 to
/// `MAX_USER_ID_BYTES` bytes without control characters. `UserId::parse` checks it first.
pub fn check_travels(text: &str) -> Result<(), UserIdError> {
    if text.is_empty() || text.len() > MAX_USER_ID_BYTES || text.chars().any(char::is_control) {
        return Err(UserIdError(format!(
            "userId must be 1 to {MAX_USER_ID_BYTES} bytes without control characters (got {} bytes)",
            text.len()
        )));
    }
    Ok(())
}

impl UserId {
    /// Parses the text form (see the module doc); the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, UserIdError> {
        check_travels(text)?;
        if let Some(hex) = text.strip_prefix(OID) {
            return parse_hex(hex).map(Self::ObjectId).ok_or_else(|| {
                UserIdError(format!(
                    "userId {} starts with \"oid:\" but is not oid: and 24 lowercase hex digits",
                    super::quoted(text)
                ))
            });
        }
        if let Some(inner) = text.strip_prefix(STR) {
            // Only the strings that need it are escaped: anything else has one form only.
            if inner.starts_with(OID) || inner.starts_with(STR) {
                return Ok(Self::Text(inner.to_owned()));
            }
            return Err(UserIdError(format!(
                "userId {}: \"str:\" only escapes strings that start with \"oid:\" or \"str:\"",
                super::quoted(text)
            )));
        }
        Ok(Self::Text(text.to_owned()))
    }

    /// The BSON type name, for messages about ids of other types.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => "string",
            Self::ObjectId(_) => "objectId",
        }
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 12]> {
    if hex.len() != 24
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut bytes = [0u8; 12];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

impl fmt::Display for UserId {
    /// The text form; `parse` reads it back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(s) if s.starts_with(OID) || s.starts_with(STR) => write!(f, "{STR}{s}"),
            Self::Text(s) => f.write_str(s),
            Self::ObjectId(bytes) => {
                f.write_str(OID)?;
                bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

/// Checks a user id's text form from outside (a message, a token, an SES tag).
pub fn check_user_id(id: &str) -> Result<(), UserIdError> {
    UserId::parse(id).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_forms_round_trip_and_stay_distinct() {
        let oid = UserId::ObjectId([
            0x65, 0xa1, 0xf0, 0xc2, 0xe4, 0xb0, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6,
        ]);
        assert_eq!(oid.to_string(), "oid:65a1f0c2e4b0a1b2c3d4e5f6");
        let same_hex_as_string = UserId::Text("65a1f0c2e4b0a1b2c3d4e5f6".into());
        let prefixed_string = UserId::Text("oid:65a1f0c2e4b0a1b2c3d4e5f6".into());
        assert_eq!(
            prefixed_string.to_string(),
            "str:oid:65a1f0c2e4b0a1b2c3d4e5f6"
        );
        for id in [
            oid,
            same_hex_as_string,
            prefixed_string,
            UserId::Text("u0000003".into()),
            UserId::Text("str:x".into()),
        ] {
            assert_eq!(UserId::parse(&id.to_string()), Ok(id.clone()), "{id}");
        }
    }

    #[test]
    fn refuses_forms_that_would_give_one_value_two_names() {
        for bad in [
            "",
            "oid:65A1F0C2E4B0A1B2C3D4E5F6",
            "oid:123",
            "oid:zz a1f0c2e4b0a1b2c3d4e5f6",
            "str:plain",
            "u\n1",
        ] {
            assert!(UserId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(UserId::parse(&"u".repeat(MAX_USER_ID_BYTES + 1)).is_err());
    }

    #[test]
    fn strings_sort_before_object_ids_as_in_mongodb() {
        assert!(UserId::Text("zzz".into()) < UserId::ObjectId([0; 12]));
        assert!(UserId::ObjectId([0; 12]) < UserId::ObjectId([1; 12]));
    }

    proptest! {
        #[test]
        fn any_string_id_round_trips(s in "\\PC{1,40}") {
            let id = UserId::Text(s);
            prop_assert_eq!(UserId::parse(&id.to_string()), Ok(id));
        }

        #[test]
        fn any_object_id_round_trips(bytes in proptest::array::uniform12(any::<u8>())) {
            let id = UserId::ObjectId(bytes);
            prop_assert_eq!(UserId::parse(&id.to_string()), Ok(id));
        }
    }
}
