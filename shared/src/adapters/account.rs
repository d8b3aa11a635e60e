//! The account's limits read from AWS: Lambda's concurrent executions
//! (`GetAccountSettings`), DynamoDB's per-table write quota (`DescribeLimits`) and the sends
//! table's own throughput (`DescribeTable`: provisioned or maximum on-demand writes, its
//! campaign index's, and its warm throughput).
//!
//! Each read is bounded in time (RateControl runs it last, within its own 30 s) and made at
//! once with the others. One that fails or times out is logged and stands at what this
//! environment last read (`Account::earlier` says which), or AWS's default before any read.
//! DynamoDB's quota is asked on the first read, then on one in 15, once, without the SDK's
//! retries: `DescribeLimits` throttles callers of more than one a minute, and RateControl
//! reads every minute beside `mailctl plan`. Until one ask is answered, each read asks (one
//! a minute): an environment whose first ask was throttled does not stand at the default
//! for a quarter of an hour.

use crate::adapters::sends::CAMPAIGN_INDEX;
use crate::domain::capacity::Account;
use crate::ports::AccountLimits;
use futures::future::BoxFuture;
use std::sync::Mutex;
use std::time::Duration;

/// How long one read may take before its default stands.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// DynamoDB's quota is asked on one read in this many (RateControl reads once a minute).
const QUOTA_EVERY: u32 = 15;

pub struct AwsAccount {
    lambda: aws_sdk_lambda::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    sends_table: String,
    region: String,
    last: Mutex<LastRead>,
}

/// What each source answered: in this read, or last in this environment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Reads {
    lambda: Option<Concurrency>,
    table_quota: Option<f64>,
    table: Option<TableThroughput>,
}

#[derive(Default)]
struct LastRead {
    reads: Reads,
    /// Reads to go before DynamoDB's quota is asked again (0: this one asks).
    quota_in: u32,
}

impl LastRead {
    /// Whether this read asks DynamoDB's quota: the first, then one in `QUOTA_EVERY`,
    /// answered or not (a throttled ask is not repeated the next minute).
    fn quota_due(&mut self) -> bool {
        let due = self.quota_in == 0;
        self.quota_in = match due {
            true => QUOTA_EVERY - 1,
            false => self.quota_in - 1,
        };
        due
    }

    /// An ask left unanswered while none is held: the next read asks again.
    fn quota_unanswered(&mut self) {
        if self.reads.table_quota.is_none() {
            self.quota_in = 0;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Concurrency {
    total: u32,
    unreserved: Option<u32>,
}

/// The sends table's own throughput: a ceiling below the quota where one is set (provisioned
/// units, or an on-demand maximum), and the warm throughput, for the table and for its
/// campaign index.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TableThroughput {
    table_ceiling: Option<f64>,
    index_ceiling: Option<f64>,
    table_warm: Option<f64>,
    index_warm: Option<f64>,
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
        // Once: a throttled ask retried would only be throttled again.
        let once = aws_sdk_dynamodb::config::Builder::default()
            .retry_config(aws_config::retry::RetryConfig::disabled());
        let limits = within(
            "DynamoDB's limits",
            (self.dynamodb.describe_limits().customize())
                .config_override(once)
                .send(),
        )
        .await?;
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
            table_warm: warm(
                table
                    .warm_throughput()
                    .and_then(|w| w.write_units_per_second()),
            ),
            index_warm: warm(
                index
                    .and_then(|i| i.warm_throughput())
                    .and_then(|w| w.write_units_per_second()),
            ),
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

fn warm(units: Option<i64>) -> Option<f64> {
    units.filter(|u| *u > 0).map(|u| u as f64)
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
            let quota_due = crate::runtime::lock(&self.last).quota_due();
            let quota = async {
                match quota_due {
                    true => self.table_quota().await,
                    false => None,
                }
            };
            let (lambda, table_quota, table) =
                tokio::join!(self.concurrency(), quota, self.table());
            let fresh = Reads {
                lambda,
                table_quota,
                table,
            };
            let earlier = {
                let mut last = crate::runtime::lock(&self.last);
                let earlier = last.reads;
                last.reads = Reads {
                    lambda: fresh.lambda.or(earlier.lambda),
                    table_quota: fresh.table_quota.or(earlier.table_quota),
                    table: fresh.table.or(earlier.table),
                };
                if quota_due {
                    last.quota_unanswered();
                }
                earlier
            };
            account_of(&self.region, fresh, earlier)
        })
    }
}

