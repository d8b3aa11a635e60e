//! A definition's audience: its pipeline's user ids, one pass per id type (strings, then
//! ObjectIds), merge-joined with the users exactly as the digest's audience is
//! (`directory::Audience`'s `Pass`: the same topic rule, the same exclusion counts), and
//! resumable from a checkpoint.

use super::errors::classify;
use super::DefinitionRun;
use crate::adapters::directory::{users_cursor, IdType, Join, Pass, CURSOR_BATCH};
use crate::adapters::profile;
use crate::domain::digest::OddFollow;
use crate::domain::topics::ExclusionCounts;
use crate::domain::user_id::UserId;
use crate::ports::{AudienceMember, AudienceScan, StoreError};
use futures::TryStreamExt;
use mongodb::action::Action;
use mongodb::bson::{doc, Document};
use std::sync::Arc;

pub struct DefinitionAudience {
    run: DefinitionRun,
    join: Arc<Join>,
    after: Option<UserId>,
    passes: std::vec::IntoIter<IdType>,
    current: Option<Pass>,
    excluded: ExclusionCounts,
    fault: Option<String>,
}

/// The audience's results whose `by` is not a usable user id (a number, null, missing,
/// empty, an array...): nobody is reached through them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OddAudience {
    pub count: u64,
    /// Some of them, described (collection, document, field).
    pub described: Vec<OddFollow>,
}

impl DefinitionRun {
    /// The audience after `after` (a checkpoint), or all of it: `AudienceScan`'s contract,
    /// as `directory::Audience` keeps it.
    pub fn audience(&self, after: Option<UserId>) -> DefinitionAudience {
        let passes: Vec<IdType> = IdType::ALL
            .into_iter()
            .filter(|kind| after.as_ref().is_none_or(|a| *kind >= IdType::of(a)))
            .collect();
        let definition = self.definition();
        DefinitionAudience {
            run: self.clone(),
            join: Arc::new(Join {
                keys_collection: definition.audience.collection.clone(),
                by: definition.audience_by.clone(),
                users: self.0.recipients.clone(),
            }),
            after,
            passes: passes.into_iter(),
            current: None,
            excluded: ExclusionCounts::default(),
            fault: None,
        }
    }

    /// The audience's results whose `by` no user can have: how many, and up to `limit` of
    /// them described. One pass over the audience pipeline's output.
    pub async fn odd_audience(&self, limit: usize) -> Result<OddAudience, super::RunError> {
        let definition = self.definition();
        let by = definition.audience_by.as_str();
        let field = format!("${by}");
        let mut pipeline = self.0.audience.clone();
        pipeline.push(doc! { "$match": { "$expr": { "$not": [{ "$and": [
            { "$in": [{ "$type": &field }, ["string", "objectId"]] },
            { "$ne": [&field, ""] },
        ] }] } } });
        pipeline.push(doc! { "$project": { by: 1 } });
        let collection = &definition.audience.collection;
        let classify = |e| classify(&definition.name, "audience", e);
        let mut cursor = self
            .0
            .db
            .collection::<Document>(collection)
            .aggregate(pipeline)
            .let_vars(self.0.variables.clone())
            .optional(self.0.max_time, |a, t| a.max_time(t))
            .allow_disk_use(true)
            .await
            .map_err(classify)?;
        let mut odd = OddAudience::default();
        while let Some(d) = cursor.try_next().await.map_err(classify)? {
            odd.count += 1;
            if odd.described.len() < limit {
                odd.described.push(OddFollow {
                    reason: profile::describe(collection, &d, by, "a string or an ObjectId"),
                });
            }
        }
        Ok(odd)
    }
}

impl DefinitionAudience {
    /// The next user of the audience, in ascending id order (strings, then ObjectIds).
    pub async fn next_member(&mut self) -> Result<Option<AudienceMember>, super::RunError> {
        let classify = |e| classify(&self.run.definition().name, "audience", e);
        loop {
            let pass = match &mut self.current {
                Some(pass) => pass,
                None => {
                    let Some(kind) = self.passes.next() else {
                        return Ok(None);
                    };
                    let pass = open_pass(&self.run, &self.join, kind, self.after.as_ref())
                        .await
                        .map_err(classify)?;
                    self.current.insert(pass)
                }
            };
            match pass.next(&self.run.0.topic).await.map_err(classify)? {
                Some((user, None)) => return Ok(Some(user)),
                Some((_, Some(exclusion))) => self.excluded.add(exclusion),
                None => self.current = None,
            }
        }
    }
}

/// Not a method: a `&self` held across its awaits would make the future need
/// `DefinitionAudience: Sync`, which the driver's cursors are not.
async fn open_pass(
    run: &DefinitionRun,
    join: &Arc<Join>,
    kind: IdType,
    after: Option<&UserId>,
) -> mongodb::error::Result<Pass> {
    let inner = &run.0;
    let keys = inner
        .db
        .collection::<Document>(&join.keys_collection)
        .aggregate(run.audience_pipeline(kind, after))
        .let_vars(inner.variables.clone())
        .optional(inner.max_time, |a, t| a.max_time(t))
        .allow_disk_use(true)
        .batch_size(CURSOR_BATCH)
        .await?;
    let users = users_cursor(&inner.db, &join.users, &inner.topic.id, kind, after).await?;
    Ok(Pass::new(kind, keys, users, join.clone()))
}

impl AudienceScan for DefinitionAudience {
    async fn next(&mut self) -> Result<Option<AudienceMember>, StoreError> {
        match self.next_member().await {
            Ok(member) => Ok(member),
            Err(super::RunError::Store(e)) => Err(e),
            Err(fault) => {
                let reason = fault.to_string();
                self.fault = Some(reason.clone());
                Err(StoreError(reason))
            }
        }
    }

    fn excluded(&self) -> &ExclusionCounts {
        &self.excluded
    }

    fn definition_fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }
}
