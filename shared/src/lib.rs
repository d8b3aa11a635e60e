//! mailflow: a weekly personalised email pipeline on AWS Lambda.
//!
//! Eight functions: GetUsers (audience -> users queue, local time's holds and releases),
//! CreateEmails (read + render -> emails queue), SendEmail (exactly once through SES v2,
//! guarded by a DynamoDB ledger), SesEvents (bounces, complaints, deliveries back onto the
//! ledger and the users), Unsubscribe (the preference centre and one-click links; its stage
//! is `stages::preferences`), OpenContent (the pick slots: content decided at the first open,
//! live badges, counted clicks), ReputationGuard (pauses sending on SES alarms) and
//! RateControl (once a minute: reads SES's quota, writes the send-rate ceiling into the rate
//! item SendEmail paces under, and sizes SendEmail's and CreateEmails' event source mappings
//! to that rate).
//!
//! The rooms, and which way the arrows point (ARCHITECTURE.md draws the same map):
//!
//! - `domain`: the pure types and rules: `delivery` (when and whether a user gets an email,
//!   the one rule GetUsers, SendEmail and `mailctl plan` call), `campaign`, `campaign_start`,
//!   `campaign_state`, `ledger`, `messages`, `user_id`, `address`, `mime`, `ses_tags`,
//!   `ses_event`, `digest`, `text`, `signing`, `unsubscribe_link`, `topics`, `send_rate`,
//!   `fan_out`, `local_time`, `guardrails`, `experiment`, `open_content`, `public_urls`.
//!   Imports no other room and no SDK.
//! - `ports`: the traits the stages need from the outside world, one file per port, with
//!   in-memory stand-ins for unit tests (`ports::memory`).
//! - `stages`: one per function; they see `domain`, `ports`, `config` and `runtime`, never an
//!   adapter.
//! - `adapters`: the ports on DynamoDB, SQS, SES, Lambda, EventBridge Scheduler, Secrets
//!   Manager and MongoDB; the only users of the AWS SDKs and the MongoDB driver.
//! - `config`: every environment variable, parsed and validated at cold start.
//! - `assemble`: a function's cold start (`start`), and each stage built from its
//!   configuration with its adapters.
//! - `runtime`: what hosts a stage (telemetry, a failed init, the clock, metering, metrics,
//!   the invocation, the partial-batch driver, Function URL requests, `serve`); every binary
//!   in `functions/` ends in `runtime::serve`.

pub mod adapters;
pub mod assemble;
pub mod config;
pub mod domain;
pub mod ports;
pub mod runtime;
pub mod stages;
