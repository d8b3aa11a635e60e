//! Pushed campaign definitions in the campaigns table (`CAMPAIGNS_TABLE_NAME`), beside the
//! campaigns: a definition's head item `definition#<name>` (its latest version, hash, when
//! and by whom it was pushed, its schedule) and one item per version,
//! `definition#<name>#000001`, with the files as deflated JSON (`ports::definitions::pack`).
//! A `#` never appears in a campaign id, so neither key is ever a campaign's; the items carry
//! no `state`, so the scans for running or paused campaigns never see them.
//!
//! A push writes the version and moves the head in one transaction, on the condition that the
//! head is still the one it read: two pushes at once never get the same number (the loser
//! reads the head again, `PUSH_ATTEMPTS` times in all).

use super::batch_get::{batch_get, BatchGetPolicy, Unprocessed};
use super::describe;
use super::item::{n, number, s, text, Item};
use crate::ports::definitions::{
    check_name, content_hash, pack, unpack, DefinitionError, DefinitionStore, Push, Pushed,
    StoredDefinition, VersionInfo, MAX_ITEM_BYTES, PUSH_ATTEMPTS,
};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;

mod schedules;
pub use schedules::{
    schedule_name, DefinitionSchedules, ScheduleChange, SCHEDULED_TIME, SCHEDULE_STATE,
};

const KIND: &str = "itemKind";
const HEAD: &str = "definition";
const VERSION: &str = "definitionVersion";

/// The attributes of both kinds (none is a DynamoDB reserved word).
const NAME: &str = "defName";
const NUMBER: &str = "defVersion";
const FILES: &str = "files";
/// Everything but the files: what `versions` and `list` read.
const INFO: &str =
    "campaignId, defName, defVersion, sha256, pushedAt, pushedBy, scheduleExpression";

pub fn head_key(name: &str) -> String {
    format!("definition#{name}")
}

pub fn version_key(name: &str, version: u32) -> String {
    format!("definition#{name}#{version:06}")
}

#[derive(Clone)]
pub struct DefinitionsTable {
    client: Client,
    table: String,
}

/// An item's size as DynamoDB counts it against 400 KB: names and values (a number's digits
/// are counted as bytes: a little over DynamoDB's own count).
fn item_bytes(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(v) | AttributeValue::N(v) => v.len(),
                    AttributeValue::B(v) => v.as_ref().len(),
                    _ => 1,
                }
        })
        .sum()
}

fn info_item(key: String, kind: &str, info: &VersionInfo) -> Item {
    let mut item = Item::from([
        ("campaignId".to_owned(), s(key)),
        (KIND.into(), s(kind)),
        (NAME.into(), s(info.name.clone())),
        (NUMBER.into(), n(info.version)),
        ("sha256".into(), s(info.sha256.clone())),
        ("pushedAt".into(), n(info.pushed_at_ms)),
    ]);
    if let Some(by) = &info.pushed_by {
        item.insert("pushedBy".into(), s(by.clone()));
    }
    if let Some(schedule) = &info.schedule {
        item.insert("scheduleExpression".into(), s(schedule.clone()));
    }
    item
}

/// A head or version item's info (None: not one, or written by something else).
fn info(item: &Item) -> Option<VersionInfo> {
    Some(VersionInfo {
        name: text(item, NAME)?,
        version: number(item, NUMBER)?,
        sha256: text(item, "sha256")?,
        pushed_at_ms: number(item, "pushedAt").unwrap_or_default(),
        pushed_by: text(item, "pushedBy"),
        schedule: text(item, "scheduleExpression"),
    })
}

impl DefinitionsTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn error(&self, operation: &str, detail: String) -> DefinitionError {
        DefinitionError::Store(format!(
            "campaigns table {}: {operation} failed: {detail}",
            self.table
        ))
    }

    async fn item(&self, key: String, operation: &str) -> Result<Option<Item>, DefinitionError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("campaignId", s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error(operation, describe(&e)))?;
        Ok(out.item)
    }

    /// The version and the head moved to it, if the head is still at `seen` (0: none).
    /// Ok(false): another push got there first.
    async fn write(
        &self,
        seen: u32,
        info: &VersionInfo,
        version: Item,
    ) -> Result<bool, DefinitionError> {
        let put = |item: Item, condition: &str, seen: Option<u32>| {
            let mut put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(condition);
            if let Some(seen) = seen {
                put = put
                    .expression_attribute_names("#v", NUMBER)
                    .expression_attribute_values(":seen", n(seen));
            }
            put.build()
                .map(|p| TransactWriteItem::builder().put(p).build())
                .map_err(|e| self.error("push definition", e.to_string()))
        };
        let head = info_item(head_key(&info.name), HEAD, info);
        let head = if seen == 0 {
            put(head, "attribute_not_exists(campaignId)", None)?
        } else {
            put(head, "#v = :seen", Some(seen))?
        };
        let version = put(version, "attribute_not_exists(campaignId)", None)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(version)
            .transact_items(head)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            // A condition failed, or another transaction on the same items was under way.
            Err(SdkError::ServiceError(e))
                if matches!(
                    e.err(),
                    TransactWriteItemsError::TransactionCanceledException(_)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.error("push definition", describe(&e))),
        }
    }
}

