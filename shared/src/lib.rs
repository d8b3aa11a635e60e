//! mailflow: a weekly personalised email pipeline on AWS Lambda.
//!
//! Five functions: GetUsers (audience -> users queue), CreateEmails (enrich + render ->
//! emails queue), SendEmail (exactly once through SES v2, guarded by a DynamoDB ledger),
//! SesEvents (bounces, complaints, deliveries back onto the ledger and the users) and
//! Unsubscribe (one-click links). `stages` holds their logic, `assemble` builds each from its
//! configuration, and the binaries in `functions/` only hand events to them.
//!
//! The arrows point down: stages -> ports and domain modules (campaign, digest, ledger,
//! messages, mime, address, user_id...) <- adapters (the only modules that talk to the AWS
//! SDKs; `digest` reads MongoDB itself). See ARCHITECTURE.md.

pub mod adapters;
pub mod address;
pub mod assemble;
pub mod campaign;
pub mod config;
pub mod digest;
pub mod ledger;
pub mod messages;
pub mod metering;
pub mod mime;
pub mod ports;
pub mod rate;
pub mod ses_events;
pub mod ses_tags;
pub mod stages;
pub mod telemetry;
pub mod unsubscribe;
pub mod user_id;
