//! The pure types and rules of the product: no AWS SDK, no MongoDB driver, no I/O.

pub mod address;
pub mod campaign;
pub mod digest;
pub mod ledger;
pub mod messages;
pub mod mime;
pub mod send_rate;
pub mod ses_event;
pub mod ses_tags;
pub mod unsubscribe_link;
pub mod user_id;
