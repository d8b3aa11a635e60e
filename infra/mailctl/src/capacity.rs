//! What `plan` adds up against the account's limits (`domain::capacity`): the account read
//! where the stack's credentials allow (Lambda's concurrency, DynamoDB's per-table quota,
//! the sends table's own throughput), AWS's defaults where not, and the lines that say
//! which limit binds and which were read.

use mailflow::domain::capacity::{binding, Account, Check};

/// The account as far as the stack's credentials can read it
/// (`mailflow::adapters::account`), each AWS's default where it cannot be read.
pub async fn account(sdk: &aws_config::SdkConfig, sends_table: &str) -> Account {
    use mailflow::ports::AccountLimits;
    mailflow::adapters::account::AwsAccount::new(sdk, sends_table)
        .read()
        .await
}

/// The plan's limits: one line each, what binds marked, then which binds hardest and what
/// to raise.
pub fn describe_plan(limits: &[Check]) -> String {
    let mut out = String::from("AWS limits at the rate (needed / available):\n");
    for check in limits {
        out.push_str(&format!(
            "  {}: {:.0} / {:.0}{}\n",
            check.limit,
            check.needed,
            check.available,
            if check.binds() { "  EXCEEDED" } else { "" }
        ));
    }
    match binding(limits) {
        Some(check) => out.push_str(&format!(
            "binding limit: {} ({:.0} needed, {:.0} available): raise {}\n",
            check.limit, check.needed, check.available, check.raise
        )),
        None => out.push_str("no AWS limit binds at this rate\n"),
    }
    out
}

/// Which of the account's limits were read and which are AWS's defaults: a plan after a
/// quota raise that still says EXCEEDED says why.
pub fn describe_account(account: &Account) -> String {
    if account.read.is_empty() {
        return "account limits: none read (the credentials may not allow \
                lambda:GetAccountSettings, dynamodb:DescribeLimits and dynamodb:DescribeTable), \
                AWS's defaults used\n"
            .into();
    }
    format!(
        "account limits read: {}; the others are AWS's defaults\n",
        account.read.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailflow::domain::capacity::checks;

    #[test]
    fn the_plan_names_the_binding_limit_and_what_to_raise() {
        let mut account = Account::defaults("ca-central-1");
        account.lambda_concurrency = 50;
        let demand = mailflow::domain::capacity::Demand {
            rate: 14.0,
            send_email: 2,
            create_emails: 2,
            ses_events: 2,
            reserved: 96,
            events_per_email: 1.01,
            in_flight: 20,
        };
        let text = describe_plan(&checks(&demand, &account, None));
        assert!(
            text.contains("Lambda concurrent executions: 104 / 50  EXCEEDED"),
            "{text}"
        );
        assert!(
            text.contains("binding limit: Lambda concurrent executions (104 needed, 50 available): raise Lambda's concurrent executions"),
            "{text}"
        );
        account.lambda_concurrency = 1_000;
        let text = describe_plan(&checks(&demand, &account, None));
        assert!(
            text.ends_with("no AWS limit binds at this rate\n"),
            "{text}"
        );
    }
}
