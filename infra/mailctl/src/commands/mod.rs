//! One module per command (or per family of commands); `main.rs` parses the command line
//! and calls them. What several commands share is here: the stack a command works on.

pub mod campaign;
pub mod definition;
pub mod definitions;
pub mod demo;
pub mod experiment;
pub mod lab;
pub mod plan;
pub mod preview;
pub mod sam;
pub mod setup;
pub mod status;

use anyhow::{bail, Context, Result};
use mailctl::definition_source::{Chosen, Source};
use mailctl::ops::Target;
use mailflow::adapters::definitions::DefinitionsTable;
use mailflow::domain::campaign::{rfc3339, Campaign, CampaignError, CampaignId, Window};
use mailflow::domain::campaign_state::CampaignRecord;
use mailflow::domain::definition::Definition;
use mailflow_local::names;
use mailflow_local::provision::{provision, StackOptions};
use mailflow_local::template::Template;
use std::collections::BTreeMap;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

#[derive(clap::Args)]
pub struct TargetArgs {
    /// A stack on the local stack made by `mailctl provision --prefix P`; without it the
    /// MAILFLOW_* variables name a deployed stack's resources.
    #[arg(long)]
    pub prefix: Option<String>,
    /// MongoDB database of a local stack (deployed stacks set theirs in template.yaml).
    #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
    pub database: String,
}

/// A campaign's window, for a campaign that is not `weekly-YYYY-Www` the first time it starts
/// (afterwards the window it started with is used, and another is refused).
#[derive(clap::Args, Clone, Default)]
pub struct CampaignArgs {
    /// Start of the window (RFC 3339, e.g. 2026-06-01T00:00:00Z), with --until.
    #[arg(long, requires = "until")]
    pub since: Option<String>,
    /// End of the window, exclusive (RFC 3339), with --since.
    #[arg(long, requires = "since")]
    pub until: Option<String>,
    /// The campaign's topic (an id of shared/topics.json, e.g. product-news); default: the
    /// topic it first started with, or the weekly digest's for a new campaign.
    #[arg(long)]
    pub topic: Option<String>,
}

/// Delivery at each user's local time (GetUsers checks the values, one line each).
#[derive(clap::Args, Clone, Default)]
pub struct LocalTimeArgs {
    /// Deliver at this local time (HH:MM) in each user's own `timezone`.
    #[arg(long)]
    pub local_time: Option<String>,
    /// The date of that local time (YYYY-MM-DD); default: the UTC date the window ends on.
    #[arg(long, requires = "local_time")]
    pub send_date: Option<String>,
    /// The IANA zone of users without a usable one; default: the stack's FALLBACK_TIME_ZONE.
    #[arg(long, requires = "local_time")]
    pub fallback_zone: Option<String>,
    /// A local time passed when the campaign starts: send-now, next-day or skip; default: the
    /// stack's PASSED_TIME_POLICY.
    #[arg(long, requires = "local_time")]
    pub passed_time: Option<String>,
}

impl LocalTimeArgs {
    /// Adds the settings given to GetUsers' event.
    pub fn apply(&self, event: &mut serde_json::Value) {
        for (field, value) in [
            ("localTime", &self.local_time),
            ("sendDate", &self.send_date),
            ("fallbackZone", &self.fallback_zone),
            ("passedTime", &self.passed_time),
        ] {
            if let Some(value) = value {
                event[field] = value.clone().into();
            }
        }
    }
}

/// A campaign's guardrails (docs/pinpoint.md): GetUsers records them when the campaign first
/// starts; a later start may only move the deadline.
#[derive(clap::Args, Clone, Default)]
pub struct GuardrailArgs {
    /// Nothing of the campaign is sent after this instant (RFC 3339); users not sent by then
    /// are recorded expired. Given again later, it moves the deadline (recorded). Default: the
    /// stack's CAMPAIGN_DEADLINE_HOURS after the first start (0: none).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Hold this percentage of the audience out (0-50, e.g. 10 or 2.5), the same users on
    /// every run; recorded held_out, never sent. Default: the stack's HOLDOUT_PERCENT.
    #[arg(long)]
    pub holdout: Option<String>,
    /// Frequency caps neither stop nor count this campaign's emails (recorded with it).
    #[arg(long)]
    pub cap_exempt: bool,
    /// An A/B experiment: a JSON file of variants, test group, wait and rule
    /// (docs/experiments.md). Recorded with the campaign's first start; a later start may
    /// only give the same one.
    #[arg(long)]
    pub experiment: Option<std::path::PathBuf>,
}

