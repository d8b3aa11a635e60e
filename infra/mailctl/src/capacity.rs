//! What `plan` adds up against the account's limits (`domain::capacity`): the account read
//! where the stack's credentials allow (Lambda's concurrency, the sends table's warm
//! throughput), AWS's defaults where not, and the lines that say which limit binds.

use mailflow::domain::capacity::{binding, Account, Check};

/// The account as far as the stack's credentials can read it: Lambda's concurrent
/// executions (`GetAccountSettings`) and the sends table's warm write throughput
/// (`DescribeTable`), each AWS's default where it cannot be read.
pub async fn account(sdk: &aws_config::SdkConfig, sends_table: &str) -> Account {
    let mut account = Account::defaults(sdk.region().map_or("", |r| r.as_ref()));
    // Not allowed or not answered: the default stands.
    let settings = aws_sdk_lambda::Client::new(sdk)
        .get_account_settings()
        .send()
        .await;
    if let Some(limit) = settings.as_ref().ok().and_then(|s| s.account_limit()) {
        account.lambda_concurrency = u32::try_from(limit.concurrent_executions()).unwrap_or(0);
    }
    let table = aws_sdk_dynamodb::Client::new(sdk)
        .describe_table()
        .table_name(sends_table)
        .send()
        .await;
    let warm = (table.as_ref().ok())
        .and_then(|t| t.table())
        .and_then(|t| t.warm_throughput())
        .and_then(|w| w.write_units_per_second());
    if let Some(units) = warm.filter(|u| *u > 0) {
        account.sends_table_write_units = units as f64;
    }
    account
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
            reserved: 97,
            events_per_email: 1.01,
            in_flight: 20,
        };
        let text = describe_plan(&checks(&demand, &account, None));
        assert!(
            text.contains("Lambda concurrent executions: 103 / 50  EXCEEDED"),
            "{text}"
        );
        assert!(
            text.contains("binding limit: Lambda concurrent executions (103 needed, 50 available): raise Lambda's concurrent executions"),
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