/// The account from this read's answers, each missing one at its earlier answer (said in
/// `Account::earlier`) or AWS's default.
fn account_of(region: &str, fresh: Reads, earlier: Reads) -> Account {
    let mut account = Account::defaults(region);
    let (mut read, mut before) = (Vec::new(), Vec::new());
    let mut said = |name: &'static str, fresh: bool| match fresh {
        true => read.push(name),
        false => before.push(name),
    };
    let lambda = fresh.lambda.map(|c| (c, true));
    if let Some((c, is_fresh)) = lambda.or(earlier.lambda.map(|c| (c, false))) {
        said(Account::LAMBDA_CONCURRENCY, is_fresh);
        account.lambda_concurrency = c.total;
        account.lambda_unreserved = c.unreserved;
    }
    let quota = fresh.table_quota.map(|q| (q, true));
    if let Some((quota, is_fresh)) = quota.or(earlier.table_quota.map(|q| (q, false))) {
        said(Account::TABLE_QUOTA, is_fresh);
        // On demand (as the stack's table is), the per-table quota holds the table and
        // each of its indexes apart.
        account.sends_table_write_units = quota;
        account.sends_index_write_units = quota;
    }
    let table = fresh.table.map(|t| (t, true));
    if let Some((t, is_fresh)) = table.or(earlier.table.map(|t| (t, false))) {
        said(Account::SENDS_TABLE_THROUGHPUT, is_fresh);
        let under = |quota: f64, own: Option<f64>| own.map_or(quota, |o| o.min(quota));
        account.sends_table_write_units = under(account.sends_table_write_units, t.table_ceiling);
        account.sends_index_write_units = under(account.sends_index_write_units, t.index_ceiling);
        account.sends_table_warm_write_units = t.table_warm;
        account.sends_index_warm_write_units = t.index_warm;
    }
    (account.read, account.earlier) = (read, before);
    account
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_is_lowered_by_the_tables_own_ceiling_and_an_earlier_read_is_said() {
        let table = TableThroughput {
            table_ceiling: Some(30_000.0),
            index_ceiling: None,
            table_warm: Some(4_000.0),
            index_warm: Some(2_000.0),
        };
        let fresh = Reads {
            lambda: Some(Concurrency {
                total: 3_000,
                unreserved: Some(2_500),
            }),
            table_quota: Some(80_000.0),
            table: Some(table),
        };
        let account = account_of("eu-west-1", fresh, Reads::default());
        assert_eq!(
            (
                account.lambda_concurrency,
                account.lambda_unreserved,
                account.sends_table_write_units,
                account.sends_index_write_units,
                account.sends_table_warm_write_units,
                account.sends_index_warm_write_units,
            ),
            (
                3_000,
                Some(2_500),
                30_000.0,
                80_000.0,
                Some(4_000.0),
                Some(2_000.0)
            )
        );
        assert_eq!(account.read.len(), 3);
        assert!(account.earlier.is_empty());
        // Nothing answered this time: the earlier answers stand, said as earlier; before any
        // answer, the defaults, said as neither.
        let stale = account_of("eu-west-1", Reads::default(), fresh);
        assert_eq!(
            (stale.lambda_concurrency, stale.sends_table_write_units),
            (3_000, 30_000.0)
        );
        assert!(stale.read.is_empty());
        assert_eq!(stale.earlier.len(), 3);
        let none = account_of("eu-west-1", Reads::default(), Reads::default());
        assert_eq!(none, Account::defaults("eu-west-1"));
    }

    #[test]
    fn the_quota_is_asked_on_the_first_read_then_one_in_fifteen() {
        let mut last = LastRead::default();
        let asked: Vec<usize> = (0..31).filter(|_| last.quota_due()).collect();
        assert_eq!(asked, [0, 15, 30]);
    }

    #[test]
    fn an_unanswered_quota_is_asked_again_until_one_is_held() {
        // The first ask throttled, nothing held: the next read asks again.
        let mut last = LastRead::default();
        assert!(last.quota_due());
        last.quota_unanswered();
        assert!(last.quota_due());
        // Answered once: a later unanswered ask waits its turn, the answer held.
        last.reads.table_quota = Some(80_000.0);
        last.quota_unanswered();
        assert!(!last.quota_due());
        let mut last = LastRead {
            reads: last.reads,
            quota_in: 0,
        };
        assert!(last.quota_due());
        last.quota_unanswered();
        let asked = (0..15).filter(|_| last.quota_due()).count();
        assert_eq!(asked, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_never_answers_gives_up_after_its_timeout() {
        let never =
            std::future::pending::<Result<(), aws_sdk_lambda::error::SdkError<std::io::Error>>>();
        let started = tokio::time::Instant::now();
        assert_eq!(within("a silent service", never).await, None);
        assert_eq!(started.elapsed(), READ_TIMEOUT);
    }

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