impl GuardrailArgs {
    /// The guardrails given, checked as GetUsers checks them.
    pub fn request(&self) -> Result<mailflow::domain::guardrails::GuardrailRequest> {
        let deadline_ms = self
            .deadline
            .as_deref()
            .map(|raw| {
                OffsetDateTime::parse(raw, &Rfc3339)
                    .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                    .with_context(|| {
                        format!("--deadline {raw:?} is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)")
                    })
            })
            .transpose()?;
        Ok(mailflow::domain::guardrails::GuardrailRequest {
            deadline_ms,
            holdout_bp: self
                .holdout
                .as_deref()
                .map(mailflow::domain::guardrails::holdout_bp)
                .transpose()?,
            cap_exempt: self.cap_exempt.then_some(true),
        })
    }

    /// The experiment file given, read and its shape checked; GetUsers checks its subjects
    /// and bodies against the campaign's templates when it starts.
    pub fn experiment(&self) -> Result<Option<mailflow::domain::experiment::Experiment>> {
        let Some(path) = &self.experiment else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --experiment {}", path.display()))?;
        let experiment = mailflow::domain::experiment::Experiment::parse(&text)
            .with_context(|| format!("--experiment {}", path.display()))?;
        Ok(Some(experiment))
    }

    /// Adds the guardrails and the experiment given to GetUsers' event.
    pub fn apply(&self, event: &mut serde_json::Value) -> Result<()> {
        if let Some(experiment) = self.experiment()? {
            event["experiment"] = serde_json::to_value(experiment)?;
        }
        if let Some(deadline) = &self.deadline {
            event["deadline"] = deadline.clone().into();
        }
        if let Some(holdout) = &self.holdout {
            event["holdoutPercent"] = holdout.clone().into();
        }
        if self.cap_exempt {
            event["capExempt"] = true.into();
        }
        Ok(())
    }
}

/// The campaign `id` names, with its window (`--since`/`--until`, a weekly id's own week, or
/// the window it was first started with) and its topic (`--topic`, or the one it was first
/// started with, or the weekly one), both as GetUsers settles them.
pub async fn resolve_campaign(
    sdk: &aws_config::SdkConfig,
    t: &TargetArgs,
    id: &str,
    args: &CampaignArgs,
) -> Result<Campaign> {
    resolve_campaign_of(sdk, t, id, args, None).await
}

/// `resolve_campaign` for a campaign of `definition`, as GetUsers completes a start that
/// names one: one of its ids (`orders-2026-W47`) has the window of its window rule
/// (`Campaign::definition_window`), and its topic is the definition's unless `--topic` or
/// the campaign's first start said otherwise.
pub async fn resolve_campaign_of(
    sdk: &aws_config::SdkConfig,
    t: &TargetArgs,
    id: &str,
    args: &CampaignArgs,
    definition: Option<&Definition>,
) -> Result<Campaign> {
    CampaignId::parse(id)?;
    let topics = mailflow::domain::topics::Topics::builtin();
    let named = args.topic.as_deref().map(|t| topics.get(t)).transpose()?;
    // The campaigns table is read only for what the arguments leave open.
    let read_record = || async {
        let target = target(sdk, t).await?;
        let record = mailctl::ops::campaigns_table(&aws_sdk_dynamodb::Client::new(sdk), &target)
            .record(id)
            .await?;
        anyhow::Ok(record.unwrap_or_default())
    };
    let mut record: Option<CampaignRecord> = None;
    let mut campaign = if let (Some(since), Some(until)) = (&args.since, &args.until) {
        let at = |flag: &str, value: &str| {
            OffsetDateTime::parse(value, &Rfc3339).with_context(|| {
                format!("--{flag} {value:?} is not an RFC 3339 time (e.g. 2026-06-01T00:00:00Z)")
            })
        };
        let window = Window::new(at("since", since)?, at("until", until)?)?;
        Campaign::from_id(id, Some(window))?
    } else {
        let ruled =
            definition.and_then(|d| Campaign::definition_window(id, &d.name, d.window_days));
        match Campaign::from_id(id, None) {
            Err(CampaignError::NoWindow(_)) if ruled.is_some() => Campaign::from_id(id, ruled)?,
            Err(CampaignError::NoWindow(_)) => match record.insert(read_record().await?).window {
                Some(window) => Campaign::from_id(id, Some(window))?,
                None => bail!(
                    "campaign {id} has no recorded window (it has not started here yet): give --since and --until (e.g. --since 2026-06-01T00:00:00Z --until 2026-06-08T00:00:00Z)"
                ),
            },
            weekly => weekly?,
        }
    };
    match named {
        Some(topic) => campaign = campaign.with_topic(topic.id.clone()),
        None => {
            if let Some(definition) = definition {
                campaign = campaign.with_topic(topics.get(&definition.topic)?.id.clone());
            }
            let recorded = match record {
                Some(record) => record,
                None => read_record().await?,
            };
            campaign.settle(recorded.window, recorded.topic.as_deref(), false)?;
        }
    }
    Ok(campaign)
}

