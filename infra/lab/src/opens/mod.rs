//! The OpenContent endpoints measured (`mailctl opens`): the release `open-content` binary
//! under the local Runtime API, against the local stack (moto's DynamoDB, SecantusDB), with
//! recipients who each have `followers` followers. One environment per kind of request, so
//! that each one's CPU and backend requests are its own:
//!
//! - first opens: the first request of an email (choose from MongoDB, claim, freeze, count);
//! - another slot of an opened email on another environment: the frozen picks read from
//!   DynamoDB, nothing counted (what the second and third cards of a first open cost);
//! - warm opens: the first slot (the open, counted) on an environment that has the email's
//!   picks in memory (the sustained rate);
//! - badges and clicks;
//! - every slot of an email at once over six environments: how many computations froze.
//!
//! Latencies are per invocation as the Runtime API sees them; CPU from /proc; requests from
//! the metering line each invocation logs. Nothing is asserted: it reports.
//!
//! `report` holds the figures, their cost and their Markdown.

mod report;

pub use report::{Kind, Latency, OpensReport};

use anyhow::{bail, Result};
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::open_content::{Language, SlotSealer, SlotUrls};
use mailflow::ports::OpenContentStore;
use mailflow_local::function_host::{FunctionProcess, Logs, Outcome};
use mailflow_local::names;
use mailflow_local::stack::Stack;
use mongodb::bson::{doc, DateTime, Document};
use report::cost_per_million;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
pub struct OpensOptions {
    /// Emails opened (each recipient gets one).
    #[arg(long, default_value_t = 300)]
    pub emails: usize,
    /// Followers per recipient (the follows the choice reads).
    #[arg(long, default_value_t = 20)]
    pub followers: usize,
    /// How long the warm environment is driven for its sustained rate.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Where the function binaries are.
    #[arg(long, default_value_os_t = mailflow_local::repo_root().join("target/release"))]
    pub bin_dir: PathBuf,
}

struct Env {
    process: FunctionProcess,
    /// Latencies (a warm-up may be cleared from them).
    samples: Vec<Duration>,
    /// Every invocation: what CPU and backend requests are divided by.
    calls: usize,
}

impl Env {
    async fn spawn(stack: &Stack, binary: &Path, env: &BTreeMap<String, String>) -> Result<Self> {
        let spec = stack.template.function(names::OPEN_CONTENT)?;
        let process = FunctionProcess::spawn(
            names::OPEN_CONTENT,
            binary,
            env,
            Duration::from_secs(spec.timeout.into()),
            spec.memory_size,
        )
        .await?;
        Ok(Self {
            process,
            samples: Vec::new(),
            calls: 0,
        })
    }

    async fn call(&mut self, event: Value) -> Result<Value> {
        let started = Instant::now();
        let outcome = self.process.invoke(event).await;
        self.samples.push(started.elapsed());
        self.calls += 1;
        match outcome {
            Outcome::Response(v) => Ok(v),
            other => bail!("open-content answered {other:?}"),
        }
    }

    /// Its measurements, the process ended: latencies of the samples kept, CPU and backend
    /// requests per invocation.
    async fn finish(self) -> (Kind, f64, f64, Logs) {
        let cpu = self.process.cpu_time().unwrap_or_default().total();
        let rss = self.process.peak_rss().unwrap_or_default() as f64 / 1e6;
        let cold = self
            .process
            .cold_start()
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        let logs = self.process.finish().await;
        let n = self.calls.max(1) as f64;
        let kind = Kind {
            latency: Latency::of(self.samples),
            cpu_ms_per_request: (cpu.as_secs_f64() * 1000.0 / n * 100.0).round() / 100.0,
            backend_per_request: logs
                .requests
                .iter()
                .map(|(k, v)| (k.clone(), (*v as f64 / n * 100.0).round() / 100.0))
                .collect(),
        };
        (kind, rss, cold, logs)
    }
}

