//! What the AWS account allows, as far as the stack's credentials can read it.

use crate::domain::capacity::Account;
use futures::future::BoxFuture;

/// The account's limits (`domain::capacity::Account`): each read where the credentials
/// allow, AWS's default where not. Never an error: a limit that cannot be read is its
/// default, and `Account::read` says which were read.
pub trait AccountLimits: Send + Sync {
    fn read(&self) -> BoxFuture<'_, Account>;
}

/// AWS's defaults in a region, read from nowhere.
pub struct DefaultLimits(pub String);

impl AccountLimits for DefaultLimits {
    fn read(&self) -> BoxFuture<'_, Account> {
        Box::pin(async move { Account::defaults(&self.0) })
    }
}
