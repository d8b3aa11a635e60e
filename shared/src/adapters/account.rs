//! The account's limits read from AWS: Lambda's concurrent executions
//! (`GetAccountSettings`) and the sends table's warm write throughput (`DescribeTable`).

use crate::domain::capacity::Account;
use crate::ports::AccountLimits;
use futures::future::BoxFuture;

pub struct AwsAccount {
    lambda: aws_sdk_lambda::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    sends_table: String,
    region: String,
}

impl AwsAccount {
    pub fn new(sdk: &aws_config::SdkConfig, sends_table: &str) -> Self {
        Self {
            lambda: aws_sdk_lambda::Client::new(sdk),
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            sends_table: sends_table.to_owned(),
            region: sdk.region().map_or("", |r| r.as_ref()).to_owned(),
        }
    }
}

impl AccountLimits for AwsAccount {
    fn read(&self) -> BoxFuture<'_, Account> {
        Box::pin(async move {
            let mut account = Account::defaults(&self.region);
            // Not allowed or not answered: the default stands.
            let settings = self.lambda.get_account_settings().send().await;
            let limit = settings.as_ref().ok().and_then(|s| s.account_limit());
            if let Some(limit) = limit.filter(|l| l.concurrent_executions() > 0) {
                account.lambda_concurrency =
                    u32::try_from(limit.concurrent_executions()).unwrap_or(u32::MAX);
                account.read.push(Account::LAMBDA_CONCURRENCY);
            }
            let table = (self.dynamodb.describe_table())
                .table_name(&self.sends_table)
                .send()
                .await;
            let warm = (table.as_ref().ok())
                .and_then(|t| t.table())
                .and_then(|t| t.warm_throughput())
                .and_then(|w| w.write_units_per_second());
            if let Some(units) = warm.filter(|u| *u > 0) {
                account.sends_table_write_units = units as f64;
                account.read.push(Account::SENDS_TABLE_WARM_THROUGHPUT);
            }
            account
        })
    }
}
