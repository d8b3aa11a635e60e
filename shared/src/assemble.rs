//! One assembly point per function: each stage built from its configuration and the AWS SDK
//! configuration, with its clients, secrets and cold-start checks. The Lambda binaries, the
//! local simulator (`mailflow_local::pipeline::LocalPipeline`) and `mailctl preview` all build their stages
//! here, so a change to how a function is put together is made once.

use crate::adapters::campaigns::CampaignsTable;
use crate::adapters::definitions::DefinitionsTable;
use crate::adapters::event_sources::{ConsumerMapping, EventSourceMappings, StackSending};
use crate::adapters::mongo::MongoConnectError;
use crate::adapters::mongo_directory::MongoDirectory;
use crate::adapters::open_content::OpenContentTable;
use crate::adapters::picks::MongoPicks;
use crate::adapters::rate_item::RateItem;
use crate::adapters::recipients::CampaignRecipients;
use crate::adapters::secrets::SecretError;
use crate::adapters::sends::{SendRecords, SendsLedger};
use crate::adapters::ses::SesMailer;
use crate::adapters::sqs::SqsQueue;
use crate::adapters::subscribers::{LazySubscribers, Subscribers};
use crate::adapters::waiting::WaitingTable;
use crate::adapters::{
    dynamodb_client, lambda_client, mongo, scheduler_client, secrets, sqs_client,
};
use crate::config::{
    ConfigError, CreateEmailsConfig, GetUsersConfig, OpenContentFunctionConfig, ProcessEnv,
    RateControlConfig, ReputationGuardConfig, SendEmailConfig, SesEventsConfig, Source,
    UnsubscribeFunctionConfig,
};
use crate::ports::{Mailer, StoreError};
use crate::runtime::telemetry;
use crate::stages::create_emails::CreateEmails;
use crate::stages::get_users::GetUsers;
use crate::stages::open_content::OpenContent;
use crate::stages::preferences::Unsubscribe;
use crate::stages::rate_control::RateControl;
use crate::stages::reputation_guard::ReputationGuard;
use crate::stages::send_email::{SendEmail, Wanted};
use crate::stages::ses_events::SesEvents;
use aws_config::SdkConfig;
use std::sync::Arc;

/// A function's cold start up to its stage: logs, then its configuration (or exit with one
/// line naming the variable), then the SDK's configuration.
pub async fn start<C>(
    config: impl FnOnce(&dyn Source) -> Result<C, ConfigError>,
) -> (C, SdkConfig) {
    telemetry::init();
    let config = telemetry::or_exit(config(&ProcessEnv));
    (config, crate::adapters::aws_config().await)
}