/// A Function URL event for `url` (its path and query).
fn event(url: &str) -> Value {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path_query = &rest[rest.find('/').unwrap_or(rest.len())..];
    let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let ua = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15";
    json!({
        "version": "2.0", "rawPath": path, "rawQueryString": query,
        "headers": {"user-agent": ua},
        "requestContext": {"http": {"method": "GET", "path": path, "userAgent": ua}},
        "isBase64Encoded": false,
    })
}

/// Recipients r0.. with `followers` followers each from a pool of named users; one in five
/// followed back. Their emails' slot URLs.
async fn seed(
    local: &mailflow_local::pipeline::SeededStack,
    options: &OpensOptions,
    sealer: &SlotSealer,
    campaign: &CampaignId,
) -> Result<Vec<Vec<SlotUrls>>> {
    let pool = 1_000usize;
    let users: Vec<Document> = (0..pool)
        .map(|i| doc! {"_id": format!("p{i}"), "name": format!("Person {i}"), "email": format!("p{i}@x.example"), "subscribed": true})
        .chain((0..2 * options.emails).map(|i| {
            doc! {"_id": format!("r{i}"), "name": format!("Reader {i}"), "email": format!("r{i}@x.example"), "subscribed": true}
        }))
        .collect();
    local
        .db
        .collection::<Document>("users")
        .insert_many(users)
        .await?;
    let mut follows = Vec::new();
    for r in 0..2 * options.emails {
        for f in 0..options.followers {
            let follower = format!("p{}", (r * 7919 + f * 104_729) % pool);
            follows.push(doc! {"followerId": &follower, "followeeId": format!("r{r}"), "createdAt": DateTime::from_millis(1_700_000_000_000 + (r * 1000 + f) as i64)});
            if f % 5 == 0 {
                follows.push(doc! {"followerId": format!("r{r}"), "followeeId": follower, "createdAt": DateTime::from_millis(1_700_000_000_000)});
            }
        }
    }
    for chunk in follows.chunks(10_000) {
        local
            .db
            .collection::<Document>("follows")
            .insert_many(chunk.to_vec())
            .await?;
    }
    Ok((0..2 * options.emails)
        .map(|r| {
            let user = format!("r{r}");
            SlotUrls::for_email(
                sealer,
                "https://o.example/",
                campaign,
                &user,
                Language::En,
                3,
            )
        })
        .collect())
}

pub async fn opens(template: &Path, options: &OpensOptions) -> Result<OpensReport> {
    let local = mailflow_local::pipeline::SeededStack::create(
        template,
        "opens",
        0,
        1,
        BTreeMap::from([("ClickGraceSeconds".to_string(), "0".to_string())]),
    )
    .await?;
    let stack = &local.stack;
    let env = stack.env(names::OPEN_CONTENT)?;
    let secret = mailflow::config::UnsubscribeConfig::from_source(&|k: &str| env.get(k).cloned())?;
    let sealer = mailflow::adapters::secrets::unsubscribe_signer(&secret, &stack.sdk)
        .await?
        .slot_sealer();
    let campaign = local.campaign.id.clone();
    let emails = seed(&local, options, &sealer, &campaign).await?;
    let (measured, concurrent) = emails.split_at(options.emails);
    let binary = options.bin_dir.join("open-content");
    if !binary.is_file() {
        bail!(
            "{} does not exist: build it first (cargo build --release -p open-content)",
            binary.display()
        );
    }
    let mut report = OpensReport {
        emails: options.emails,
        followers: options.followers,
        ..Default::default()
    };

    // One environment per kind of request, each fed the emails one at a time.
    let run = |urls: Vec<String>| {
        let env = env.clone();
        let binary = binary.clone();
        async move {
            let mut e = Env::spawn(stack, &binary, &env).await?;
            for url in urls {
                e.call(event(&url)).await?;
            }
            Ok::<_, anyhow::Error>(e.finish().await)
        }
    };
    let slot = |n: usize, f: fn(&SlotUrls) -> &String| {
        measured
            .iter()
            .map(|s| f(&s[n]).clone())
            .collect::<Vec<_>>()
    };
    let (first_open, rss, cold, _) = run(slot(0, |s| &s.image)).await?;
    report.first_open = first_open;
    report.peak_rss_mb = (rss * 10.0).round() / 10.0;
    report.cold_start_ms = cold.round();
    report.other_slot = run(slot(1, |s| &s.image)).await?.0;
    report.badge = run(slot(0, |s| &s.badge)).await?.0;
    report.click = run(slot(0, |s| &s.link)).await?.0;

    let (warm_open, per_second) =
        warm_opens(stack, &binary, &env, measured, options.seconds).await?;
    report.warm_open = warm_open;
    report.warm_opens_per_second = per_second;

    concurrent_opens(&mut report, stack, &binary, &env, &campaign, concurrent).await?;
    report.cost_per_million_opens = cost_per_million(&[
        (&report.first_open, 1.0),
        (&report.other_slot, 2.0),
        (&report.badge, 3.0),
    ]);
    report.cost_per_million_clicks = cost_per_million(&[(&report.click, 1.0)]);
    Ok(report)
}

