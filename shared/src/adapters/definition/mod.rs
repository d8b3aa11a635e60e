//! A campaign definition run against MongoDB (`domain::definition`): its audience, streamed
//! in user id order and merge-joined with the users as the digest's is
//! (`directory::Audience`), and its data, read per batch of users. The window's bounds, the
//! campaign's id and its parameters reach the team's pipelines as `let` variables, never as
//! text in them. MongoDB's refusals of a pipeline are the definition's fault
//! (`RunError::Definition`: the run fails once, with the reason); a store that does not
//! answer is retried (`RunError::Store`).

mod audience;
mod errors;
mod prepare;

pub use audience::{DefinitionAudience, OddAudience};
pub use errors::RunError;

use super::bson_ids;
use super::directory::{bson_time, IdType};
use super::preferences::StandingFields;
use super::profile::ProfileFields;
use crate::domain::campaign::Window;
use crate::domain::definition::Definition;
use crate::domain::topics::Topic;
use crate::domain::user_id::UserId;
use mongodb::bson::{doc, Bson, Document};
use mongodb::Database;
use std::sync::Arc;
use std::time::Duration;

/// One campaign of a definition: what its queries run against and with.
#[derive(Clone)]
pub struct DefinitionRun(Arc<Inner>);

struct Inner {
    db: Database,
    definition: Definition,
    topic: Topic,
    campaign: String,
    /// `$$since`, `$$until`, `$$campaign`, `$$params` and each `$$<param>`.
    variables: Document,
    audience: Vec<Document>,
    data: Vec<(String, Vec<Document>)>,
    recipients: ProfileFields,
    max_time: Option<Duration>,
}

impl DefinitionRun {
    /// The run of `definition`'s campaign `campaign` over `window`. Its pipelines and
    /// parameters are read as Extended JSON once, here: one that is not is the
    /// definition's fault.
    pub fn new(
        db: Database,
        definition: Definition,
        topic: Topic,
        window: &Window,
        campaign: &str,
    ) -> Result<Self, RunError> {
        let fault = |reason: String| RunError::definition(&definition.name, reason);
        let mut params = Document::new();
        for (name, value) in &definition.params {
            let value = Bson::try_from(value.clone())
                .map_err(|e| fault(format!("params.{name} is not Extended JSON: {e}")))?;
            params.insert(name.clone(), value);
        }
        let mut variables = params.clone();
        variables.insert("since", bson_time(window.since));
        variables.insert("until", bson_time(window.until));
        variables.insert("campaign", campaign);
        variables.insert("params", params);
        let audience = stages(&definition.audience.pipeline)
            .map_err(|e| fault(format!("audience.pipeline {e}")))?;
        let mut data = Vec::new();
        for (name, query) in &definition.data {
            let pipeline = stages(&query.query.pipeline)
                .map_err(|e| fault(format!("data.{name}.pipeline {e}")))?;
            data.push((name.clone(), pipeline));
        }
        let r = &definition.recipients;
        let recipients = ProfileFields {
            collection: r.collection.clone(),
            email: r.email.clone(),
            name: r.name.clone(),
            language: r.language.clone(),
            zone: r.zone.clone(),
            standing: StandingFields::at(&r.subscribed, &r.suppressed, &r.topics),
        };
        Ok(Self(Arc::new(Inner {
            db,
            topic,
            campaign: campaign.to_owned(),
            variables,
            audience,
            data,
            recipients,
            max_time: None,
            definition,
        })))
    }

    /// Every query of the run gives up after `limit` (MongoDB's `maxTimeMS`): one slower
    /// than that is the definition's fault (an index it needs, a pipeline too broad).
    pub fn with_max_time(mut self, limit: Duration) -> Self {
        let inner = Arc::get_mut(&mut self.0).expect("configured before it is shared");
        inner.max_time = Some(limit);
        self
    }

    pub fn definition(&self) -> &Definition {
        &self.0.definition
    }

    pub fn campaign(&self) -> &str {
        &self.0.campaign
    }

    /// The `let` variables every pipeline of the run gets.
    pub fn variables(&self) -> &Document {
        &self.0.variables
    }

    /// The audience pipeline of one id type's pass after `after` (a checkpoint): the range
    /// on `by` first, so that a continuation starts where it left off (on an index of
    /// `by`), then the team's stages, then the users' order. Exposed so a test can
    /// `explain` it.
    pub fn audience_pipeline(&self, kind: IdType, after: Option<&UserId>) -> Vec<Document> {
        let by = self.0.definition.audience_by.as_str();
        let mut pipeline = vec![doc! { "$match": { by: kind.range(after) } }];
        pipeline.extend(self.0.audience.iter().cloned());
        pipeline.push(doc! { "$sort": { by: 1 } });
        pipeline.push(match by {
            "_id" => doc! { "$project": { "_id": 1 } },
            by => doc! { "$project": { "_id": 0, by: 1 } },
        });
        pipeline
    }

    fn fault(&self, reason: String) -> RunError {
        RunError::definition(&self.0.definition.name, reason)
    }
}

/// A pipeline's stages as BSON documents.
fn stages(pipeline: &[serde_json::Value]) -> Result<Vec<Document>, String> {
    pipeline
        .iter()
        .enumerate()
        .map(|(i, stage)| match Bson::try_from(stage.clone()) {
            Ok(Bson::Document(stage)) => Ok(stage),
            Ok(other) => Err(format!(
                "stage {} is {} (expected a document such as {{\"$match\": ...}})",
                i + 1,
                bson_ids::type_name(Some(&other))
            )),
            Err(e) => Err(format!("stage {} is not Extended JSON: {e}", i + 1)),
        })
        .collect()
}
