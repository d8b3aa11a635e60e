//! What the user directory on MongoDB (`mongo_directory`) reads besides a definition's own
//! queries: the audience's merge join with the users (`audience`), the follows no user can
//! be found through, and the cold-start index check. The collections, their fields and the
//! indexes are named in `adapters::mongo`.

mod audience;

pub use audience::IdType;
pub(crate) use audience::{odd_follows, users_cursor, Join, Pass, CURSOR_BATCH};

use super::mongo::{follows_index_keys, FOLLOWS};
use crate::domain::campaign::Window;
use crate::ports::StoreError;
use mongodb::bson::doc;
use mongodb::Database;

/// What the functions do at cold start: one listIndexes. A missing index fails them with
/// what to run, rather than have a cold start build it on a collection of millions.
pub async fn check_indexes(db: &Database) -> Result<(), StoreError> {
    use futures::TryStreamExt;
    let wanted = follows_index_keys();
    let found = match db
        .collection::<mongodb::bson::Document>(FOLLOWS)
        .list_indexes()
        .await
    {
        Ok(cursor) => cursor
            .try_collect::<Vec<_>>()
            .await
            .map_err(StoreError::from)?
            .iter()
            .any(|index| index.keys == wanted),
        // No follows collection yet: no index either.
        Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 26) => {
            false
        }
        Err(e) => return Err(e.into()),
    };
    if found {
        return Ok(());
    }
    Err(StoreError::mongo(format!(
        "the index {wanted} on {}.{FOLLOWS} is missing: the digest's audience and data queries need it; create it before a campaign with `mailctl create-indexes` (see docs/deploying.md) or as `db.{FOLLOWS}.createIndex({wanted})`",
        db.name()
    )))
}

pub(crate) fn bson_time(t: time::OffsetDateTime) -> mongodb::bson::DateTime {
    mongodb::bson::DateTime::from_millis((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn window_filter(window: &Window) -> mongodb::bson::Document {
    doc! { "$gte": bson_time(window.since), "$lt": bson_time(window.until) }
}
