//! Who clicked a pick, counted as people: a sketch per pick and minute and per pick, each
//! register raised by one conditional write, and the campaign's top, raised only.

use super::{batch_error, expires, Conditional, OpenContentTable, ACTIVITY_DAYS, EMAIL_DAYS};
use crate::adapters::batch_get::{batch_get, BatchGetPolicy, Unprocessed};
use crate::adapters::item::{n, number, s, Item};
use crate::domain::campaign::CampaignId;
use crate::domain::open_content::{Mark, Sketch};
use crate::ports::{Activity, ContentStoreError, Rise};
use aws_sdk_dynamodb::types::ReturnValue;
use std::collections::HashMap;

/// How a badge reads a pick's people and the campaign's top: eventually consistent, and
/// "try again" rather than a wait when DynamoDB leaves a key unprocessed (the top is one hot
/// item every badge reads).
const PEOPLE_READ: BatchGetPolicy = BatchGetPolicy {
    unprocessed: Unprocessed::Fail,
    consistent: false,
};

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

impl OpenContentTable {
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

    pub(super) async fn mark_click_minute(
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

    pub(super) async fn mark_item_people(
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

    pub(super) async fn raise_campaign_top(
        &self,
        campaign: &CampaignId,
        people: u64,
    ) -> Result<(), ContentStoreError> {
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

    pub(super) async fn read_activity(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<Activity, ContentStoreError> {
        let ((minutes, window_people), (item_people, top_people)) = tokio::try_join!(
            self.click_minutes(campaign, item, first, last),
            self.people_totals(campaign, item)
        )?;
        Ok(Activity {
            minutes,
            window_people,
            item_people,
            top_people,
        })
    }

    /// The minutes from `first` to `last` in which someone clicked the pick, and the people
    /// of those minutes together.
    async fn click_minutes(
        &self,
        campaign: &CampaignId,
        item: &str,
        first: u64,
        last: u64,
    ) -> Result<(Vec<u64>, u64), ContentStoreError> {
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
        Ok((minutes, window.people()))
    }

    /// The people of the pick in the campaign, and the campaign's top.
    async fn people_totals(
        &self,
        campaign: &CampaignId,
        item: &str,
    ) -> Result<(u64, u64), ContentStoreError> {
        let keys = [
            (format!("T#{campaign}#{item}"), "people"),
            (format!("T#{campaign}"), "top"),
        ]
        .into_iter()
        .map(|(pk, sk)| HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]))
        .collect::<Vec<_>>();
        let what = "BatchGetItem people";
        let found_items = batch_get(&self.client, &self.table, keys, None, PEOPLE_READ)
            .await
            .map_err(|e| batch_error(&self.table, what, e))?;
        let mut item_people = 0;
        let mut top_people = 0;
        for found in &found_items {
            match found
                .get("sk")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
            {
                Some("top") => top_people = number::<u64>(found, "people").unwrap_or(0),
                Some(_) => item_people = sketch_of(found).people(),
                None => {}
            }
        }
        Ok((item_people, top_people))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minute_keys_sort() {
        assert!(minute_key(9) < minute_key(10));
        assert_eq!(minute_key(29_000_000), "m#000029000000");
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
