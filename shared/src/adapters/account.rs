//! The account's limits read from AWS: Lambda's concurrent executions
//! (`GetAccountSettings`), DynamoDB's per-table write quota (`DescribeLimits`) and the sends
//! table's own throughput (`DescribeTable`: provisioned or maximum on-demand writes, its
//! campaign index's, and its warm throughput).
//!
//! Each read is bounded in time (RateControl runs it last, within its own 30 s) and made at
//! once with the others. One that fails or times out is logged and stands at what this
//! environment last read, or AWS's default before any read.

use crate::adapters::sends::CAMPAIGN_INDEX;
use crate::domain::capacity::Account;
use crate::ports::AccountLimits;
use futures::future::BoxFuture;
use std::sync::Mutex;
use std::time::Duration;

/// How long one read may take before its default stands.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

pub struct AwsAccount {
    lambda: aws_sdk_lambda::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    sends_table: String,
    region: String,
    last: Mutex<LastRead>,
}

/// What each source last answered in this environment.
#[derive(Clone, Copy, Default)]
struct LastRead {
    lambda: Option<Concurrency>,
    table_quota: Option<f64>,
    table: Option<TableThroughput>,
}

#[derive(Clone, Copy)]
struct Concurrency {
    total: u32,
    unreserved: Option<u32>,
}

/// The sends table's own throughput: a ceiling below the quota where one is set (provisioned
/// units, or an on-demand maximum), for the table and for its campaign index.
#[derive(Clone, Copy)]
struct TableThroughput {
    table_ceiling: Option<f64>,
    index_ceiling: Option<f64>,
    warm: Option<f64>,
}

impl AwsAccount {
    pub fn new(sdk: &aws_config::SdkConfig, sends_table: &str) -> Self {
        Self {
            lambda: aws_sdk_lambda::Client::new(sdk),
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            sends_table: sends_table.to_owned(),
            region: sdk.region().map_or("", |r| r.as_ref()).to_owned(),
            last: Mutex::default(),
        }
    }

    async fn concurrency(&self) -> Option<Concurrency> {
        let settings = within(
            "Lambda's account settings",
            self.lambda.get_account_settings().send(),
        )
        .await?;
        let limit = settings.account_limit()?;
        let positive = |n: i32| u32::try_from(n).ok().filter(|n| *n > 0);
        Some(Concurrency {
            total: positive(limit.concurrent_executions())?,
            unreserved: limit
                .unreserved_concurrent_executions()
                .and_then(|n| u32::try_from(n).ok()),
        })
    }

    async fn table_quota(&self) -> Option<f64> {
        let limits = within("DynamoDB's limits", self.dynamodb.describe_limits().send()).await?;
        limits
            .table_max_write_capacity_units()
            .filter(|u| *u > 0)
            .map(|u| u as f64)
    }

    async fn table(&self) -> Option<TableThroughput> {
        let described = within(
            "the sends table",
            (self.dynamodb.describe_table())
                .table_name(&self.sends_table)
                .send(),
        )
        .await?;
        let table = described.table()?;
        let index = (table.global_secondary_indexes().iter())
            .find(|i| i.index_name() == Some(CAMPAIGN_INDEX));
        Some(TableThroughput {
            table_ceiling: ceiling(
                table
                    .provisioned_throughput()
                    .and_then(|p| p.write_capacity_units()),
                table
                    .on_demand_throughput()
                    .and_then(|o| o.max_write_request_units()),
            ),
            index_ceiling: index.and_then(|i| {
                ceiling(
                    i.provisioned_throughput()
                        .and_then(|p| p.write_capacity_units()),
                    i.on_demand_throughput()
                        .and_then(|o| o.max_write_request_units()),
                )
            }),
            warm: (table.warm_throughput())
                .and_then(|w| w.write_units_per_second())
                .filter(|u| *u > 0)
                .map(|u| u as f64),
        })
    }
}

/// A table's or index's own write ceiling: its provisioned units (an on-demand table reports
/// 0), else its on-demand maximum (-1 or absent: none).
fn ceiling(provisioned: Option<i64>, on_demand_max: Option<i64>) -> Option<f64> {
    (provisioned.filter(|u| *u > 0))
        .or(on_demand_max.filter(|u| *u > 0))
        .map(|u| u as f64)
}

/// `call`'s answer, or `None` (logged with why) when it failed or took over `READ_TIMEOUT`.
async fn within<T, E>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, aws_sdk_lambda::error::SdkError<E>>>,
) -> Option<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(READ_TIMEOUT, call).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(e)) => {
            tracing::warn!(
                error = %aws_sdk_lambda::error::DisplayErrorContext(&e),
                "{what} not read: the limit stands at its last read or AWS's default"
            );
            None
        }
        Err(_) => {
            tracing::warn!(
                timeout_s = READ_TIMEOUT.as_secs(),
                "{what} not read in time: the limit stands at its last read or AWS's default"
            );
            None
        }
    }
}

impl AccountLimits for AwsAccount {
    fn read(&self) -> BoxFuture<'_, Account> {
        Box::pin(async move {
            let (lambda, table_quota, table) =
                tokio::join!(self.concurrency(), self.table_quota(), self.table());
            let read = {
                let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
                last.lambda = lambda.or(last.lambda);
                last.table_quota = table_quota.or(last.table_quota);
                last.table = table.or(last.table);
                *last
            };
            let mut account = Account::defaults(&self.region);
            if let Some(c) = read.lambda {
                account.lambda_concurrency = c.total;
                account.lambda_unreserved = c.unreserved;
                account.read.push(Account::LAMBDA_CONCURRENCY);
            }
            if let Some(quota) = read.table_quota {
                account.sends_table_write_units = quota;
                account.sends_index_write_units = quota;
                account.read.push(Account::TABLE_QUOTA);
            }
            if let Some(t) = read.table {
                let under = |quota: f64, own: Option<f64>| own.map_or(quota, |o| o.min(quota));
                account.sends_table_write_units =
                    under(account.sends_table_write_units, t.table_ceiling);
                account.sends_index_write_units =
                    under(account.sends_index_write_units, t.index_ceiling);
                account.sends_table_warm_write_units = t.warm;
                account.read.push(Account::SENDS_TABLE_THROUGHPUT);
            }
            account
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ceiling;

    #[test]
    fn a_tables_ceiling_is_its_provisioned_units_else_its_on_demand_maximum() {
        assert_eq!(ceiling(Some(500), None), Some(500.0));
        assert_eq!(ceiling(Some(500), Some(900)), Some(500.0));
        // On demand: 0 provisioned units, and a maximum of -1 is none.
        assert_eq!(ceiling(Some(0), Some(900)), Some(900.0));
        assert_eq!(ceiling(Some(0), Some(-1)), None);
        assert_eq!(ceiling(None, None), None);
    }
}
