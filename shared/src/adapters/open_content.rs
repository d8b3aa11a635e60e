//! The open-content store on DynamoDB (`OPEN_CONTENT_TABLE_NAME`; keys `pk`, `sk`, TTL
//! `expiresAt`). Items:
//!
//! - `E#<campaign>#<user>` / `picks`: an email's lease (`leaseOwner`, `leaseUntil`), its frozen
//!   `picks` (JSON) and the items it has clicked (`clicked`, a string set: unique clicks).
//!   Kept 90 days: a reopen after that chooses afresh.
//! - `A#<campaign>#<item>` / `m#<minute>`: the item's clicks in that minute (the seed's Redis
//!   bitmap, one item per active minute); kept a day.
//! - `T#<campaign>` / `i#<item>`: the item's clicks; `T#<campaign>` / `top`: the most any item
//!   of the campaign has (raised with a conditional write).
//! - `C#<campaign>` / `counts#<0-7>`: the campaign's counts, spread over eight items by user
//!   so that a campaign's opens are no hot key.

use super::describe;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::{FreezeClaim, OpenCount, OpenCounters, Picks};
use crate::ports::{Activity, ContentStoreError, OpenContentStore};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

type Item = HashMap<String, AttributeValue>;

const EMAIL_DAYS: u64 = 90;
const ACTIVITY_DAYS: u64 = 1;
const COUNTER_SHARDS: u32 = 8;

#[derive(Clone)]
pub struct OpenContentTable {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn number(item: &Item, name: &str) -> u64 {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn expires(days: u64) -> AttributeValue {
    let at = SystemTime::now() + Duration::from_secs(days * 24 * 3600);
    n(at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs())
}

fn email_key(email: &SendKey) -> String {
    format!("E#{}#{}", email.campaign_id(), email.user_id())
}

fn minute_key(minute: u64) -> String {
    format!("m#{minute:012}")
}

/// FNV-1a of the user id: which counters item an email adds to.
fn shard(user_id: &str) -> u32 {
    user_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    }) % COUNTER_SHARDS
}

fn picks_of(item: &Item) -> Result<Option<Picks>, ContentStoreError> {
    match item.get("picks").and_then(|v| v.as_s().ok()) {
        None => Ok(None),
        Some(json) => serde_json::from_str(json)
            .map(Some)
            .map_err(|e| ContentStoreError(format!("frozen picks do not parse: {e}"))),
    }
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

    async fn picks_read(
        &self,
        email: &SendKey,
        consistent: bool,
    ) -> Result<Option<Picks>, ContentStoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(email_key(email)))
            .key("sk", s("picks"))
            .projection_expression("picks")
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| self.error("GetItem picks", e))?;
        picks_of(&out.item.unwrap_or_default())
    }
}

impl OpenContentStore for OpenContentTable {
    async fn frozen(&self, email: &SendKey) -> Result<Option<Picks>, ContentStoreError> {
        self.picks_read(email, false).await
    }

