//! A provisioned stack: the template with every resource's local name, and the environment
//! each function gets from it (as CloudFormation resolves it on AWS).

use crate::names;
use crate::template::{EnvValue, Template};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Stack {
    pub template: Template,
    pub prefix: String,
    pub sdk: aws_config::SdkConfig,
    pub parameters: BTreeMap<String, String>,
    pub queue_urls: BTreeMap<String, String>,
    pub queue_arns: BTreeMap<String, String>,
    pub table_names: BTreeMap<String, String>,
    pub visibility_timeouts: BTreeMap<String, u32>,
    /// What other resources are called here: secrets, configuration sets, Function URLs
    /// (as `<FunctionId>Url`), by the logical id template.yaml refers to them with.
    pub names: BTreeMap<String, String>,
}

impl Stack {
    /// Points `function`'s Function URL at `url` (a local server started after provisioning,
    /// on a port only known then): the environment that refers to it follows.
    pub fn set_function_url(&mut self, function: &str, url: &str) {
        self.names.insert(format!("{function}Url"), url.to_owned());
    }

    pub fn queue_url(&self, logical_id: &str) -> Result<&str> {
        self.queue_urls
            .get(logical_id)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("no queue {logical_id} in this stack"))
    }

    /// The UUIDs of the campaign queues' event source mappings, comma-separated (the
    /// template's `EventSourceMappingIds` output).
    pub fn event_source_mappings(&self) -> Result<String> {
        let mut ids = Vec::new();
        for function in names::CAMPAIGN_CONSUMERS {
            for event in &self.template.function(function)?.sqs_events {
                ids.push(
                    self.names
                        .get(&event.mapping)
                        .ok_or_else(|| anyhow!("no event source mapping {}", event.mapping))?
                        .clone(),
                );
            }
        }
        Ok(ids.join(","))
    }

    pub fn table_name(&self, logical_id: &str) -> Result<&str> {
        self.table_names
            .get(logical_id)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("no table {logical_id} in this stack"))
    }

    /// A function's environment exactly as template.yaml sets it, references resolved, with
    /// the credentials of its role that Lambda adds (`crate::role_keys`).
    pub fn env(&self, function: &str) -> Result<BTreeMap<String, String>> {
        let spec = self.template.function(function)?;
        let mut env = match &spec.role {
            Some(role) => crate::role_keys::role_env(&self.prefix, role),
            None => BTreeMap::new(),
        };
        for (name, value) in &spec.env {
            let resolved = self
                .resolve(value)
                .with_context(|| format!("{function}: {name}"))?;
            env.insert(name.clone(), resolved);
        }
        Ok(env)
    }

    fn resolve(&self, value: &EnvValue) -> Result<String> {
        Ok(match value {
            EnvValue::Literal(v) => v.clone(),
            EnvValue::Ref(id) => match [
                &self.parameters,
                &self.queue_urls,
                &self.table_names,
                &self.names,
            ]
            .iter()
            .find_map(|values| values.get(id))
            {
                Some(v) => v.clone(),
                None => bail!("refers to {id}, which has no value (a parameter without default?)"),
            },
            EnvValue::Arn(id) => match self.queue_arns.get(id).or_else(|| self.names.get(id)) {
                Some(arn) => arn.clone(),
                None => bail!("refers to {id}'s ARN, which this stack does not have"),
            },
            EnvValue::Join(separator, parts) => parts
                .iter()
                .map(|p| self.resolve(p))
                .collect::<Result<Vec<_>>>()?
                .join(separator),
        })
    }
}
