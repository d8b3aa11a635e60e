//! Campaign definitions on a stack (docs/campaigns.md, "Where definitions live"): `push`
//! stores a folder as a new version and keeps its recurring schedule in step; `list` and
//! `show` say what is deployed and which version each campaign ran with. The store and the
//! schedules are mailflow's adapters (`adapters::definitions`); this module says what
//! happened, in lines for an operator.

use anyhow::{Context, Result};
use mailflow::adapters::campaigns::CampaignsTable;
use mailflow::adapters::definitions::{DefinitionSchedules, DefinitionsTable, ScheduleChange};
use mailflow::domain::campaign::rfc3339;
use mailflow::domain::campaign_state::CampaignRecord;
use mailflow::domain::definition::Files;
use mailflow::ports::definitions::{Push, Pushed, VersionInfo};
use mailflow::ports::{DefinitionError, DefinitionStore};
use std::collections::BTreeMap;

/// A definition folder read and checked: what a push stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub name: String,
    pub schedule: Option<String>,
    pub files: Files,
}

/// A definition refused before anything was stored: one line per error (exit status 2).
#[derive(Debug)]
pub struct Refused {
    pub folder: String,
    pub errors: Vec<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} error{} above; nothing was pushed",
            self.folder,
            self.errors.len(),
            if self.errors.len() == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Refused {}

/// Where the definitions of one stack live, and where its schedules go.
pub struct Stack {
    pub definitions: DefinitionsTable,
    pub campaigns: CampaignsTable,
    pub schedules: DefinitionSchedules,
}

/// The logical id of the definitions' schedule group in template.yaml.
pub const SCHEDULE_GROUP: &str = "DefinitionScheduleGroup";
/// The role their schedules run as (the release schedules' own: it may invoke GetUsers).
pub const SCHEDULER_ROLE: &str = "ReleaseSchedulerRole";

impl Stack {
    /// A deployed stack's, from its outputs (`stack_outputs`), or with `prefix` the one
    /// `mailctl provision` made on the local stack.
    pub async fn connect(sdk: &aws_config::SdkConfig, prefix: Option<&str>) -> Result<Self> {
        use crate::stack_outputs as out;
        use mailflow_local::names;
        let (table, group, role_arn, target_arn, dead_letter_arn) = match prefix {
            None => (
                out::CAMPAIGNS_TABLE.read()?,
                out::DEFINITION_SCHEDULE_GROUP.read()?,
                out::SCHEDULER_ROLE.read()?,
                out::GET_USERS_FUNCTION_ARN.read()?,
                out::SCHEDULE_DLQ.read()?,
            ),
            Some(prefix) => {
                let region = sdk.region().map_or("us-east-1".into(), |r| r.to_string());
                let sqs = aws_sdk_sqs::Client::new(sdk);
                let dlq = format!("{prefix}-{}", names::SCHEDULE_DLQ);
                let url = sqs
                    .get_queue_url()
                    .queue_name(&dlq)
                    .send()
                    .await
                    .with_context(|| format!("queue {dlq} not found: is {prefix:?} the prefix `mailctl provision` printed?"))?
                    .queue_url
                    .context("GetQueueUrl returned no URL")?;
                let arn = sqs
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                    .send()
                    .await
                    .with_context(|| format!("reading the ARN of {dlq}"))?
                    .attributes
                    .and_then(|a| {
                        a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                            .cloned()
                    })
                    .context("GetQueueAttributes returned no QueueArn")?;
                (
                    format!("{prefix}-{}", names::CAMPAIGNS_TABLE),
                    format!("{prefix}-{SCHEDULE_GROUP}"),
                    format!("arn:aws:iam::000000000000:role/{prefix}-{SCHEDULER_ROLE}"),
                    mailflow_local::iam::function_arn(&region, prefix, names::GET_USERS),
                    arn,
                )
            }
        };
        let dynamo = mailflow::adapters::dynamodb_client(sdk);
        Ok(Self {
            definitions: DefinitionsTable::new(dynamo.clone(), &table),
            campaigns: CampaignsTable::new(dynamo, &table),
            schedules: DefinitionSchedules {
                scheduler: mailflow::adapters::scheduler_client(sdk),
                group,
                role_arn,
                target_arn,
                dead_letter_arn,
            },
        })
    }
}

