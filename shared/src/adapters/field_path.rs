//! Dotted field paths (`contact.email`) read from a document as MongoDB's projection would,
//! for the definitions' recipients, whose fields a team names rather than we.

use mongodb::bson::{Bson, Document};

/// What a dotted path finds in a document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<'a> {
    /// No such field (or an ancestor is missing or null).
    Missing,
    Value(&'a Bson),
    /// An ancestor is neither a document nor null: the path cannot be read through it
    /// (`at` is the ancestor's path, `found` its value).
    Blocked {
        at: &'a str,
        found: &'a Bson,
    },
}

impl<'a> Field<'a> {
    /// The value, with a missing field and one behind a wrong type as None.
    pub fn value(self) -> Option<&'a Bson> {
        match self {
            Self::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// The field at `path` in `doc`.
pub fn get<'a>(doc: &'a Document, path: &'a str) -> Field<'a> {
    let mut current = doc;
    let mut consumed = 0;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        let Some(value) = current.get(segment) else {
            return Field::Missing;
        };
        consumed += segment.len();
        if segments.peek().is_none() {
            return Field::Value(value);
        }
        match value {
            Bson::Document(inner) => current = inner,
            Bson::Null => return Field::Missing,
            found => {
                return Field::Blocked {
                    at: &path[..consumed],
                    found,
                }
            }
        }
        consumed += 1;
    }
    Field::Missing
}

/// A projection of `paths` that MongoDB accepts: a path under another one is covered by it
/// (projecting both is a "path collision" error), duplicates are dropped.
pub fn projection<'a>(paths: impl IntoIterator<Item = &'a str>) -> Document {
    let mut paths: Vec<&str> = paths.into_iter().collect();
    paths.sort_unstable();
    paths.dedup();
    let covered = |p: &str, by: &str| {
        p.len() > by.len() && p.starts_with(by) && p.as_bytes()[by.len()] == b'.'
    };
    let kept: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| !paths.iter().any(|other| covered(p, other)))
        .collect();
    kept.into_iter()
        .map(|p| (p.to_owned(), Bson::Int32(1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn paths_read_nested_fields_and_name_what_blocks_them() {
        let user = doc! { "contact": { "email": "a@example.com" }, "prefs": "x", "gone": null };
        assert_eq!(
            get(&user, "contact.email"),
            Field::Value(&Bson::String("a@example.com".into()))
        );
        assert_eq!(get(&user, "contact.phone"), Field::Missing);
        assert_eq!(get(&user, "gone.lang"), Field::Missing);
        assert_eq!(
            get(&user, "prefs.lang"),
            Field::Blocked {
                at: "prefs",
                found: &Bson::String("x".into())
            }
        );
        assert_eq!(get(&user, "nothing"), Field::Missing);
        assert_eq!(
            projection(["contact.email", "contact", "name", "name", "contactx"]),
            doc! { "contact": 1, "contactx": 1, "name": 1 }
        );
    }
}
