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

use super::describe;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::{FreezeClaim, Mark, OpenCount, OpenCounters, Picks, Sketch};
use crate::ports::{Activity, ContentStoreError, OpenContentStore, Rise};
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

fn register_name(register: u8) -> String {
    format!("r{register}")
}

/// The sketch stored in an item's `r<register>` attributes.
fn sketch_of(item: &Item) -> Sketch {
    Sketch::from_registers(item.iter().filter_map(|(name, value)| {
        let register = name.strip_prefix('r')?.parse::<u8>().ok()?;
        let rank = value.as_n().ok()?.parse::<u8>().ok()?;
        Some((register, rank))
    }))
}

fn counts_key(campaign: &str, user_id: &str) -> (String, &'static str) {
    (format!("C#{campaign}#{}", shard(user_id)), "counts")
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

    /// One BatchGetItem of `keys` (at most 100): the items found, or an error when DynamoDB
    /// left some unprocessed (throttling: a campaign's top is one hot item every badge reads),
    /// never a partial answer read as "absent".
    async fn batch_get(
        &self,
        what: &str,
        keys: Vec<HashMap<String, AttributeValue>>,
        consistent: bool,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ContentStoreError> {
        let wanted = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(consistent)
            .build()
            .map_err(|e| ContentStoreError(e.to_string()))?;
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.table, wanted)
            .send()
            .await
            .map_err(|e| self.error(what, e))?;
        if out
            .unprocessed_keys()
            .is_some_and(|u| u.values().any(|k| !k.keys().is_empty()))
        {
            return Err(ContentStoreError(format!(
                "{what} on {}: some keys were not read; try again",
                self.table
            )));
        }
        Ok(out
            .responses()
            .and_then(|r| r.get(&self.table))
            .cloned()
            .unwrap_or_default())
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

    /// One conditional write: the register of `mark` raised to its rank, unless it is there
    /// already (a person counted before, or someone else with a higher rank).
    async fn raise_register(
        &self,
        what: &str,
        pk: String,
        sk: &str,
        mark: Mark,
        days: u64,
        returns: ReturnValue,
    ) -> Result<Conditional, ContentStoreError> {
        let r = register_name(mark.register);
        let values = HashMap::from([
            (":rank".into(), n(u64::from(mark.rank))),
            (":expires".into(), expires(days)),
        ]);
        self.update(
            what,
            pk,
            sk,
            &format!("SET {r} = :rank, expiresAt = :expires"),
            Some(&format!("attribute_not_exists({r}) OR {r} < :rank")),
            values,
            returns,
        )
        .await
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
                "SET picks = :picks, expiresAt = :expires REMOVE leaseOwner, leaseUntil",
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

    async fn mark_minute(
        &self,
        campaign: &CampaignId,
        item: &str,
        minute: u64,
        mark: Mark,
    ) -> Result<bool, ContentStoreError> {
        let outcome = self
            .raise_register(
                "click minute",
                format!("A#{campaign}#{item}"),
                &minute_key(minute),
                mark,
                ACTIVITY_DAYS,
                ReturnValue::None,
            )
            .await?;
        Ok(matches!(outcome, Conditional::Done(_)))
    }

    async fn mark_total(
        &self,
        campaign: &CampaignId,
        item: &str,
        mark: Mark,
    ) -> Result<Option<Rise>, ContentStoreError> {
        let outcome = self
            .raise_register(
                "item people",
                format!("T#{campaign}#{item}"),
                "people",
                mark,
                EMAIL_DAYS,
                ReturnValue::AllOld,
            )
            .await?;
        Ok(match outcome {
            Conditional::Done(old) => {
                let mut sketch = sketch_of(&old);
                let before = sketch.people();
                sketch.raise(mark);
                Some(Rise {
                    before,
                    after: sketch.people(),
                })
            }
            Conditional::Refused(_) => None,
        })
    }

    async fn raise_top(&self, campaign: &CampaignId, people: u64) -> Result<(), ContentStoreError> {
        let values = HashMap::from([
            (":n".into(), n(people)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        // Raised only: a lower count arriving late never lowers the top.
        self.update(
            "top people",
            format!("T#{campaign}"),
            "top",
            "SET people = :n, expiresAt = :expires",
            Some("attribute_not_exists(people) OR people < :n"),
            values,
            ReturnValue::None,
        )
        .await
        .map(|_| ())
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
                .send()
                .await
                .map_err(|e| self.error("Query click minutes", e))?;
            let mut window = Sketch::default();
            let mut minutes = Vec::new();
            for found in out.items() {
                let sketch = sketch_of(found);
                let minute = found
                    .get("sk")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|sk| sk.strip_prefix("m#")?.parse().ok());
                if let (Some(minute), false) = (minute, sketch.is_empty()) {
                    minutes.push(minute);
                    window.merge(&sketch);
                }
            }
            Ok::<_, ContentStoreError>((minutes, window.people()))
        };
        let totals = async {
            let keys = [
                (format!("T#{campaign}#{item}"), "people"),
                (format!("T#{campaign}"), "top"),
            ]
            .into_iter()
            .map(|(pk, sk)| HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]))
            .collect::<Vec<_>>();
            let found_items = self.batch_get("BatchGetItem people", keys, false).await?;
            let mut item_people = 0;
            let mut top_people = 0;
            for found in &found_items {
                match found
                    .get("sk")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                {
                    Some("top") => top_people = number(found, "people"),
                    Some(_) => item_people = sketch_of(found).people(),
                    None => {}
                }
            }
            Ok::<_, ContentStoreError>((item_people, top_people))
        };
        let ((minutes, window_people), (item_people, top_people)) =
            tokio::try_join!(minutes, totals)?;
        Ok(Activity {
            minutes,
            window_people,
            item_people,
            top_people,
        })
    }

    async fn count(
        &self,
        email: &SendKey,
        what: &[(OpenCount, u64)],
    ) -> Result<(), ContentStoreError> {
        let what: Vec<(OpenCount, u64)> = what.iter().copied().filter(|(_, k)| *k > 0).collect();
        if what.is_empty() {
            return Ok(());
        }
        let mut values = HashMap::from([(":expires".into(), expires(EMAIL_DAYS))]);
        let mut adds = Vec::new();
        for (i, (w, k)) in what.iter().enumerate() {
            adds.push(format!("{} :n{i}", w.attribute()));
            values.insert(format!(":n{i}"), n(*k));
        }
        let (pk, sk) = counts_key(email.campaign_id(), email.user_id());
        self.update(
            "count",
            pk,
            sk,
            &format!("ADD {} SET expiresAt = :expires", adds.join(", ")),
            None,
            values,
            ReturnValue::None,
        )
        .await
        .map(|_| ())
    }

    async fn counters(&self, campaign: &CampaignId) -> Result<OpenCounters, ContentStoreError> {
        let shards = async {
            let keys = (0..COUNTER_SHARDS)
                .map(|i| {
                    HashMap::from([
                        ("pk".to_owned(), s(format!("C#{campaign}#{i}"))),
                        ("sk".to_owned(), s("counts")),
                    ])
                })
                .collect::<Vec<_>>();
            self.batch_get("BatchGetItem counts", keys, true).await
        };
        // The layout before: one partition key per campaign.
        let before = async {
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
            Ok::<_, ContentStoreError>(out.items().to_vec())
        };
        let (shards, before) = tokio::try_join!(shards, before)?;
        let mut counters = OpenCounters::default();
        for item in shards.iter().chain(&before) {
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
        // The counts of a campaign's emails fall on every one of eight partition keys.
        let keys: std::collections::HashSet<String> = (0..100)
            .map(|i| counts_key("weekly-2026-W47", &format!("u{i}")).0)
            .collect();
        assert_eq!(keys.len(), COUNTER_SHARDS as usize);
        assert!(keys.iter().all(|k| k.starts_with("C#weekly-2026-W47#")));
    }

    #[test]
    fn a_sketch_reads_back_from_its_attributes() {
        let mut sketch = Sketch::default();
        for i in 0..40u64 {
            sketch.raise(Mark::from_hash(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        let mut item: Item = sketch
            .registers()
            .map(|(r, k)| (register_name(r), n(u64::from(k))))
            .collect();
        item.insert("pk".into(), s("T#c#a"));
        item.insert("expiresAt".into(), n(1));
        item.insert("r999".into(), n(3));
        item.insert("rx".into(), s("junk"));
        assert_eq!(sketch_of(&item), sketch);
    }
}