/// What a push did: the version, and the schedule (a schedule that failed leaves the
/// version stored; pushing again, unchanged, tries the schedule again).
#[derive(Debug)]
pub struct PushReport {
    pub pushed: Pushed,
    pub schedule: Result<ScheduleChange, DefinitionError>,
}

impl PushReport {
    /// What `mailctl campaign push` prints.
    pub fn lines(&self) -> Vec<String> {
        let info = self.pushed.info();
        let mut lines = vec![match &self.pushed {
            Pushed::Stored(_) => format!(
                "{}: version {} (sha256 {}…)",
                info.name,
                info.version,
                &info.sha256[..12.min(info.sha256.len())]
            ),
            Pushed::Unchanged(_) => format!("{}: unchanged (version {})", info.name, info.version),
        }];
        let expression = info.schedule.as_deref().unwrap_or("-");
        match &self.schedule {
            Ok(ScheduleChange::Created) => lines.push(format!(
                "{}: schedule {expression} created (UTC): each firing runs the latest version",
                info.name
            )),
            Ok(ScheduleChange::Updated) => lines.push(format!(
                "{}: schedule {expression} (UTC): each firing runs the latest version",
                info.name
            )),
            Ok(ScheduleChange::Removed) => lines.push(format!(
                "{}: no schedule any more: its schedule was deleted",
                info.name
            )),
            Ok(ScheduleChange::None) | Err(_) => {}
        }
        lines
    }
}

/// Stores `loaded` as the next version (or nothing, unchanged), then creates, updates or
/// removes its recurring schedule to match the latest version.
pub async fn push(
    stack: &Stack,
    loaded: &Loaded,
    by: Option<&str>,
    at_ms: u64,
) -> Result<PushReport, DefinitionError> {
    let pushed = stack
        .definitions
        .push(Push {
            name: &loaded.name,
            files: &loaded.files,
            schedule: loaded.schedule.as_deref(),
            at_ms,
            by,
        })
        .await?;
    // The latest's schedule, whatever this push did: an unchanged push mends a schedule
    // an earlier push failed to write.
    let schedule = stack
        .schedules
        .sync(&loaded.name, pushed.info().schedule.as_deref())
        .await;
    Ok(PushReport { pushed, schedule })
}

/// A campaign that ran from a definition: its id, the version it pinned, when it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub campaign: String,
    pub version: u32,
    pub started_at_ms: Option<u64>,
}

/// The campaigns that ran from each definition, newest first.
pub async fn runs(campaigns: &CampaignsTable) -> Result<BTreeMap<String, Vec<Run>>> {
    let mut runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for (campaign, record) in campaigns.pinned_campaigns().await? {
        let CampaignRecord {
            definition: Some(pinned),
            started_at_ms,
            ..
        } = record
        else {
            continue;
        };
        runs.entry(pinned.name).or_default().push(Run {
            campaign,
            version: pinned.version,
            started_at_ms,
        });
    }
    for list in runs.values_mut() {
        list.sort_by(|a, b| (b.started_at_ms, &b.campaign).cmp(&(a.started_at_ms, &a.campaign)));
    }
    Ok(runs)
}

fn at(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map(rfc3339)
        .unwrap_or_else(|_| ms.to_string())
}

/// One row of `list`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    pub definition: String,
    pub latest_version: u32,
    pub pushed_at: String,
    pub pushed_by: Option<String>,
    /// As Scheduler has it (None: no schedule).
    pub schedule: Option<String>,
    pub last_campaign: Option<String>,
    pub last_campaign_version: Option<u32>,
}

/// Every definition pushed: its latest version, its schedule, its last campaign.
pub async fn list(stack: &Stack) -> Result<Vec<Listed>> {
    let runs = runs(&stack.campaigns).await?;
    let mut rows = Vec::new();
    for head in stack.definitions.list().await? {
        let schedule = stack.schedules.expression(&head.name).await?;
        let last = runs.get(&head.name).and_then(|r| r.first());
        rows.push(Listed {
            latest_version: head.version,
            pushed_at: at(head.pushed_at_ms),
            pushed_by: head.pushed_by,
            schedule,
            last_campaign: last.map(|r| r.campaign.clone()),
            last_campaign_version: last.map(|r| r.version),
            definition: head.name,
        });
    }
    Ok(rows)
}

