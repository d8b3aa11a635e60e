//! Dollars per million emails from measured request counts and durations.
//!
//! Prices: AWS list prices, us-east-1, standard tiers past the free tier, as published on
//! the services' pricing pages (aws.amazon.com/<service>/pricing) and last read in 2025;
//! check them before budgeting. Lambda bills the init phase as well as invocations.

use serde::Serialize;
use std::collections::BTreeMap;

/// Lambda on arm64: per GB-second of billed duration.
pub const LAMBDA_ARM64_PER_GB_SECOND: f64 = 0.000_013_333_4;
/// Lambda: per invocation.
pub const LAMBDA_PER_REQUEST: f64 = 0.20 / 1e6;
/// SQS standard queue: per request (each 64 KiB chunk of payload is one request).
pub const SQS_PER_REQUEST: f64 = 0.40 / 1e6;
/// DynamoDB on-demand: per write request unit (1 KiB) and per read request unit (4 KiB,
/// strongly consistent; an eventually consistent read costs half).
pub const DYNAMODB_PER_WRITE_UNIT: f64 = 0.625 / 1e6;
pub const DYNAMODB_PER_READ_UNIT: f64 = 0.125 / 1e6;
/// SES outbound email: per message.
pub const SES_PER_EMAIL: f64 = 0.10 / 1e3;
/// CloudWatch Logs ingestion: per GB.
pub const CLOUDWATCH_LOGS_PER_GB: f64 = 0.50;

/// What one email costs in requests and compute, averaged over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PerEmail {
    /// Billable SQS requests (64 KiB chunks), the event source mappings' polling included.
    pub sqs_requests: f64,
    /// DynamoDB write and read request units (our items are under 1 KiB: one unit each).
    pub dynamodb_write_units: f64,
    pub dynamodb_read_units: f64,
    pub ses_emails: f64,
    pub lambda_invocations: f64,
    /// Billed Lambda duration × memory, in GB-seconds.
    pub lambda_gb_seconds: f64,
    pub log_bytes: f64,
}

/// Dollars per one million emails, by service.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostPerMillion {
    pub lambda: f64,
    pub sqs: f64,
    pub dynamodb: f64,
    pub ses: f64,
    pub logs: f64,
    pub total: f64,
    pub total_without_ses: f64,
}

impl PerEmail {
    pub fn cost_per_million(&self) -> CostPerMillion {
        let m = 1e6;
        let lambda = m
            * (self.lambda_invocations * LAMBDA_PER_REQUEST
                + self.lambda_gb_seconds * LAMBDA_ARM64_PER_GB_SECOND);
        let sqs = m * self.sqs_requests * SQS_PER_REQUEST;
        let dynamodb = m
            * (self.dynamodb_write_units * DYNAMODB_PER_WRITE_UNIT
                + self.dynamodb_read_units * DYNAMODB_PER_READ_UNIT);
        let ses = m * self.ses_emails * SES_PER_EMAIL;
        let logs = m * self.log_bytes / 1e9 * CLOUDWATCH_LOGS_PER_GB;
        let total_without_ses = lambda + sqs + dynamodb + logs;
        CostPerMillion {
            lambda,
            sqs,
            dynamodb,
            ses,
            logs,
            total: total_without_ses + ses,
            total_without_ses,
        }
    }
}

/// DynamoDB operations that write one item, and those that read one.
const DYNAMODB_WRITES: [&str; 4] = ["PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"];
const DYNAMODB_READS: [&str; 2] = ["GetItem", "Query"];

/// Billable units from the metered request counts (`service.Operation` keys, SQS chunks
/// under `#64KiB` keys): (SQS requests, DynamoDB writes, DynamoDB reads, SES emails).
pub fn billable_units(requests: &BTreeMap<String, u64>) -> (u64, u64, u64, u64) {
    let (mut sqs, mut writes, mut reads, mut ses) = (0, 0, 0, 0);
    for (key, n) in requests {
        let Some((service, operation)) = key.split_once('.') else {
            continue;
        };
        match service {
            "sqs" if operation.ends_with(mailflow::runtime::metering::SQS_CHUNKS_SUFFIX) => {
                sqs += n
            }
            "dynamodb" if DYNAMODB_WRITES.contains(&operation) => writes += n,
            "dynamodb" if DYNAMODB_READS.contains(&operation) => reads += n,
            "sesv2" if operation == "SendEmail" => ses += n,
            _ => {}
        }
    }
    (sqs, writes, reads, ses)
}

/// The seed article's design, per email, for comparison: GetUsers sends one SendMessage
/// per user; CreateEmails (batches of 10) one SendMessage per email; SendEmail takes
/// batches of 3, reads the record before it writes it (GetItem, PutItem, then UpdateItem
/// when sent); each SendEmail invocation lasts the article's 0.5 s. The event source
/// mappings receive and delete once per batch.
pub fn seed_design(memory_mb: f64) -> PerEmail {
    let per_batch = |size: f64| 2.0 / size; // ReceiveMessage + DeleteMessageBatch
    PerEmail {
        sqs_requests: 1.0 + per_batch(10.0) + 1.0 + per_batch(3.0),
        dynamodb_write_units: 2.0,
        dynamodb_read_units: 1.0,
        ses_emails: 1.0,
        lambda_invocations: 1.0 / 10.0 + 1.0 / 3.0,
        lambda_gb_seconds: (0.5 / 3.0) * memory_mb / 1024.0,
        log_bytes: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ses_dominates_and_units_add_up() {
        let one = PerEmail {
            ses_emails: 1.0,
            sqs_requests: 1.0,
            dynamodb_write_units: 2.0,
            ..Default::default()
        };
        let cost = one.cost_per_million();
        assert!((cost.ses - 100.0).abs() < 1e-9);
        assert!((cost.sqs - 0.40).abs() < 1e-9);
        assert!((cost.dynamodb - 1.25).abs() < 1e-9);
        assert!((cost.total - 101.65).abs() < 1e-9);
    }

    #[test]
    fn units_come_from_the_metered_keys() {
        let requests = BTreeMap::from([
            ("sqs.SendMessageBatch".to_string(), 10),
            ("sqs.SendMessageBatch#64KiB".to_string(), 12),
            ("dynamodb.PutItem".to_string(), 100),
            ("dynamodb.UpdateItem".to_string(), 100),
            ("sesv2.SendEmail".to_string(), 100),
            ("mongodb.find".to_string(), 7),
        ]);
        assert_eq!(billable_units(&requests), (12, 200, 0, 100));
    }

    #[test]
    fn the_seed_design_makes_more_requests_per_email() {
        let seed = seed_design(128.0);
        assert!(seed.sqs_requests > 2.8 && seed.dynamodb_read_units == 1.0);
    }
}
