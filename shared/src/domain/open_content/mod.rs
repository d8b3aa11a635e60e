//! Content decided when the email is opened (the OpenContent function): each email carries
//! `N` pick slots, each an image URL and a link URL. The first request of an email chooses
//! its picks and freezes them; every later request, from any client, sees the same ones. Each
//! pick has a live badge ("hot", "popular" or none) decided at request time from the clicks.
//!
//! - `slot_token`: the opaque, signed slot URLs (no user id or address in clear).
//! - `picks`: what a pick is, how the picks of one email are chosen and frozen.
//! - `badge`: the badge rule.
//! - `people`: how many people clicked a pick, without a record of who (a sketch).
//! - `visitor`: who is asking (a person, an image proxy, a link scanner) and what counts.
//! - `counts`: what is counted per campaign.
//! - `card`: the images (PNG, drawn here: a pick's card, the badges, the fallback) and the
//!   languages they speak.

pub mod badge;
pub mod card;
pub mod counts;
pub mod people;
pub mod picks;
pub mod slot_token;
pub mod visitor;

pub use badge::{Badge, BadgeRule};
pub use card::Language;
pub use counts::{OpenCount, OpenCounters};
pub use people::{Mark, Sketch};
pub use picks::{FreezeClaim, Pick, Picks};
pub use slot_token::{SlotRef, SlotSealer, SlotUrls};
pub use visitor::{ClickVerdict, Visitor};