/// `list` as text: one line per definition.
pub fn list_lines(rows: &[Listed]) -> Vec<String> {
    if rows.is_empty() {
        return vec!["no definition pushed yet: `mailctl campaign push DIR`".into()];
    }
    let mut lines = vec![format!(
        "{:<24} {:>7}  {:<20}  {:<24} {}",
        "DEFINITION", "LATEST", "PUSHED AT", "SCHEDULE (UTC)", "LAST CAMPAIGN (VERSION)"
    )];
    for r in rows {
        let last = match (&r.last_campaign, r.last_campaign_version) {
            (Some(c), Some(v)) => format!("{c} (v{v})"),
            _ => "-".into(),
        };
        lines.push(format!(
            "{:<24} {:>7}  {:<20}  {:<24} {last}",
            r.definition,
            format!("v{}", r.latest_version),
            r.pushed_at,
            r.schedule.as_deref().unwrap_or("-"),
        ));
    }
    lines
}

/// `show NAME`: every version, and the campaigns each ran; with a version, its files
/// (`files`: their contents, each after a `==> path <==` line).
pub async fn show(
    stack: &Stack,
    name: &str,
    version: Option<u32>,
    files: bool,
) -> Result<Vec<String>> {
    let versions = stack.definitions.versions(name).await?;
    let Some(latest) = versions.last() else {
        return Err(DefinitionError::Unknown(name.to_owned()).into());
    };
    let runs = runs(&stack.campaigns).await?;
    let runs = runs.get(name).map(Vec::as_slice).unwrap_or_default();
    let describe = |v: &VersionInfo| {
        let ran: Vec<&str> = runs
            .iter()
            .filter(|r| r.version == v.version)
            .map(|r| r.campaign.as_str())
            .collect();
        format!(
            "v{:<5} {}  sha256 {}  by {}  schedule {}{}{}",
            v.version,
            at(v.pushed_at_ms),
            v.sha256,
            v.pushed_by.as_deref().unwrap_or("-"),
            v.schedule.as_deref().unwrap_or("-"),
            if ran.is_empty() {
                String::new()
            } else {
                format!("  ran {}", ran.join(", "))
            },
            if v.version == latest.version {
                "  (latest)"
            } else {
                ""
            },
        )
    };
    let Some(version) = version else {
        let mut lines = vec![format!("{name}: {} version(s)", versions.len())];
        lines.extend(versions.iter().map(describe));
        if files {
            lines.extend(file_lines(stack, name, latest.version).await?);
        }
        return Ok(lines);
    };
    let stored = stack.definitions.get(name, version).await?;
    let mut lines = vec![describe(&stored.info)];
    if files {
        lines.extend(file_lines(stack, name, version).await?);
    } else {
        lines.extend(
            stored
                .files
                .iter()
                .map(|(path, content)| format!("  {path} ({} bytes)", content.len())),
        );
    }
    Ok(lines)
}

async fn file_lines(stack: &Stack, name: &str, version: u32) -> Result<Vec<String>> {
    let stored = stack
        .definitions
        .get(name, version)
        .await
        .with_context(|| format!("reading version {version} of {name}"))?;
    let mut lines = Vec::new();
    for (path, content) in stored.files {
        lines.push(format!("==> {path} <=="));
        lines.push(content.strip_suffix('\n').unwrap_or(&content).to_owned());
    }
    Ok(lines)
}

/// A definition folder read and checked as `mailctl campaign check` does: what `push`
/// stores. Nothing is stored unless both succeed.
pub fn read_folder(dir: &std::path::Path) -> Result<Loaded, Vec<String>> {
    loaded(crate::definition::read_dir(dir)?)
}

/// The files of a definition that passes every check, with the name and schedule it sets.
pub fn loaded(files: Files) -> Result<Loaded, Vec<String>> {
    let definition = crate::definition::checked(&files)?;
    Ok(Loaded {
        name: definition.name,
        schedule: definition.schedule,
        files,
    })
}
