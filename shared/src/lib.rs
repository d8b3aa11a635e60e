//! mailflow: a weekly personalised email pipeline on AWS Lambda.
//!
//! GetUsers (audience -> users queue), CreateEmails (enrich + render -> emails queue) and
//! SendEmail (exactly once through SES v2, guarded by a DynamoDB ledger). The binaries in
//! `functions/` only wire these stages to the Lambda runtime.

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
