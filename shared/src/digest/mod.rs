//! The campaign's content: who gets it (audience), what they get (enrichment) and how it
//! looks (rendering). This is the one module a team replaces to send its own weekly email;
//! the stages around it only need `Audience`, `enrich` and `Renderer`.
//!
//! Data model (MongoDB): `users {_id, email, name, subscribed: bool, locale?, suppression?}`
//! and `follows {followerId, followeeId, createdAt: date}`, where every id is a string or an
//! ObjectId (`crate::user_id` says how they travel outside MongoDB).

mod audience;
mod enrich;
pub mod ids;
mod render;

pub use audience::{Audience, IdType, OddFollow};
pub use enrich::{enrich, Digest, Enrichment, SkipReason};
pub use render::{RenderError, Rendered, Renderer, LOCALES};

use mongodb::bson::doc;
use mongodb::{Database, IndexModel};

pub const USERS: &str = "users";
pub const FOLLOWS: &str = "follows";
/// Serves both the audience scan (followees in id order, window on createdAt) and the
/// per-user enrichment (one followee's newest follows in the window).
pub const FOLLOWS_INDEX: &str = "followeeId_1_createdAt_1";

fn follows_index_keys() -> mongodb::bson::Document {
    doc! { "followeeId": 1, "createdAt": 1 }
}

/// Creates the indexes the queries rely on (idempotent; cheap when they exist).
pub async fn ensure_indexes(db: &Database) -> mongodb::error::Result<()> {
    let index = IndexModel::builder()
        .keys(follows_index_keys())
        .options(
            mongodb::options::IndexOptions::builder()
                .name(FOLLOWS_INDEX.to_string())
                .build(),
        )
        .build();
    let started = std::time::Instant::now();
    db.collection::<mongodb::bson::Document>(FOLLOWS)
        .create_index(index)
        .await?;
    // Part of every cold start of GetUsers and CreateEmails: worth seeing in the logs.
    tracing::info!(
        duration_ms = started.elapsed().as_millis() as u64,
        "follows index ensured"
    );
    Ok(())
}

fn bson_time(t: time::OffsetDateTime) -> mongodb::bson::DateTime {
    mongodb::bson::DateTime::from_millis((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn window_filter(window: &crate::campaign::Window) -> mongodb::bson::Document {
    doc! { "$gte": bson_time(window.since), "$lt": bson_time(window.until) }
}