    async fn claim(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> Result<FreezeClaim, ContentStoreError> {
        let values = HashMap::from([
            (":owner".into(), s(owner)),
            (":until".into(), n(lease_until_ms)),
            (":now".into(), n(now_ms)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        let outcome = self
            .update(
                "claim picks",
                email_key(email),
                "picks",
                "SET leaseOwner = :owner, leaseUntil = :until, expiresAt = :expires",
                Some("attribute_not_exists(picks) AND (attribute_not_exists(leaseUntil) OR leaseUntil <= :now)"),
                values,
                ReturnValue::None,
            )
            .await;
        match outcome? {
            Conditional::Done(_) => Ok(FreezeClaim::Won),
            Conditional::Refused(old) => match picks_of(&old)? {
                Some(picks) => Ok(FreezeClaim::Frozen(picks)),
                None => Ok(FreezeClaim::Busy {
                    lease_until_ms: number(&old, "leaseUntil"),
                }),
            },
        }
    }

    async fn freeze(&self, email: &SendKey, picks: &Picks) -> Result<Picks, ContentStoreError> {
        let json = serde_json::to_string(picks)
            .map_err(|e| ContentStoreError(format!("picks do not serialise: {e}")))?;
        let values = HashMap::from([
            (":picks".into(), s(json)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        match self
            .update(
                "freeze picks",
                email_key(email),
                "picks",
                "SET picks = :picks, expiresAt = :expires",
                Some("attribute_not_exists(picks)"),
                values,
                ReturnValue::None,
            )
            .await?
        {
            Conditional::Done(_) => Ok(picks.clone()),
            Conditional::Refused(old) => picks_of(&old)?
                .ok_or_else(|| ContentStoreError("freeze refused, yet nothing frozen".into())),
        }
    }

    async fn click(
        &self,
        email: &SendKey,
        item: &str,
        minute: u64,
    ) -> Result<bool, ContentStoreError> {
        let campaign = email.campaign_id();
        let unique = async {
            let values = HashMap::from([
                (":item".into(), s(item)),
                (":items".into(), AttributeValue::Ss(vec![item.to_owned()])),
            ]);
            Ok::<_, ContentStoreError>(matches!(
                self.update(
                    "unique click",
                    email_key(email),
                    "picks",
                    "ADD clicked :items",
                    Some("NOT contains(clicked, :item)"),
                    values,
                    ReturnValue::None,
                )
                .await?,
                Conditional::Done(_)
            ))
        };
        let active = async {
            let values = HashMap::from([
                (":one".into(), n(1)),
                (":expires".into(), expires(ACTIVITY_DAYS)),
            ]);
            self.update(
                "click minute",
                format!("A#{campaign}#{item}"),
                &minute_key(minute),
                "ADD clicks :one SET expiresAt = :expires",
                None,
                values,
                ReturnValue::None,
            )
            .await
            .map(|_| ())
        };
        let total = async {
            let values = HashMap::from([
                (":one".into(), n(1)),
                (":expires".into(), expires(EMAIL_DAYS)),
            ]);
            let Conditional::Done(new) = self
                .update(
                    "item clicks",
                    format!("T#{campaign}"),
                    &format!("i#{item}"),
                    "ADD clicks :one SET expiresAt = :expires",
                    None,
                    values,
                    ReturnValue::UpdatedNew,
                )
                .await?
            else {
                return Ok(());
            };
            let clicks = number(&new, "clicks");
            let values = HashMap::from([
                (":n".into(), n(clicks)),
                (":expires".into(), expires(EMAIL_DAYS)),
            ]);
            // Raised only: a lower count arriving late never lowers the top.
            self.update(
                "top clicks",
                format!("T#{campaign}"),
                "top",
                "SET clicks = :n, expiresAt = :expires",
                Some("attribute_not_exists(clicks) OR clicks < :n"),
                values,
                ReturnValue::None,
            )
            .await
            .map(|_| ())
        };
        let (unique, (), ()) = tokio::try_join!(unique, active, total)?;
        Ok(unique)
    }

    async fn activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<Activity, ContentStoreError> {
        let minutes = async {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :first AND :last")
                .expression_attribute_values(":pk", s(format!("A#{campaign}#{item}")))
                .expression_attribute_values(":first", s(minute_key(first)))
                .expression_attribute_values(":last", s(minute_key(last)))
                .projection_expression("sk")
                .send()
                .await
                .map_err(|e| self.error("Query click minutes", e))?;
            Ok::<_, ContentStoreError>(
                out.items()
                    .iter()
                    .filter_map(|i| i.get("sk")?.as_s().ok()?.strip_prefix("m#")?.parse().ok())
                    .collect::<Vec<u64>>(),
            )
        };
        let totals = async {
            let pk = format!("T#{campaign}");
            let keys = ["top".to_owned(), format!("i#{item}")]
                .into_iter()
                .map(|sk| HashMap::from([("pk".to_owned(), s(&pk)), ("sk".to_owned(), s(sk))]))
                .collect::<Vec<_>>();
            let wanted = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .projection_expression("sk, clicks")
                .build()
                .map_err(|e| ContentStoreError(e.to_string()))?;
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, wanted)
                .send()
                .await
                .map_err(|e| self.error("BatchGetItem clicks", e))?;
            let mut item_clicks = 0;
            let mut top_clicks = 0;
            for found in out
                .responses()
                .and_then(|r| r.get(&self.table))
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                match found
                    .get("sk")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                {
                    Some("top") => top_clicks = number(found, "clicks"),
                    Some(_) => item_clicks = number(found, "clicks"),
                    None => {}
                }
            }
            Ok::<_, ContentStoreError>((item_clicks, top_clicks))
        };
        let (minutes, (item_clicks, top_clicks)) = tokio::try_join!(minutes, totals)?;
        Ok(Activity {
            minutes,
            item_clicks,
            top_clicks,
        })
    }

    async fn count(&self, email: &SendKey, what: &[OpenCount]) -> Result<(), ContentStoreError> {
        if what.is_empty() {
            return Ok(());
        }
        let adds: Vec<String> = what
            .iter()
            .map(|w| format!("{} :one", w.attribute()))
            .collect();
        let values = HashMap::from([
            (":one".into(), n(1)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        self.update(
            "count",
            format!("C#{}", email.campaign_id()),
            &format!("counts#{}", shard(email.user_id())),
            &format!("ADD {} SET expiresAt = :expires", adds.join(", ")),
            None,
            values,
            ReturnValue::None,
        )
        .await
        .map(|_| ())
    }

    async fn counters(&self, campaign: &CampaignId) -> Result<OpenCounters, ContentStoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(format!("C#{campaign}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("Query counts", e))?;
        let mut counters = OpenCounters::default();
        for item in out.items() {
            for what in OpenCount::ALL {
                counters.add(what, number(item, what.attribute()));
            }
        }
        Ok(counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_and_spread() {
        assert!(minute_key(9) < minute_key(10));
        assert_eq!(minute_key(29_000_000), "m#000029000000");
        let shards: std::collections::HashSet<u32> =
            (0..100).map(|i| shard(&format!("u{i}"))).collect();
        assert_eq!(shards.len(), COUNTER_SHARDS as usize);
    }
}
