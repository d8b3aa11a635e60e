//! Each limit the campaign meets: what it needs, what the account has, what to raise.

use super::{Account, Demand};
use crate::domain::aws_limits::{
    eventbridge_invocations_per_second, DYNAMODB_PARTITION_WRITE_UNITS, SQS_IN_FLIGHT,
};
use crate::domain::ledger::{CAMPAIGN_SHARDS, INDEX_KEY_BURST};

/// One limit: what the campaign needs of it, what the account has, and what to raise.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub limit: &'static str,
    pub needed: f64,
    pub available: f64,
    pub raise: &'static str,
}

impl Check {
    pub fn binds(&self) -> bool {
        self.needed > self.available
    }

    /// Needed over available.
    pub fn share(&self) -> f64 {
        self.needed / self.available.max(f64::MIN_POSITIVE)
    }
}

/// Every limit the campaign of `emails` (none: its size unknown) at `demand` meets.
pub fn checks(demand: &Demand, account: &Account, emails: Option<f64>) -> Vec<Check> {
    let rate = demand.rate.max(0.0);
    let (writes, index_writes) = demand.writes();
    // The functions without reserved concurrency share what the account leaves unreserved;
    // unread, all of them and the reservations share its concurrency.
    let lambda = match account.lambda_unreserved {
        Some(left) => Check {
            limit: "Lambda unreserved concurrent executions",
            needed: f64::from(demand.unreserved()),
            available: f64::from(left),
            raise: "Lambda's concurrent executions in Service Quotas (or fewer reserved elsewhere in the region), or a lower SendRatePerSecond",
        },
        None => Check {
            limit: "Lambda concurrent executions",
            needed: f64::from(demand.unreserved() + demand.reserved),
            available: f64::from(account.lambda_concurrency),
            raise: "Lambda's concurrent executions in Service Quotas, or a lower SendRatePerSecond",
        },
    };
    let mut out = vec![
        lambda,
        Check {
            limit: "sends table write units/s",
            needed: writes,
            available: account.sends_table_write_units,
            raise: "DynamoDB's table-level write throughput quota (Service Quotas), or the table's provisioned or maximum on-demand writes",
        },
        Check {
            limit: "campaign index write units/s",
            needed: index_writes,
            available: account.sends_index_write_units,
            raise: "the index's write throughput quota (Service Quotas), as the table's",
        },
        Check {
            limit: "campaign index partition write units/s",
            // In the busiest second, as SesEvents catches up with its events.
            needed: index_writes / CAMPAIGN_SHARDS as f64 * INDEX_KEY_BURST,
            available: DYNAMODB_PARTITION_WRITE_UNITS,
            raise: "not adjustable: more campaign shards, or a lower SendRatePerSecond",
        },
        Check {
            limit: "EventBridge invocations/s",
            needed: rate * demand.events_per_email,
            available: eventbridge_invocations_per_second(&account.region),
            raise: "EventBridge's invocations quota in Service Quotas (beyond it SES's events are delayed)",
        },
        Check {
            limit: "SQS messages in flight",
            needed: f64::from(demand.in_flight),
            available: f64::from(SQS_IN_FLIGHT),
            raise: "not adjustable: smaller batches or fewer environments",
        },
    ];
    if let Some(max) = account.ses_max_send_rate {
        out.push(Check {
            limit: "SES maximum send rate",
            needed: rate,
            available: max,
            raise: "SES's sending quota (a request to AWS), or a lower SendRatePerSecond",
        });
    }
    if let (Some(left), Some(emails)) = (account.ses_left_24_hours, emails) {
        out.push(Check {
            limit: "SES 24-hour quota left",
            needed: emails,
            available: left,
            raise: "SES's daily sending quota; the rest waits for the window to roll",
        });
    }
    out
}

/// The limit that binds hardest (the largest share above 1), if any.
pub fn binding(checks: &[Check]) -> Option<&Check> {
    checks
        .iter()
        .filter(|c| c.binds())
        .max_by(|a, b| a.share().total_cmp(&b.share()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::capacity::test_demand as demand;

    #[test]
    fn the_limit_that_binds_is_named_with_what_to_raise() {
        // 20,000/s in us-east-1 with SesEvents at 128 MB: 494 environments fit the account;
        // the sends table's default 40,000 write units do not (60,200 needed), and its
        // sparse index just over (40,200: the mark and the delivery note), 314 units a
        // second on each of its 128 partitions, 471 in the busiest second, within their
        // 1,000.
        let account = Account::defaults("us-east-1");
        let all = checks(&demand(20_000.0, 266), &account, None);
        let lambda = &all[0];
        assert_eq!((lambda.needed, lambda.binds()), (494.0, false));
        assert_eq!(all[1].needed.round(), 60_200.0);
        assert_eq!(all[2].needed.round(), 40_200.0);
        assert_eq!(all[3].needed.round(), 471.0);
        assert!(all[1].binds() && all[2].binds() && !all[3].binds());
        assert_eq!(binding(&all).unwrap().limit, "sends table write units/s");
        // The quota raised to 80,000 (docs/deploying.md): EventBridge binds then.
        let raised = Account {
            sends_table_write_units: 80_000.0,
            ..Account::defaults("us-east-1")
        };
        let after = checks(&demand(20_000.0, 266), &raised, None);
        assert_eq!(binding(&after).unwrap().limit, "EventBridge invocations/s");
        // EventBridge: 20,200 invocations/s against us-east-1's 18,750; 1,100 elsewhere.
        assert!(all[4].binds());
        let elsewhere = checks(
            &demand(2_000.0, 30),
            &Account::defaults("ca-central-1"),
            None,
        );
        assert_eq!(
            binding(&elsewhere).unwrap().limit,
            "EventBridge invocations/s"
        );
        // A small campaign binds nothing; SES's quota and the day's left are checked once read.
        let mut read = Account::defaults("us-east-1");
        read.ses_max_send_rate = Some(14.0);
        read.ses_left_24_hours = Some(50_000.0);
        let small = checks(&demand(14.0, 2), &read, Some(40_000.0));
        assert_eq!(binding(&small), None, "{small:?}");
        let big = checks(&demand(14.0, 2), &read, Some(60_000.0));
        assert_eq!(binding(&big).unwrap().limit, "SES 24-hour quota left");
        // An account of 400 concurrent executions binds at 20,000/s with these mappings.
        read.lambda_concurrency = 400;
        let lambda = &checks(&demand(20_000.0, 266), &read, None)[0];
        assert!(lambda.binds() && lambda.share() > 1.2);
    }

    #[test]
    fn what_is_left_unreserved_is_what_the_unreserved_functions_share() {
        // Read: SendEmail, CreateEmails, SesEvents, GetUsers and ReputationGuard (92 + 38 +
        // 266 + 2) against what the account leaves them; another stack's reservations leave 300.
        let mut account = Account::defaults("us-east-1");
        account.lambda_unreserved = Some(903);
        let lambda = &checks(&demand(20_000.0, 266), &account, None)[0];
        assert_eq!(
            (lambda.limit, lambda.needed, lambda.binds()),
            ("Lambda unreserved concurrent executions", 398.0, false)
        );
        account.lambda_unreserved = Some(300);
        let lambda = &checks(&demand(20_000.0, 266), &account, None)[0];
        assert!(lambda.binds(), "{lambda:?}");
    }
}