impl DefinitionStore for DefinitionsTable {
    async fn push(&self, push: Push<'_>) -> Result<Pushed, DefinitionError> {
        check_name(push.name)?;
        let sha256 = content_hash(push.files);
        let packed = pack(push.files);
        for _ in 0..PUSH_ATTEMPTS {
            let head = self.latest(push.name).await?;
            if let Some(head) = head.as_ref().filter(|h| h.sha256 == sha256) {
                return Ok(Pushed::Unchanged(head.clone()));
            }
            let seen = head.map_or(0, |h| h.version);
            let info = VersionInfo {
                name: push.name.to_owned(),
                version: seen + 1,
                sha256: sha256.clone(),
                pushed_at_ms: push.at_ms,
                pushed_by: push.by.map(str::to_owned),
                schedule: push.schedule.map(str::to_owned),
            };
            let mut item = info_item(version_key(push.name, info.version), VERSION, &info);
            item.insert(FILES.into(), AttributeValue::B(Blob::new(packed.clone())));
            let bytes = item_bytes(&item);
            if bytes > MAX_ITEM_BYTES {
                return Err(DefinitionError::TooBig {
                    name: push.name.to_owned(),
                    bytes,
                    limit: MAX_ITEM_BYTES,
                });
            }
            if self.write(seen, &info, item).await? {
                return Ok(Pushed::Stored(info));
            }
            tracing::info!(
                definition = push.name,
                version = info.version,
                "another push took this version; reading the head again"
            );
        }
        Err(DefinitionError::Contended {
            name: push.name.to_owned(),
            attempts: PUSH_ATTEMPTS,
        })
    }

    async fn get(&self, name: &str, version: u32) -> Result<StoredDefinition, DefinitionError> {
        check_name(name)?;
        let Some(item) = self
            .item(version_key(name, version), "read definition")
            .await?
        else {
            return Err(match self.latest(name).await? {
                None => DefinitionError::Unknown(name.to_owned()),
                Some(head) => DefinitionError::NoVersion {
                    name: name.to_owned(),
                    version,
                    latest: head.version,
                },
            });
        };
        let corrupt = |why: String| DefinitionError::Corrupt {
            name: name.to_owned(),
            version,
            why,
        };
        let info = info(&item).ok_or_else(|| corrupt("no name, version or hash".into()))?;
        let Some(AttributeValue::B(packed)) = item.get(FILES) else {
            return Err(corrupt("no files".into()));
        };
        let files = unpack(packed.as_ref(), &info.sha256).map_err(corrupt)?;
        Ok(StoredDefinition { info, files })
    }

    async fn latest(&self, name: &str) -> Result<Option<VersionInfo>, DefinitionError> {
        check_name(name)?;
        Ok(self
            .item(head_key(name), "read definition")
            .await?
            .as_ref()
            .and_then(info))
    }

    /// A scan of the table for head items (one per definition, beside one per campaign:
    /// the table stays small).
    async fn list(&self) -> Result<Vec<VersionInfo>, DefinitionError> {
        let mut heads = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("#k = :head")
                .expression_attribute_names("#k", KIND)
                .expression_attribute_values(":head", s(HEAD))
                .projection_expression(INFO)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error("list definitions", describe(&e)))?;
            heads.extend(out.items().iter().filter_map(info));
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        heads.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(heads)
    }

    async fn versions(&self, name: &str) -> Result<Vec<VersionInfo>, DefinitionError> {
        let Some(head) = self.latest(name).await? else {
            return Ok(Vec::new());
        };
        let keys = (1..=head.version)
            .map(|v| Item::from([("campaignId".to_owned(), s(version_key(name, v)))]))
            .collect();
        let policy = BatchGetPolicy {
            unprocessed: Unprocessed::Retry { calls: 6 },
            consistent: true,
        };
        let items = batch_get(&self.client, &self.table, keys, Some(INFO), policy)
            .await
            .map_err(|e| self.error("read definition versions", format!("{e:?}")))?;
        let mut versions: Vec<VersionInfo> = items.iter().filter_map(info).collect();
        versions.sort_by_key(|v| v.version);
        Ok(versions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_version_and_never_look_like_a_campaign() {
        assert_eq!(head_key("digest"), "definition#digest");
        assert_eq!(version_key("digest", 1), "definition#digest#000001");
        assert!(version_key("digest", 2) < version_key("digest", 10));
        assert!(crate::domain::campaign::CampaignId::parse(&head_key("digest")).is_err());
    }

    #[test]
    fn the_item_size_counts_names_and_values() {
        let info = VersionInfo {
            name: "digest".into(),
            version: 12,
            sha256: "ab".into(),
            pushed_at_ms: 1,
            pushed_by: None,
            schedule: None,
        };
        let mut item = info_item(version_key("digest", 12), VERSION, &info);
        let before = item_bytes(&item);
        item.insert(FILES.into(), AttributeValue::B(Blob::new(vec![0; 1000])));
        assert_eq!(item_bytes(&item), before + FILES.len() + 1000);
        assert!(before > "campaignIddefinition#digest#000012".len());
    }
}
