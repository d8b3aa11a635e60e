//! AWS's documented default limits on the send path, in one place: `mailctl plan` adds up
//! what a campaign needs against them, RateControl warns at run time, and the lab enforces
//! each in front of its in-memory ports. Each value is the documented default (the table with
//! its sources: docs/send-rate.md, "AWS's limits on the send path"); an account whose quota
//! was raised sees its own in the Service Quotas console.

/// DynamoDB serves one partition at most this many write units a second (a write of up to
/// 1 KB is one unit; a write its condition refuses is billed and counted too), and this many
/// strongly consistent reads of up to 4 KB. Not adjustable.
pub const DYNAMODB_PARTITION_WRITE_UNITS: f64 = 1_000.0;
pub const DYNAMODB_PARTITION_READ_UNITS: f64 = 3_000.0;
/// An on-demand table's default throughput quota per table (adjustable), and what a new
/// on-demand table serves at first: 4,000 writes and 12,000 reads a second, after which it
/// absorbs up to twice its previous peak within 30 minutes. A global secondary index has the
/// table's quota for itself.
pub const DYNAMODB_TABLE_WRITE_UNITS: f64 = 40_000.0;
pub const DYNAMODB_TABLE_READ_UNITS: f64 = 40_000.0;
pub const DYNAMODB_NEW_ON_DEMAND_WRITE_UNITS: f64 = 4_000.0;
pub const DYNAMODB_NEW_ON_DEMAND_READ_UNITS: f64 = 12_000.0;
/// The size of one write unit: an item's write costs ceil(size / 1 KB) units.
pub const DYNAMODB_WRITE_UNIT_BYTES: usize = 1_024;

/// Lambda's concurrent executions per account and region (adjustable), shared by every
/// function; a function scales by at most 1,000 environments every 10 seconds; an SQS event
/// source mapping on a standard queue starts with 5 pollers' worth and adds up to 300
/// environments a minute.
pub const LAMBDA_ACCOUNT_CONCURRENCY: u32 = 1_000;
/// What Lambda keeps unreserved in an account: reserved concurrency cannot take it.
pub const LAMBDA_UNRESERVED_MINIMUM: u32 = 100;
pub const SQS_MAPPING_FIRST_ENVIRONMENTS: u32 = 5;
pub const SQS_MAPPING_ENVIRONMENTS_PER_MINUTE: u32 = 300;

/// A standard SQS queue: messages received but not yet deleted (in flight), per queue. Its
/// API rate has no documented limit.
pub const SQS_IN_FLIGHT: u32 = 120_000;

/// EventBridge Scheduler's `CreateSchedule` calls a second per account and region,
/// adjustable: beyond it the call is refused (a ThrottlingException) for the rest of the
/// second. The quota page lists 1,000 in these regions and 250 in the others (its English
/// page now lists 5,000 where it listed 1,000; the lower is taken).
pub fn scheduler_creates_per_second(region: &str) -> f64 {
    match region {
        "us-east-1" | "us-east-2" | "us-west-2" | "ap-northeast-1" | "ap-south-1"
        | "ap-southeast-1" | "ap-southeast-2" | "eu-central-1" | "eu-west-1" | "eu-west-2"
        | "sa-east-1" => 1_000.0,
        _ => 250.0,
    }
}

/// EventBridge's invocations a second (an event matched by a rule, delivered to one target)
/// per account and region, adjustable: beyond it deliveries are delayed (retried for up to
/// 24 hours), not dropped.
pub fn eventbridge_invocations_per_second(region: &str) -> f64 {
    match region {
        "us-east-1" | "us-west-2" | "eu-west-1" => 18_750.0,
        "us-east-2" | "eu-central-1" => 4_500.0,
        "us-west-1" | "ap-northeast-1" | "ap-southeast-1" | "ap-southeast-2" | "eu-west-2" => {
            2_250.0
        }
        "af-south-1" | "ap-northeast-3" | "ap-southeast-3" | "eu-south-1" => 750.0,
        _ => 1_100.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventbridge_invocations_are_the_documented_figure_of_the_region() {
        assert_eq!(eventbridge_invocations_per_second("us-east-1"), 18_750.0);
        assert_eq!(eventbridge_invocations_per_second("eu-central-1"), 4_500.0);
        assert_eq!(eventbridge_invocations_per_second("af-south-1"), 750.0);
        assert_eq!(eventbridge_invocations_per_second("ca-central-1"), 1_100.0);
    }
}