/// A campaign definition that `preview`, `test-send` and `plan` render with.
#[derive(clap::Args, Clone, Default)]
pub struct DefinitionArgs {
    /// Render with a campaign definition: a pushed one's name (`mailctl campaign push DIR`
    /// first), or a definition's folder on disk (a path with a `/`, e.g. campaigns/orders),
    /// checked as `campaign check` checks it and used as it is, nothing pushed. Default: the
    /// definition the campaign was run from, if it was; else the weekly digest.
    #[arg(long, value_name = "NAME|DIR")]
    pub definition: Option<String>,
    /// The pushed definition's version (default: the one the campaign is pinned to, or the
    /// latest).
    #[arg(long, requires = "definition", value_name = "N")]
    pub definition_version: Option<u32>,
}

/// The campaign a `preview`, `test-send` or `plan` of a definition renders, and the
/// definition: `--definition` (a pushed version or a folder), or the version campaign `id`
/// is pinned to (its record in `campaigns_table`). None: neither, the weekly digest. Without `id`, the campaign the
/// definition's window rule makes now (`Campaign::for_definition`).
pub async fn definition_campaign(
    sdk: &aws_config::SdkConfig,
    t: &TargetArgs,
    campaigns_table: &str,
    id: Option<&str>,
    window: &CampaignArgs,
    args: &DefinitionArgs,
) -> Result<Option<(Campaign, Chosen)>> {
    let dynamo = mailflow::adapters::dynamodb_client(sdk);
    let pinned = match id {
        Some(id) => {
            CampaignId::parse(id)?;
            let record =
                mailflow::adapters::campaigns::CampaignsTable::new(dynamo.clone(), campaigns_table)
                    .record(id)
                    .await?;
            record.and_then(|r| r.definition)
        }
        None => None,
    };
    let source = match (&args.definition, &pinned) {
        (Some(raw), _) => Source::parse(raw, args.definition_version)?,
        (None, Some(pin)) => Source::Pushed {
            name: pin.name.clone(),
            version: Some(pin.version),
        },
        (None, None) => return Ok(None),
    };
    // A pinned campaign renders with its pinned version unless another is named.
    let source = match (source, &pinned) {
        (
            Source::Pushed {
                name,
                version: None,
            },
            Some(pin),
        ) if pin.name == name => Source::Pushed {
            name,
            version: Some(pin.version),
        },
        (source, _) => source,
    };
    let table = DefinitionsTable::new(dynamo, campaigns_table);
    let chosen = Chosen::load(&source, table).await?;
    let definition = &chosen.loaded.definition;
    let campaign = match id {
        Some(id) => resolve_campaign_of(sdk, t, id, window, Some(definition)).await?,
        None => new_definition_campaign(definition, window)?,
    };
    Ok(Some((campaign, chosen)))
}

/// The campaign of `definition` its window rule makes now, as GetUsers makes it for a start
/// that names only the definition (`--topic` aside).
pub fn new_definition_campaign(definition: &Definition, window: &CampaignArgs) -> Result<Campaign> {
    if window.since.is_some() {
        bail!(
            "--since and --until go with --campaign: a definition's campaign without an id has the window of its rule ({} days)",
            definition.window_days
        );
    }
    let topics = mailflow::domain::topics::Topics::builtin();
    let topic = topics
        .get(window.topic.as_deref().unwrap_or(definition.topic.as_str()))?
        .id
        .clone();
    Ok(Campaign::for_definition(
        &definition.name,
        definition.window_days,
        topic,
        OffsetDateTime::now_utc(),
    ))
}

/// GetUsers' event for `campaign`, its window always given (the same as the recorded one for
/// a campaign that ran before, which GetUsers checks).
pub fn start_event(campaign: &Campaign) -> serde_json::Value {
    serde_json::json!({
        "campaignId": campaign.id.as_str(),
        "since": rfc3339(campaign.window.since),
        "until": rfc3339(campaign.window.until),
        "topic": campaign.topic.as_str(),
    })
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum QueueChoice {
    Users,
    Emails,
    /// GetUsers' own: checkpoints, releases, and runs Lambda gave up on.
    Continuation,
    SesEvents,
}

pub async fn target(sdk: &aws_config::SdkConfig, args: &TargetArgs) -> Result<Target> {
    match &args.prefix {
        Some(prefix) => Target::from_prefix(sdk, prefix).await,
        None => Target::from_env(),
    }
}

pub use mailflow_local::stack_env as env;

pub async fn provision_local(
    sdk: &aws_config::SdkConfig,
    template: &std::path::Path,
    prefix: &str,
    database: &str,
) -> Result<mailflow_local::stack::Stack> {
    let parameters = BTreeMap::from([(names::MONGODB_DATABASE.to_string(), database.to_owned())]);
    provision(
        sdk,
        Template::load(template)?,
        StackOptions {
            prefix: prefix.to_owned(),
            parameters,
            mongodb_uri: Some(env("MONGODB_URI")?),
            ..Default::default()
        },
    )
    .await
}