/// Warm opens: one environment opens the same emails over and over for `seconds` (their
/// first slots, each email opened once before to have its picks in memory). Its measurements
/// and the opens it answered per second.
async fn warm_opens(
    stack: &Stack,
    binary: &Path,
    env: &BTreeMap<String, String>,
    measured: &[Vec<SlotUrls>],
    seconds: u64,
) -> Result<(Kind, f64)> {
    let mut warm = Env::spawn(stack, binary, env).await?;
    for s in measured {
        warm.call(event(&s[0].image)).await?;
    }
    warm.samples.clear();
    let started = Instant::now();
    let mut n = 0usize;
    while started.elapsed() < Duration::from_secs(seconds) {
        warm.call(event(&measured[n % measured.len()][0].image))
            .await?;
        n += 1;
    }
    let per_second = (n as f64 / started.elapsed().as_secs_f64()).round();
    Ok((warm.finish().await.0, per_second))
}

/// Every slot's image and badge of each email of `concurrent` at once, over six
/// environments, then again: the computations that froze, the fallbacks, and the cards that
/// differed between the two rounds, into `report`.
async fn concurrent_opens(
    report: &mut OpensReport,
    stack: &Stack,
    binary: &Path,
    env: &BTreeMap<String, String>,
    campaign: &CampaignId,
    concurrent: &[Vec<SlotUrls>],
) -> Result<()> {
    let mut six = Vec::new();
    for _ in 0..6 {
        six.push(Env::spawn(stack, binary, env).await?);
    }
    let store = mailflow::adapters::open_content::OpenContentTable::new(
        mailflow::adapters::dynamodb_client(&stack.sdk),
        stack.table_name(names::OPEN_CONTENT_TABLE)?,
    );
    let before = store
        .counters(campaign)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for email in concurrent {
        let urls: Vec<&String> = email.iter().flat_map(|s| [&s.image, &s.badge]).collect();
        let answers =
            futures::future::join_all(six.iter_mut().zip(&urls).map(|(e, url)| e.call(event(url))))
                .await;
        report.concurrent_requests += answers.len();
        // Reopen every card at once again: each must be the card the first round showed.
        let again =
            futures::future::join_all(six.iter_mut().zip(&urls).map(|(e, url)| e.call(event(url))))
                .await;
        for (a, b) in answers.iter().zip(&again).step_by(2) {
            let (a, b) = (
                a.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?,
                b.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?,
            );
            if a["body"] != b["body"] {
                report.concurrent_inconsistent += 1;
            }
        }
    }
    report.concurrent_emails = concurrent.len();
    let after = store
        .counters(campaign)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    report.concurrent_frozen = after.picks_frozen - before.picks_frozen;
    report.concurrent_fallbacks = after.fallbacks - before.fallbacks;
    for e in six {
        e.finish().await;
    }
    Ok(())
}
