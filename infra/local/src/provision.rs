//! Creates what template.yaml declares on the local stack (queues with DLQs and redrive
//! policies, the sends table with TTL and its index, generated secrets, the SES
//! configuration set, the verified sender, MongoDB's indexes) under a name prefix, so that every test and demo
//! gets its own resources. Idempotent: a secret that exists keeps its value.

use crate::names;
use crate::stack::Stack;
use crate::template::{IndexSpec, Template};
use anyhow::{anyhow, Context, Result};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification, WarmThroughput,
};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub struct StackOptions {
    /// Prefix of every resource name, e.g. `demo-1732300000`.
    pub prefix: String,
    /// Parameter values over the template's defaults (MongoDbUri has none).
    pub parameters: BTreeMap<String, String>,
    /// Queue VisibilityTimeout overrides by logical id (tests that wait out timeouts).
    pub visibility_timeouts: BTreeMap<String, u32>,
    /// The MongoDB URI to store in a Secrets Manager secret named by `MongoDbUriSecretName`,
    /// exactly as a deployment does it.
    pub mongodb_uri: Option<String>,
    /// The URL of a function with a Function URL, by logical id (default: `local_function_url`).
    pub function_urls: BTreeMap<String, String>,
}

/// Where a function's Function URL points on the local stack unless told otherwise: the
/// address `mailctl serve-unsubscribe` (Unsubscribe) or `mailctl serve-open-content`
/// (OpenContent) listens on by default.
pub fn local_function_url(function: &str) -> &'static str {
    match function {
        names::OPEN_CONTENT => "http://127.0.0.1:8026/",
        _ => "http://127.0.0.1:8025/",
    }
}

/// The template parameter that names the MongoDB URI secret.
pub const MONGODB_SECRET_PARAMETER: &str = names::MONGODB_URI_SECRET_NAME;

pub async fn provision(
    sdk: &aws_config::SdkConfig,
    template: Template,
    options: StackOptions,
) -> Result<Stack> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut overrides = options.parameters.clone();
    if let Some(uri) = &options.mongodb_uri {
        let name = format!("{}-mongodb-uri", options.prefix);
        store_secret(sdk, &name, uri).await?;
        overrides.insert(MONGODB_SECRET_PARAMETER.into(), name);
    }
    let template = Template::parse_with(&template.source, &overrides)?;
    let parameters: BTreeMap<String, String> = template
        .parameters
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    create_indexes(&options, &parameters).await?;
    let mut stack = Stack {
        template: template.clone(),
        prefix: options.prefix.clone(),
        sdk: sdk.clone(),
        parameters,
        queue_urls: BTreeMap::new(),
        queue_arns: BTreeMap::new(),
        table_names: BTreeMap::new(),
        visibility_timeouts: BTreeMap::new(),
        names: BTreeMap::new(),
    };

    create_queues(&sqs, &template, &options, &mut stack).await?;
    create_tables(sdk, &template, &options, &mut stack).await?;
    name_other_resources(sdk, &template, &options, &mut stack).await?;
    crate::event_sources::register(&mut stack).await?;
    if let Some(sender) = stack.parameters.get("SenderAddress") {
        verify_identity(sdk, sender).await?;
    }
    crate::iam::register(&stack).await?;
    Ok(stack)
}

/// The indexes, as a deployment creates them (`mailctl create-indexes`): the functions only
/// check for them.
async fn create_indexes(
    options: &StackOptions,
    parameters: &BTreeMap<String, String>,
) -> Result<()> {
    if let (Some(uri), Some(database)) = (
        &options.mongodb_uri,
        parameters.get(names::MONGODB_DATABASE),
    ) {
        let db = mongodb::Client::with_uri_str(uri)
            .await
            .context("connecting to MongoDB to create the indexes")?
            .database(database);
        mailflow::adapters::mongo::create_indexes(&db)
            .await
            .with_context(|| format!("creating the indexes in MongoDB database {database}"))?;
    }
    Ok(())
}

