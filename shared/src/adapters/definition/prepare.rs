//! A batch of users made ready: their documents (one `$in`), each data query once for the
//! whole batch (`{by: {$in: ids}}` first, `$$userIds` among the variables), its results
//! given to the user their `user` field names, then the skip rules in order.

use super::errors::classify;
use super::{DefinitionRun, RunError};
use crate::adapters::bson_ids::{self as ids, from_bson};
use crate::adapters::field_path;
use crate::adapters::profile::Profile;
use crate::domain::definition::{DataQuery, EmailData, Prepared, SkipWhen};
use crate::domain::digest::SkipReason;
use crate::domain::text::printable;
use crate::domain::user_id::UserId;
use futures::TryStreamExt;
use mongodb::action::Action;
use mongodb::bson::{doc, Bson, Document};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

impl DefinitionRun {
    /// Each of `user_ids`' email inputs, in their order, or why they get none: the reasons
    /// of `SkipReason` as today (`vanished`, `unsubscribed`, `no_address`...) and the skip
    /// rules' own, counted alike. 1 + one per data query round trips, whatever the batch.
    pub async fn prepare(&self, user_ids: &[UserId]) -> Result<Vec<Prepared>, RunError> {
        let inner = &self.0;
        let definition = &inner.definition;
        let classify_users = |e| classify(&definition.name, "recipients", e);
        let wanted: Vec<Bson> = user_ids.iter().map(ids::to_bson).collect();
        let documents: HashMap<UserId, Document> = inner
            .db
            .collection::<Document>(&inner.recipients.collection)
            .find(doc! { "_id": { "$in": wanted } })
            .projection(inner.recipients.projection(&inner.topic))
            .optional(inner.max_time, |a, t| a.max_time(t))
            .await
            .map_err(classify_users)?
            .try_filter_map(
                |d| async move { Ok(d.get("_id").and_then(from_bson).map(|id| (id, d))) },
            )
            .try_collect()
            .await
            .map_err(classify_users)?;
        let profiles: Vec<Result<Profile, SkipReason>> = user_ids
            .iter()
            .map(|id| match documents.get(id) {
                Some(user) => Profile::read(user, &inner.recipients, &inner.topic),
                None => Err(SkipReason::Vanished),
            })
            .collect();
        let sendable: Vec<UserId> = user_ids
            .iter()
            .zip(&profiles)
            .filter(|(_, p)| p.is_ok())
            .map(|(id, _)| id.clone())
            .collect();

        let mut results: BTreeMap<&str, HashMap<UserId, Vec<Value>>> = BTreeMap::new();
        for ((name, pipeline), query) in inner.data.iter().zip(definition.data.values()) {
            let found = self.data(name, query, pipeline, &sendable).await?;
            results.insert(name.as_str(), found);
        }

        let mut prepared = Vec::with_capacity(user_ids.len());
        for (user_id, profile) in user_ids.iter().zip(profiles) {
            let profile = match profile {
                Ok(profile) => profile,
                Err(reason) => {
                    prepared.push(Prepared::Skip(reason.as_str().to_owned()));
                    continue;
                }
            };
            let mut data = BTreeMap::new();
            for (name, query) in &definition.data {
                // Cloned, not taken: a batch may name one user twice (SQS delivers at least
                // once), and each of their records gets the same data.
                let mut found = results
                    .get(name.as_str())
                    .and_then(|r| r.get(user_id))
                    .cloned()
                    .unwrap_or_default();
                let value = match query.first {
                    true if found.is_empty() => Value::Null,
                    true => found.swap_remove(0),
                    false => Value::Array(found),
                };
                data.insert(name.clone(), value);
            }
            prepared.push(match self.skipped(&data)? {
                Some(reason) => Prepared::Skip(reason),
                None => Prepared::Ready(EmailData {
                    user_id: user_id.clone(),
                    email: profile.email,
                    name: profile.name,
                    language: profile.language,
                    zone: profile.zone,
                    data,
                }),
            });
        }
        Ok(prepared)
    }

    /// The first skip rule that holds, if one does.
    fn skipped(&self, data: &BTreeMap<String, Value>) -> Result<Option<String>, RunError> {
        for rule in &self.0.definition.skip {
            let Some(value) = data.get(&rule.data) else {
                return Err(self.fault(format!(
                    "[[skip]] names data.{} but there is no such data query",
                    rule.data
                )));
            };
            let holds = match rule.when {
                SkipWhen::Empty => match value {
                    Value::Null => true,
                    Value::Array(a) => a.is_empty(),
                    _ => false,
                },
            };
            if holds {
                return Ok(Some(rule.reason.clone()));
            }
        }
        Ok(None)
    }

    /// One data query for the batch: each result (relaxed Extended JSON, strings printable)
    /// under the user its `user` field names, in the pipeline's order (with `first`, only
    /// the first is kept).
    async fn data(
        &self,
        name: &str,
        query: &DataQuery,
        pipeline: &[Document],
        users: &[UserId],
    ) -> Result<HashMap<UserId, Vec<Value>>, RunError> {
        let mut found: HashMap<UserId, Vec<Value>> = HashMap::new();
        if users.is_empty() {
            return Ok(found);
        }
        let inner = &self.0;
        let label = format!("data.{name}");
        let classify = |e| classify(&inner.definition.name, &label, e);
        let ids: Vec<Bson> = users.iter().map(ids::to_bson).collect();
        let mut stages = vec![doc! { "$match": { &query.by: { "$in": ids.clone() } } }];
        stages.extend(pipeline.iter().cloned());
        let mut variables = inner.variables.clone();
        variables.insert("userIds", ids);
        let mut cursor = inner
            .db
            .collection::<Document>(&query.query.collection)
            .aggregate(stages)
            .let_vars(variables)
            .optional(inner.max_time, |a, t| a.max_time(t))
            .allow_disk_use(true)
            .await
            .map_err(classify)?;
        let batch: HashSet<&UserId> = users.iter().collect();
        while let Some(result) = cursor.try_next().await.map_err(classify)? {
            let owner = field_path::get(&result, &query.user).value();
            if let Some(Bson::Array(_)) = owner {
                // `{by: {$in: ids}}` matches an array holding an id: such a document names
                // no one user (as the digest's queries, it is left out).
                tracing::warn!(query = %label, field = %query.user, "skipped a result whose user field is an array");
                continue;
            }
            let Some(user) = owner.and_then(from_bson).filter(|u| batch.contains(u)) else {
                return Err(self.fault(format!(
                    "{label}: a result's `user` field {} is {} where a user id of the batch was expected; set `user` to the field that names the user (`_id` after a `$group` by it)",
                    query.user,
                    match owner.and_then(from_bson) {
                        Some(other) => format!("the id {other}, not one of the batch's"),
                        None => ids::type_name(owner).to_owned(),
                    }
                )));
            };
            let list = found.entry(user).or_default();
            if query.first && !list.is_empty() {
                continue;
            }
            list.push(printable_strings(
                Bson::Document(result).into_relaxed_extjson(),
            ));
        }
        Ok(found)
    }
}

/// Every string of a value as `printable` makes it (names are data, never markup or
/// control characters); keys are the pipeline's own.
fn printable_strings(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(printable(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(printable_strings).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (k, printable_strings(v)))
                .collect(),
        ),
        other => other,
    }
}