/// Why a function could not start: one line naming what to fix.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error(transparent)]
    Mongo(#[from] MongoConnectError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The bundled digest does not compile (a build that should never have been shipped).
    #[error("the bundled digest: {0}")]
    Bundled(#[from] crate::ports::DefinitionError),
    #[error("index check at cold start failed: {0}")]
    Indexes(#[from] StoreError),
}

/// GetUsers as it runs on Lambda: MongoDB's users, the users and continuation queues, the
/// campaigns table.
pub type LambdaGetUsers = GetUsers<MongoDirectory, SqsQueue, CampaignsTable, WaitingTable>;

/// CreateEmails as it runs on Lambda: MongoDB's users, the emails queue, the campaigns table.
pub type LambdaCreateEmails = CreateEmails<MongoDirectory, SqsQueue, CampaignsTable, SendRecords>;

/// SesEvents as it runs on Lambda: the DynamoDB send records and MongoDB's users (each
/// campaign's recipients).
pub type LambdaSesEvents = SesEvents<SendRecords, Subscribers>;

/// Unsubscribe as it runs on Lambda.
pub type LambdaUnsubscribe = Unsubscribe<Subscribers, SendRecords>;

/// OpenContent as it runs on Lambda: the open-content table, MongoDB's users and follows,
/// the send records.
pub type LambdaOpenContent = OpenContent<OpenContentTable, MongoPicks, SendRecords>;

/// The ReputationGuard function's stage.
pub type LambdaReputationGuard = ReputationGuard<StackSending>;

/// RateControl as deployed.
pub type LambdaRateControl = RateControl<SesMailer, RateItem>;

/// SendEmail as it runs on Lambda: the DynamoDB ledger, the emails queue, the campaigns table
/// and the stack's rate item in it, the waiting room, the standing read again for an email
/// that waited (the sends table's pending leaves, MongoDB's users), with `mailer` (SES, or a
/// wrapper around it that injects faults).
pub type LambdaSendEmail<M = SesMailer> = SendEmail<
    M,
    SendsLedger,
    SqsQueue,
    CampaignsTable,
    RateItem,
    WaitingTable,
    Wanted<LazySubscribers, SendRecords>,
>;

pub async fn get_users(
    config: GetUsersConfig,
    sdk: &SdkConfig,
) -> Result<LambdaGetUsers, AssembleError> {
    // A build whose bundled digest cannot load stops here, before any campaign registers.
    crate::ports::LoadedDefinition::bundled()?;
    let db = mongo::connect(&config.mongo, sdk, "get-users").await?;
    let sqs = sqs_client(sdk);
    let users = SqsQueue::new(sqs.clone(), &config.users_queue_url);
    let continuation = SqsQueue::new(sqs, &config.continuation_queue_url);
    let dynamodb = dynamodb_client(sdk);
    let campaigns = CampaignsTable::new(dynamodb.clone(), &config.campaigns_table_name);
    let definitions = pushed_definitions(&dynamodb, &config.campaigns_table_name);
    let results = Arc::new(SendRecords::new(dynamodb.clone(), &config.sends_table_name));
    let waiting = WaitingTable {
        dynamodb,
        scheduler: scheduler_client(sdk),
        table: config.waiting_table_name.clone(),
        schedule_group: config.release_schedule_group.clone(),
        scheduler_role_arn: config.release_scheduler_role_arn.clone(),
        dead_letter_arn: config.release_dead_letter_arn.clone(),
        known_shards: Default::default(),
    };
    let stage = GetUsers::new(
        MongoDirectory::new(db),
        users,
        continuation,
        campaigns,
        waiting,
        results,
        config,
    )
    .with_definitions(definitions);
    stage.prepare().await?;
    Ok(stage)
}

/// CreateEmails; `prepare` false skips the cold-start index check (for `mailctl preview`,
/// which only reads). The signing key's secret and MongoDB (its URI's secret, then the index
/// check) are read at once, and the templates are checked while both are in flight: a cold
/// start waits for the slower of the two reads, not for their sum.
pub async fn create_emails(
    config: CreateEmailsConfig,
    sdk: &SdkConfig,
    app_name: &str,
    prepare: bool,
) -> Result<LambdaCreateEmails, AssembleError> {
    let signer = async {
        Ok::<_, AssembleError>(secrets::unsubscribe_signer(&config.unsubscribe, sdk).await?)
    };
    let directory = async {
        let db = mongo::connect(&config.mongo, sdk, app_name).await?;
        if prepare {
            crate::adapters::directory::check_indexes(&db).await?;
        }
        Ok::<_, AssembleError>(MongoDirectory::new(db))
    };
    // Polled last: the two reads above have sent their first request by then. The bundled
    // digest's templates compile and render its samples now, not mid-campaign.
    let bundled = async { Ok::<_, AssembleError>(crate::ports::LoadedDefinition::bundled()?) };
    let (signer, directory, _) = tokio::try_join!(signer, directory, bundled)?;
    let emails = SqsQueue::new(sqs_client(sdk), &config.emails_queue_url);
    let dynamodb = dynamodb_client(sdk);
    let campaigns = CampaignsTable::new(dynamodb.clone(), &config.campaigns_table_name);
    let definitions = pushed_definitions(&dynamodb, &config.campaigns_table_name);
    let pending = SendRecords::new(dynamodb, &config.sends_table_name);
    Ok(
        CreateEmails::new(directory, emails, campaigns, pending, signer, config)
            .with_definitions(definitions),
    )
}

/// The definitions `mailctl campaign push` stored in the campaigns table, each version read
/// once per environment.
fn pushed_definitions(
    dynamodb: &aws_sdk_dynamodb::Client,
    campaigns_table: &str,
) -> Arc<dyn crate::ports::DefinitionLoader> {
    Arc::new(crate::ports::DefinitionCache::new(DefinitionsTable::new(
        dynamodb.clone(),
        campaigns_table,
    )))
}

/// The SES mailer SendEmail's configuration describes.
pub fn ses_mailer(config: &SendEmailConfig, sdk: &SdkConfig) -> SesMailer {
    SesMailer::from_config(sdk, config)
}

/// SendEmail, sending at the stack's shared rate (the rate item in the campaigns table, under
/// the ceiling RateControl writes there). MongoDB is connected at the first standing read,
/// not here: most emails never need one.
pub fn send_email<M: Mailer>(
    config: SendEmailConfig,
    sdk: &SdkConfig,
    mailer: M,
) -> LambdaSendEmail<M> {
    let ledger = SendsLedger::new(
        dynamodb_client(sdk),
        &config.sends_table_name,
        config.retention_days,
    );
    let queue = SqsQueue::new(sqs_client(sdk), &config.emails_queue_url);
    let campaigns = CampaignsTable::new(dynamodb_client(sdk), &config.campaigns_table_name);
    let rate = RateItem::new(dynamodb_client(sdk), &config.campaigns_table_name);
    let waiting = WaitingTable {
        dynamodb: dynamodb_client(sdk),
        scheduler: scheduler_client(sdk),
        table: config.waiting_table_name.clone(),
        schedule_group: config.release_schedule_group.clone(),
        scheduler_role_arn: config.release_scheduler_role_arn.clone(),
        dead_letter_arn: config.release_dead_letter_arn.clone(),
        known_shards: Default::default(),
    };
    let standings = Wanted {
        users: LazySubscribers::new(
            config.mongo.clone(),
            sdk,
            "send-email",
            recipients(sdk, &config.campaigns_table_name),
        ),
        pending: SendRecords::new(dynamodb_client(sdk), &config.sends_table_name),
    };
    SendEmail::new(
        ledger, mailer, queue, campaigns, rate, waiting, standings, config,
    )
}

/// RateControl: SES's quota (read only: the mailer sends nothing), the rate item, and
/// SendEmail's, CreateEmails' and SesEvents' event source mappings.
pub fn rate_control(config: RateControlConfig, sdk: &SdkConfig) -> LambdaRateControl {
    RateControl::new(
        SesMailer::new(sdk, String::new(), None),
        RateItem::new(dynamodb_client(sdk), &config.campaigns_table_name),
        std::sync::Arc::new(ConsumerMapping::new(
            lambda_client(sdk),
            &config.emails_event_source_mapping_id,
        )),
        std::sync::Arc::new(ConsumerMapping::new(
            lambda_client(sdk),
            &config.users_event_source_mapping_id,
        )),
        std::sync::Arc::new(ConsumerMapping::new(
            lambda_client(sdk),
            &config.ses_events_event_source_mapping_id,
        )),
        &config,
    )
    .with_account(std::sync::Arc::new(
        crate::adapters::account::AwsAccount::new(sdk, &config.sends_table_name),
    ))
}

pub async fn ses_events(
    config: SesEventsConfig,
    sdk: &SdkConfig,
) -> Result<LambdaSesEvents, AssembleError> {
    let db = mongo::connect(&config.mongo, sdk, "ses-events").await?;
    let records = SendRecords::new(dynamodb_client(sdk), &config.sends_table_name);
    let recipients = recipients(sdk, &config.campaigns_table_name);
    let subscribers = Subscribers::with_recipients(&db, recipients);
    Ok(SesEvents::new(records, subscribers, config))
}

pub async fn unsubscribe(
    config: UnsubscribeFunctionConfig,
    sdk: &SdkConfig,
) -> Result<LambdaUnsubscribe, AssembleError> {
    let signer = secrets::unsubscribe_signer(&config.unsubscribe, sdk).await?;
    let db = mongo::connect(&config.mongo, sdk, "unsubscribe").await?;
    let records = SendRecords::new(dynamodb_client(sdk), &config.sends_table_name);
    let recipients = recipients(sdk, &config.campaigns_table_name);
    let subscribers = Subscribers::with_recipients(&db, recipients);
    Ok(Unsubscribe::new(signer, subscribers, records))
}

/// Where each campaign's recipients are, read from the campaigns table: the campaign's
/// pinned definition version, and its `[recipients]` (ours without one).
fn recipients(sdk: &SdkConfig, campaigns_table_name: &str) -> Arc<CampaignRecipients> {
    let dynamodb = dynamodb_client(sdk);
    Arc::new(CampaignRecipients::new(
        CampaignsTable::new(dynamodb.clone(), campaigns_table_name),
        DefinitionsTable::new(dynamodb, campaigns_table_name),
    ))
}

/// OpenContent: the slot sealer from the unsubscribe signing secret and MongoDB (with its
/// index check) read at once; `clock` is the system's on Lambda.
pub async fn open_content(
    config: OpenContentFunctionConfig,
    sdk: &SdkConfig,
    clock: std::sync::Arc<dyn crate::ports::Clock>,
) -> Result<LambdaOpenContent, AssembleError> {
    let sealer = async {
        let signer = secrets::unsubscribe_signer(&config.unsubscribe, sdk).await?;
        Ok::<_, AssembleError>(signer.slot_sealer())
    };
    let picks = async {
        let db = mongo::connect(&config.mongo, sdk, "open-content").await?;
        Ok::<_, AssembleError>(MongoPicks::new(db))
    };
    let (sealer, picks) = tokio::try_join!(sealer, picks)?;
    let dynamodb = dynamodb_client(sdk);
    let stage = OpenContent::new(
        sealer,
        OpenContentTable::new(dynamodb.clone(), &config.open_content_table_name),
        picks,
        SendRecords::new(dynamodb, &config.sends_table_name),
        clock,
        config,
    );
    stage.prepare().await?;
    Ok(stage)
}

/// Nothing is read at cold start: the guard runs seldom, and only its first call pays.
pub fn reputation_guard(config: ReputationGuardConfig, sdk: &SdkConfig) -> LambdaReputationGuard {
    ReputationGuard::new(StackSending {
        mappings: EventSourceMappings::new(lambda_client(sdk), config.event_source_mapping_ids),
        campaigns: CampaignsTable::new(dynamodb_client(sdk), &config.campaigns_table_name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::sns::{SnsEvent, SnsRecord};

    /// An SDK configuration whose every request fails at once: nothing listens on port 9 of
    /// 127.0.0.1, and nothing is retried, so each call is exactly one attempt.
    async fn unreachable_sdk() -> SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("eu-west-1"))
            .endpoint_url("http://127.0.0.1:9")
            .credentials_provider(aws_sdk_lambda::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await
    }

    // Paused: the mapping's update is attempted again over 15 s of backoff, skipped here.
    #[tokio::test(start_paused = true)]
    async fn the_reputation_guards_lambda_calls_are_metered() {
        let guard = reputation_guard(
            ReputationGuardConfig {
                campaigns_table_name: "campaigns".into(),
                event_source_mapping_ids: vec!["esm-1".into()],
            },
            &unreachable_sdk().await,
        );
        let mut record = SnsRecord::default();
        record.sns.message = serde_json::json!({
            "AlarmName": "mailflow-BounceRate",
            "NewStateValue": "ALARM",
        })
        .to_string();
        let mut event = SnsEvent::default();
        event.records.push(record);
        let _ = crate::runtime::metering::take();
        // Fails (nothing answers), but every attempt went through the meter.
        assert!(guard.handle(event).await.is_err());
        let counts = crate::runtime::metering::take();
        let lambda: u64 = counts
            .iter()
            .filter(|(key, _)| key.starts_with("lambda."))
            .map(|(_, n)| n)
            .sum();
        assert!(lambda >= 1, "no Lambda request metered: {counts:?}");
        assert!(
            counts.keys().any(|k| k.starts_with("dynamodb.")),
            "{counts:?}"
        );
    }
}
