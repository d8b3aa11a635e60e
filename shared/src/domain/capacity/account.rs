//! What the account allows, as read or AWS's defaults.

use crate::domain::aws_limits::{DYNAMODB_TABLE_WRITE_UNITS, LAMBDA_ACCOUNT_CONCURRENCY};

/// What the account allows: read from it where the stack's credentials can, else AWS's
/// defaults (`Account::defaults`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub region: String,
    pub lambda_concurrency: u32,
    /// The pool the functions without reserved concurrency share (SendEmail, CreateEmails,
    /// SesEvents, GetUsers, ReputationGuard, and every other unreserved function in the
    /// region): the account's concurrency less every reservation, this stack's and any
    /// other's. When read, the check is against it.
    pub lambda_unreserved: Option<u32>,
    /// The most write units a second the sends table takes: DynamoDB's per-table quota, or
    /// less where the table is provisioned or has an on-demand maximum.
    pub sends_table_write_units: f64,
    /// The same for its campaign index (the per-table quota applies to each index too).
    pub sends_index_write_units: f64,
    /// What the table and its index serve at once, before DynamoDB scales them (their warm
    /// throughput), when read: not a ceiling (on demand, DynamoDB serves up to twice the
    /// previous peak at once and scales beyond it within 30 minutes), but a campaign that
    /// needs more starts throttled (`warm_up`).
    pub sends_table_warm_write_units: Option<f64>,
    pub sends_index_warm_write_units: Option<f64>,
    /// SES's maximum send rate and what is left of its 24-hour quota, when read.
    pub ses_max_send_rate: Option<f64>,
    pub ses_left_24_hours: Option<f64>,
    /// Which of the limits above were read from the account this time (`LAMBDA_CONCURRENCY`,
    /// `TABLE_QUOTA`, `SENDS_TABLE_THROUGHPUT`).
    pub read: Vec<&'static str>,
    /// Which stand at an earlier read, this one not answered (or, for DynamoDB's quota,
    /// not asked: `DescribeLimits` throttles callers of more than one a minute). The others
    /// are AWS's defaults.
    pub earlier: Vec<&'static str>,
}

impl Account {
    pub const LAMBDA_CONCURRENCY: &'static str = "lambda concurrency";
    pub const TABLE_QUOTA: &'static str = "dynamodb per-table write quota";
    pub const SENDS_TABLE_THROUGHPUT: &'static str = "sends table throughput";

    pub fn defaults(region: &str) -> Self {
        Self {
            region: region.to_owned(),
            lambda_concurrency: LAMBDA_ACCOUNT_CONCURRENCY,
            lambda_unreserved: None,
            sends_table_write_units: DYNAMODB_TABLE_WRITE_UNITS,
            sends_index_write_units: DYNAMODB_TABLE_WRITE_UNITS,
            sends_table_warm_write_units: None,
            sends_index_warm_write_units: None,
            ses_max_send_rate: None,
            ses_left_24_hours: None,
            read: Vec::new(),
            earlier: Vec::new(),
        }
    }
}
