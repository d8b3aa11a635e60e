//! mailflow: a weekly personalised email pipeline on AWS Lambda.
//!
//! Seven functions: GetUsers (audience -> users queue), CreateEmails (enrich + render ->
//! emails queue), SendEmail (exactly once through SES v2, guarded by a DynamoDB ledger),
//! SesEvents (bounces, complaints, deliveries back onto the ledger and the users),
//! Unsubscribe (one-click links), OpenContent (the pick slots: content decided at the first
//! open, live badges, counted clicks) and ReputationGuard (pauses sending on SES alarms).
//!
//! The rooms, and which way the arrows point (ARCHITECTURE.md draws the same map):
//!
//! - `domain`: the pure types and rules (address, campaign, ledger, messages, mime, digest,
//!   send rate, SES tags and events, user ids, the unsubscribe link, open-time content,
//!   guardrails, A/B experiments).
//!   Imports no SDK.
//! - `ports`: the traits the stages need from the outside world, with in-memory stand-ins
//!   for unit tests (`ports::memory`).
//! - `stages`: one per function; they see `domain`, `ports`, `config` and `runtime`, never an
//!   adapter.
//! - `adapters`: the ports on DynamoDB, SQS, SES, Lambda, Secrets Manager and MongoDB; the
//!   only users of the AWS SDKs and the MongoDB driver.
//! - `config`: every environment variable, parsed and validated at cold start.
//! - `assemble`: a function's cold start (`start`), and each stage built from its
//!   configuration with its adapters.
//! - `runtime`: what hosts a stage (telemetry, metering, the invocation, the partial-batch
//!   driver, Function URL requests, `serve`); every binary in `functions/` ends in
//!   `runtime::serve`.

pub mod adapters;
pub mod assemble;
pub mod config;
pub mod domain;
pub mod ports;
pub mod runtime;
pub mod stages;