/// The template's queues, dead-letter queues first (the others name them in their redrive
/// policy).
async fn create_queues(
    sqs: &aws_sdk_sqs::Client,
    template: &Template,
    options: &StackOptions,
    stack: &mut Stack,
) -> Result<()> {
    let mut queues = template.queues.clone();
    queues.sort_by_key(|q| q.redrive.is_some());
    for queue in &queues {
        let name = format!("{}-{}", options.prefix, queue.logical_id);
        let visibility = options
            .visibility_timeouts
            .get(&queue.logical_id)
            .copied()
            .unwrap_or(queue.visibility_timeout);
        let mut request = sqs.create_queue().queue_name(&name).attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility.to_string(),
        );
        if let Some(retention) = queue.retention {
            request = request.attributes(
                QueueAttributeName::MessageRetentionPeriod,
                retention.to_string(),
            );
        }
        if let Some((dlq, max_receive)) = &queue.redrive {
            let arn = stack.queue_arns.get(dlq).with_context(|| {
                format!(
                    "{}: dead-letter queue {dlq} is not a queue of the template",
                    queue.logical_id
                )
            })?;
            let policy =
                serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive});
            request = request.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
        }
        let url = request
            .send()
            .await
            .with_context(|| format!("creating queue {name}"))?
            .queue_url
            .ok_or_else(|| anyhow!("CreateQueue returned no URL for {name}"))?;
        let arn = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .with_context(|| format!("reading the ARN of {name}"))?
            .attributes
            .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
            .ok_or_else(|| anyhow!("no QueueArn for {name}"))?;
        stack.queue_urls.insert(queue.logical_id.clone(), url);
        stack.queue_arns.insert(queue.logical_id.clone(), arn);
        stack
            .visibility_timeouts
            .insert(queue.logical_id.clone(), visibility);
    }

    Ok(())
}

/// The template's DynamoDB tables: keys, indexes and TTL.
async fn create_tables(
    sdk: &aws_config::SdkConfig,
    template: &Template,
    options: &StackOptions,
    stack: &mut Stack,
) -> Result<()> {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    for table in &template.tables {
        let name = format!("{}-{}", options.prefix, table.logical_id);
        let mut keys = vec![(table.hash_key.clone(), KeyType::Hash)];
        if let Some(range) = &table.range_key {
            keys.push((range.clone(), KeyType::Range));
        }
        let mut request = dynamo
            .create_table()
            .table_name(&name)
            .billing_mode(BillingMode::PayPerRequest)
            .set_warm_throughput(warm_throughput(table.warm_writes));
        let mut attributes: Vec<String> = keys.iter().map(|(a, _)| a.clone()).collect();
        for (attribute, kind) in keys {
            request = request.key_schema(
                KeySchemaElement::builder()
                    .attribute_name(&attribute)
                    .key_type(kind)
                    .build()?,
            );
        }
        for index in &table.indexes {
            request = request.global_secondary_indexes(global_index(index, &mut attributes)?);
        }
        for attribute in attributes {
            request = request.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(attribute)
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            );
        }
        match request.send().await {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_in_use_exception()) => {}
            Err(e) => return Err(e).with_context(|| format!("creating table {name}")),
        }
        if let Some(ttl) = &table.ttl_attribute {
            enable_ttl(&dynamo, &name, ttl).await?;
        }
        stack.table_names.insert(table.logical_id.clone(), name);
    }

    Ok(())
}

/// A global secondary index projecting every attribute; its key attributes are added to
/// `attributes` (the table's attribute definitions).
fn global_index(index: &IndexSpec, attributes: &mut Vec<String>) -> Result<GlobalSecondaryIndex> {
    let mut gsi = GlobalSecondaryIndex::builder()
        .index_name(&index.name)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
        );
    gsi = gsi.set_warm_throughput(warm_throughput(index.warm_writes));
    for (attribute, kind) in std::iter::once((&index.hash_key, KeyType::Hash))
        .chain(index.range_key.iter().map(|r| (r, KeyType::Range)))
    {
        gsi = gsi.key_schema(
            KeySchemaElement::builder()
                .attribute_name(attribute)
                .key_type(kind)
                .build()?,
        );
        if !attributes.contains(attribute) {
            attributes.push(attribute.clone());
        }
    }
    Ok(gsi.build()?)
}

/// A table's or index's `WarmThroughput` as the template sets it (None: DynamoDB's own).
fn warm_throughput(writes: Option<u32>) -> Option<WarmThroughput> {
    writes.map(|units| {
        WarmThroughput::builder()
            .write_units_per_second(i64::from(units))
            .build()
    })
}

