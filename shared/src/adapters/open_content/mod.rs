//! The open-content store on DynamoDB (`OPEN_CONTENT_TABLE_NAME`; keys `pk`, `sk`, TTL
//! `expiresAt`). Items:
//!
//! - `E#<campaign>#<user>` / `picks`: an email's lease while its picks are chosen
//!   (`leaseOwner`, `leaseUntil`), then its frozen `picks` (JSON) alone: nothing about who
//!   opened or clicked. Kept 90 days: a reopen after that chooses afresh.
//! - `A#<campaign>#<item>` / `m#<minute>`: the people who clicked the item in that minute, as
//!   a sketch (`r<register>` = rank, `domain::open_content::people`); kept a day.
//! - `T#<campaign>#<item>` / `people`: the people who clicked the item in the campaign (a
//!   sketch); one partition key per item.
//! - `T#<campaign>` / `top`: `people`, the most any item of the campaign has (raised with a
//!   conditional write, only when an item's people rose past what the function last saw).
//! - `C#<campaign>#<0-7>` / `counts`: the campaign's counts, over eight partition keys by
//!   user, so that a campaign's opens and clicks are no hot key. (`C#<campaign>` /
//!   `counts#<0-7>`, the layout before, is still read, for campaigns that span a deploy.)
//!
//! A sketch register is raised with one conditional `UpdateItem` (`attribute_not_exists(r7)
//! OR r7 < :rank`): a person already counted there is refused, and writes nothing.

mod counts;
mod frozen;
mod people;

use super::describe;
use super::item::{s, Item};
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::{FreezeClaim, Mark, OpenCount, OpenCounters, Picks};
use crate::ports::{Activity, ContentStoreError, OpenContentStore, Rise};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use std::time::Duration;

const EMAIL_DAYS: u64 = 90;
const ACTIVITY_DAYS: u64 = 1;

#[derive(Clone)]
pub struct OpenContentTable {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// The `expiresAt` of an item kept `days`.
fn expires(days: u64) -> aws_sdk_dynamodb::types::AttributeValue {
    super::item::n(super::item::expires_after(Duration::from_secs(
        days * 24 * 3600,
    )))
}

enum Conditional {
    Done(Item),
    Refused(Item),
}

impl OpenContentTable {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self {
            client,
            table: table.to_owned(),
        }
    }

    fn error<E, R>(&self, what: &str, err: SdkError<E, R>) -> ContentStoreError
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        // `describe` takes any SDK error: the SQS crate's alias is the shared smithy type.
        ContentStoreError(format!("{what} on {}: {}", self.table, describe(&err)))
    }

    /// One UpdateItem; a refused condition returns the item as it was.
    #[allow(clippy::too_many_arguments)]
    async fn update(
        &self,
        what: &str,
        pk: String,
        sk: &str,
        update: &str,
        condition: Option<&str>,
        values: Item,
        returns: ReturnValue,
    ) -> Result<Conditional, ContentStoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_values(Some(values))
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Conditional::Done(out.attributes.unwrap_or_default())),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let old = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(ccf) => {
                        ccf.item().cloned().unwrap_or_default()
                    }
                    _ => Item::new(),
                };
                Ok(Conditional::Refused(old))
            }
            Err(err) => Err(self.error(what, err)),
        }
    }
}

/// Each method is one concern's: `frozen` (an email's lease and frozen picks), `people` (the
/// sketches of who clicked, and the campaign's top), `counts` (the sharded counters).
impl OpenContentStore for OpenContentTable {
    async fn frozen(&self, email: &SendKey) -> Result<Option<Picks>, ContentStoreError> {
        self.read_picks(email, false).await
    }

    async fn claim(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> Result<FreezeClaim, ContentStoreError> {
        self.claim_lease(email, owner, now_ms, lease_until_ms).await
    }

    async fn freeze(&self, email: &SendKey, picks: &Picks) -> Result<Picks, ContentStoreError> {
        self.freeze_picks(email, picks).await
    }

    async fn mark_minute(
        &self,
        campaign: &CampaignId,
        item: &str,
        minute: u64,
        mark: Mark,
    ) -> Result<bool, ContentStoreError> {
        self.mark_click_minute(campaign, item, minute, mark).await
    }

    async fn mark_total(
        &self,
        campaign: &CampaignId,
        item: &str,
        mark: Mark,
    ) -> Result<Option<Rise>, ContentStoreError> {
        self.mark_item_people(campaign, item, mark).await
    }

    async fn raise_top(&self, campaign: &CampaignId, people: u64) -> Result<(), ContentStoreError> {
        self.raise_campaign_top(campaign, people).await
    }

    async fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<Activity, ContentStoreError> {
        self.read_activity(campaign, item, first, last).await
    }

    async fn count(
        &self,
        email: &SendKey,
        what: &[(OpenCount, u64)],
    ) -> Result<(), ContentStoreError> {
        self.add_counts(email, what).await
    }

    async fn counters(&self, campaign: &CampaignId) -> Result<OpenCounters, ContentStoreError> {
        self.read_counters(campaign).await
    }
}

/// A batch read's error, as the store reports it.
fn batch_error(table: &str, what: &str, err: super::batch_get::BatchGetError) -> ContentStoreError {
    use super::batch_get::BatchGetError;
    ContentStoreError(match err {
        BatchGetError::Request(detail) => detail,
        BatchGetError::Call(detail) => format!("{what} on {table}: {detail}"),
        BatchGetError::Unprocessed(_) => {
            format!("{what} on {table}: some keys were not read; try again")
        }
    })
}
