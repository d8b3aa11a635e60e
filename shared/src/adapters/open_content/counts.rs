//! The campaign's open and click counts: eight counters items per campaign, by user, so
//! that its opens and clicks are no hot key (the layout before, one partition key per
//! campaign, still read).

use super::{batch_error, expires, OpenContentTable, EMAIL_DAYS};
use crate::adapters::batch_get::{batch_get, BatchGetPolicy, Unprocessed};
use crate::adapters::item::{n, number, s};
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendKey;
use crate::domain::open_content::{OpenCount, OpenCounters};
use crate::ports::ContentStoreError;
use aws_sdk_dynamodb::types::ReturnValue;
use std::collections::HashMap;

const COUNTER_SHARDS: u32 = 8;

/// How the counters are read: consistently, and an error ("try again") rather than a
/// wait when DynamoDB leaves a key unprocessed.
const COUNTS_READ: BatchGetPolicy = BatchGetPolicy {
    unprocessed: Unprocessed::Fail,
    consistent: true,
};

fn counts_key(campaign: &str, user_id: &str) -> (String, &'static str) {
    (format!("C#{campaign}#{}", shard(user_id)), "counts")
}

/// FNV-1a of the user id: which counters item an email adds to.
fn shard(user_id: &str) -> u32 {
    user_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    }) % COUNTER_SHARDS
}

impl OpenContentTable {
    pub(super) async fn add_counts(
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

    pub(super) async fn read_counters(
        &self,
        campaign: &CampaignId,
    ) -> Result<OpenCounters, ContentStoreError> {
        let shards = async {
            let keys = (0..COUNTER_SHARDS)
                .map(|i| {
                    HashMap::from([
                        ("pk".to_owned(), s(format!("C#{campaign}#{i}"))),
                        ("sk".to_owned(), s("counts")),
                    ])
                })
                .collect::<Vec<_>>();
            batch_get(&self.client, &self.table, keys, None, COUNTS_READ)
                .await
                .map_err(|e| batch_error(&self.table, "BatchGetItem counts", e))
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
                counters.add(what, number::<u64>(item, what.attribute()).unwrap_or(0));
            }
        }
        Ok(counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_spread_over_eight_keys() {
        // The counts of a campaign's emails fall on every one of eight partition keys.
        let keys: std::collections::HashSet<String> = (0..100)
            .map(|i| counts_key("weekly-2026-W47", &format!("u{i}")).0)
            .collect();
        assert_eq!(keys.len(), COUNTER_SHARDS as usize);
        assert!(keys.iter().all(|k| k.starts_with("C#weekly-2026-W47#")));
    }
}