/// Turns on TTL on table `name`, by attribute `ttl`.
async fn enable_ttl(dynamo: &aws_sdk_dynamodb::Client, name: &str, ttl: &str) -> Result<()> {
    dynamo
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(ttl)
                .enabled(true)
                .build()?,
        )
        .send()
        .await
        .with_context(|| format!("enabling TTL on {name}"))?;
    Ok(())
}

/// Generated secrets, configuration sets, roles, functions and Function URLs, by the logical
/// ids the template refers to them with.
async fn name_other_resources(
    sdk: &aws_config::SdkConfig,
    template: &Template,
    options: &StackOptions,
    stack: &mut Stack,
) -> Result<()> {
    for id in &template.generated_secrets {
        let name = format!("{}-{id}", options.prefix);
        if !secret_exists(sdk, &name).await? {
            store_secret(sdk, &name, &random_key()?).await?;
        }
        stack.names.insert(id.clone(), name);
    }
    for id in &template.configuration_sets {
        let name = format!("{}-{id}", options.prefix);
        create_configuration_set(sdk, &name).await?;
        stack.names.insert(id.clone(), name);
    }
    let scheduler = aws_sdk_scheduler::Client::new(sdk);
    for id in &template.schedule_groups {
        let name = format!("{}-{id}", options.prefix);
        match scheduler.create_schedule_group().name(&name).send().await {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conflict_exception()) => {}
            Err(e) => return Err(e).with_context(|| format!("creating schedule group {name}")),
        }
        stack.names.insert(id.clone(), name);
    }
    for id in &template.roles {
        let arn = format!("arn:aws:iam::000000000000:role/{}-{id}", options.prefix);
        stack.names.insert(id.clone(), arn);
    }
    // A function's ARN (`!GetAtt X.Arn`), its name generated as CloudFormation generates it:
    // a schedule's target, which the local scheduler checks the schedule's role may invoke.
    let region = sdk.region().map_or("us-east-1".into(), |r| r.to_string());
    for function in &template.functions {
        let id = &function.logical_id;
        let arn = crate::iam::function_arn(&region, &options.prefix, id);
        stack.names.insert(id.clone(), arn);
    }
    for function in template.functions.iter().filter(|f| f.function_url) {
        let url = options
            .function_urls
            .get(&function.logical_id)
            .map_or(local_function_url(&function.logical_id), String::as_str);
        stack
            .names
            .insert(format!("{}Url", function.logical_id), url.to_owned());
    }

    Ok(())
}

/// 32 random bytes as hex, like the 64 characters the deployment generates.
fn random_key() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for a signing key")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

async fn secret_exists(sdk: &aws_config::SdkConfig, name: &str) -> Result<bool> {
    match aws_sdk_secretsmanager::Client::new(sdk)
        .describe_secret()
        .secret_id(name)
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(e).with_context(|| format!("looking up secret {name}")),
    }
}

async fn create_configuration_set(sdk: &aws_config::SdkConfig, name: &str) -> Result<()> {
    match aws_sdk_sesv2::Client::new(sdk)
        .create_configuration_set()
        .configuration_set_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        // SES answers AlreadyExistsException; the emulator names it after the resource.
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_already_exists_exception()
                    || e.meta().code() == Some("ConfigurationSetAlreadyExistsException")
            }) =>
        {
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("creating configuration set {name}")),
    }
}

/// Creates (or updates) a secret with a string value.
pub async fn store_secret(sdk: &aws_config::SdkConfig, name: &str, value: &str) -> Result<()> {
    let secrets = aws_sdk_secretsmanager::Client::new(sdk);
    match secrets
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_exists_exception()) =>
        {
            secrets
                .put_secret_value()
                .secret_id(name)
                .secret_string(value)
                .send()
                .await
                .with_context(|| format!("updating secret {name}"))?;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("creating secret {name}")),
    }
}

/// Verifies a sender identity (the emulator verifies on creation).
pub async fn verify_identity(sdk: &aws_config::SdkConfig, identity: &str) -> Result<()> {
    let ses = aws_sdk_sesv2::Client::new(sdk);
    match ses
        .create_email_identity()
        .email_identity(identity)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_already_exists_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("verifying sender {identity}")),
    }
}
