//! Shared harness for the tests against the local stack: every test gets its own queues,
//! table, database and mail domain (unique prefix), so tests run in parallel.

use anyhow::Result;
use mailflow::adapters::sends::SendRecord;
use mailflow::domain::campaign::Campaign;
use mailflow::ports::Mailer;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions};
use mailflow_local::provision::{provision, StackOptions};
use mailflow_local::seed::{seed, SeedOptions, SeedReport};
use mailflow_local::ses_record::{self, SentMessage};
use mailflow_local::stack::Stack;
use mailflow_local::template::Template;
use mongodb::Database;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The local stack's endpoints; the tests are run by infra/test.sh, which starts it.
pub fn endpoints() -> (String, String) {
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: run the tests with infra/test.sh (it starts the local stack)")
        })
    };
    (get("AWS_ENDPOINT_URL"), get("MONGODB_URI"))
}

pub struct TestEnv {
    pub name: String,
    pub endpoint: String,
    pub stack: Stack,
    pub db: Database,
    pub domain: String,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh stack named after the test. `adjust` may change parameters and queue timeouts.
pub async fn test_env(test: &str, adjust: impl FnOnce(&mut StackOptions)) -> Result<TestEnv> {
    let (endpoint, mongo_uri) = endpoints();
    // Time, process and a counter: unique across the threads of one test binary and across
    // test processes started in the same millisecond.
    let unique = format!(
        "{}p{}n{}",
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() % 100_000_000,
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let name = format!("t{unique}-{}", test.replace('_', "-"));
    let database = format!("t{unique}");
    let mut options = StackOptions {
        prefix: name.chars().take(60).collect(),
        parameters: BTreeMap::from([
            (names::MONGODB_DATABASE.to_string(), database.clone()),
            // Faster than the default 14/s, on the two SendEmail environments a stack
            // starts with (`SendRate::environments`: 20/s each at 128 MB). More environments
            // on a busy two-core runner starve one another into their invocation timeouts.
            (names::SEND_RATE_PER_SECOND.to_string(), "40".to_string()),
            // A busy runner's MongoDB and moto can take more than the 300 ms a deployment
            // gives an open's or a click's counting, and the tests count every one: 1 s still
            // dropped counts on fresh clones under CI's load, so the most allowed. (The picks
            // then have 4 s of a request's 7; no run has shown a fallback for want of them.)
            ("OpenContentCountTimeoutMs".to_string(), "2000".to_string()),
        ]),
        mongodb_uri: Some(mongo_uri.clone()),
        ..Default::default()
    };
    adjust(&mut options);
    let sdk = mailflow::adapters::aws_config().await;
    let stack = provision(
        &sdk,
        Template::load(&mailctl::repo_root().join("template.yaml"))?,
        options,
    )
    .await?;
    let db = mailflow::adapters::mongo::connect(
        &mailflow::config::MongoConfig {
            uri: mailflow::config::SecretRef::Plain(mongo_uri),
            database,
            max_pool_size: 8,
        },
        &sdk,
        "tests",
    )
    .await?;
    Ok(TestEnv {
        domain: format!("{name}.example.com"),
        name,
        endpoint,
        stack,
        db,
    })
}

impl TestEnv {
    pub async fn seed(&self, users: usize, campaign: &Campaign) -> Result<SeedReport> {
        seed(
            &self.db,
            &SeedOptions {
                users,
                seed: 7,
                domain: self.domain.clone(),
                window: campaign.window,
            },
        )
        .await
    }

    pub async fn pipeline<M: Mailer + Clone + 'static>(
        &self,
        options: PipelineOptions,
        mailer: impl FnOnce(&aws_config::SdkConfig, &mailflow::config::SendEmailConfig) -> M,
    ) -> Result<LocalPipeline<M>> {
        LocalPipeline::build(self.stack.clone(), options, mailer).await
    }

    /// Serves this stack's Unsubscribe function on a local Function URL (any free port) and
    /// points the stack's unsubscribe links at it; the server stops when dropped.
    pub async fn serve_unsubscribe(&mut self) -> Result<mailflow_local::function_url::FunctionUrl> {
        let server = mailflow_local::pipeline::serve_unsubscribe(&self.stack, 0).await?;
        self.stack
            .set_function_url(mailflow_local::names::UNSUBSCRIBE, server.url());
        Ok(server)
    }

    /// Puts SES events on the stack's SesEvents queue, as the EventBridge rule would, and
    /// runs the SesEvents function until the queue drains.
    pub async fn deliver_ses_events<M: Mailer + Clone + 'static>(
        &self,
        pipeline: &LocalPipeline<M>,
        events: &[String],
    ) -> Result<()> {
        let queue = self
            .stack
            .queue_url(mailflow_local::names::SES_EVENTS_QUEUE)?;
        mailflow_local::ses_event_source::Publisher::new(self.sqs(), queue)
            .publish(events)
            .await?;
        mailflow_local::runner::run_until_drained(
            &self.sqs(),
            vec![pipeline.ses_events_consumer()?],
            std::time::Duration::from_secs(120),
        )
        .await?;
        Ok(())
    }

    /// `campaign` as a campaign of the orders example (campaigns/orders) would be after its
    /// first run: the definition pushed, its version pinned on the campaign's record. Its
    /// customers keep their standing at nested paths here (`prefs.subscribed`,
    /// `prefs.topics`, `flags.suppression`), besides the example's `contact.email` and
    /// `prefs.lang`, in the `customers` collection.
    pub async fn pin_customers_definition(&self, campaign: &Campaign) -> Result<()> {
        use mailctl::definition_store;
        let stack =
            definition_store::Stack::connect(&self.stack.sdk, Some(&self.stack.prefix)).await?;
        let folder = mailctl::repo_root().join("campaigns/orders");
        let mut orders = definition_store::read_folder(&folder)
            .map_err(|errors| anyhow::anyhow!("{errors:?}"))?;
        let toml = orders
            .files
            .get_mut("campaign.toml")
            .expect("the example has its campaign.toml");
        for (field, nested) in [
            ("subscribed", "prefs.subscribed"),
            ("topics", "prefs.topics"),
            ("suppression", "flags.suppression"),
        ] {
            let line = format!("{field} = \"{field}\"\n");
            anyhow::ensure!(toml.contains(&line), "orders names no {field}");
            *toml = toml.replace(&line, &format!("{field} = \"{nested}\"\n"));
        }
        let pushed = definition_store::push(&stack, &orders, None, 1).await?;
        let pin = mailflow::domain::definition::pin::PinnedDefinition {
            name: orders.name.clone(),
            version: pushed.pushed.info().version,
        };
        use mailflow::ports::CampaignStates;
        let record = stack
            .campaigns
            .register(campaign, &Default::default(), None, Some(&pin), 1)
            .await?;
        anyhow::ensure!(record.definition == Some(pin), "{record:?}");
        Ok(())
    }

    /// Emails the SES emulator recorded for this test's domain, by recipient.
    pub async fn sent(&self) -> Result<HashMap<String, Vec<SentMessage>>> {
        let mut by_to: HashMap<String, Vec<SentMessage>> = HashMap::new();
        for m in ses_record::sent_to_domain(&self.endpoint, &self.domain).await? {
            for to in &m.to {
                by_to.entry(to.clone()).or_default().push(m.clone());
            }
        }
        Ok(by_to)
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.stack.sdk)
    }

    pub fn dynamo(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.stack.sdk)
    }

    /// A campaign's send records, by user id.
    pub async fn records(&self, campaign: &str) -> Result<BTreeMap<String, SendRecord>> {
        let table = self.stack.table_name(names::SENDS_TABLE)?;
        let records = mailflow_local::ledger_scan::records(&self.dynamo(), table, campaign).await?;
        Ok(records
            .into_iter()
            .map(|r| (r.user_id.clone(), r))
            .collect())
    }

    /// One send record, read by its key (strongly consistent): a record whose attempt is in
    /// flight is not in the campaign index yet.
    pub async fn record(&self, campaign: &str, user: &str) -> Result<Option<SendRecord>> {
        let table = self.stack.table_name(names::SENDS_TABLE)?;
        let out = self
            .dynamo()
            .get_item()
            .table_name(table)
            .key(
                "userId",
                aws_sdk_dynamodb::types::AttributeValue::S(user.into()),
            )
            .key(
                "campaignId",
                aws_sdk_dynamodb::types::AttributeValue::S(campaign.into()),
            )
            .consistent_read(true)
            .send()
            .await?;
        Ok(out.item.as_ref().map(SendRecord::from_item))
    }

    /// The picks frozen for `user`'s email of `campaign` (None: not opened yet).
    pub async fn frozen_picks(
        &self,
        campaign: &str,
        user: &str,
    ) -> Result<Option<mailflow::domain::open_content::Picks>> {
        use mailflow::ports::OpenContentStore;
        let table = self.stack.table_name(names::OPEN_CONTENT_TABLE)?;
        let key = mailflow::domain::ledger::SendKey::new(
            user,
            mailflow::domain::campaign::CampaignId::parse(campaign)?,
        );
        mailflow::adapters::open_content::OpenContentTable::new(self.dynamo(), table)
            .frozen(&key)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The winning plan of `explain`ing the find command `find`, as text.
    pub async fn winning_plan(&self, find: mongodb::bson::Document) -> Result<String> {
        let explain = self
            .db
            .run_command(mongodb::bson::doc! {"explain": find, "verbosity": "queryPlanner"})
            .await?;
        Ok(explain
            .get_document("queryPlanner")?
            .get_document("winningPlan")?
            .to_string())
    }

    /// Messages left in a queue (visible and in flight).
    pub async fn depth(&self, queue: &str) -> Result<u64> {
        let (v, i) =
            mailflow_local::queues::depth(&self.sqs(), self.stack.queue_url(queue)?).await?;
        Ok(v + i)
    }
}

/// The real SES adapter as configured by template.yaml.
pub fn ses(
    sdk: &aws_config::SdkConfig,
    config: &mailflow::config::SendEmailConfig,
) -> mailflow::adapters::ses::SesMailer {
    mailflow::adapters::ses::SesMailer::from_config(sdk, config)
}

/// The path of a workspace binary, built first (debug, as the test command does). It builds
/// every target of the workspace, as infra/test.sh does, so that features resolve the same
/// (dev-dependencies included) and nothing is recompiled. Cargo releases its lock while
/// tests run, so building from a test is safe.
pub fn binary(name: &str) -> std::path::PathBuf {
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--locked",
            "--workspace",
            "--all-targets",
        ])
        .current_dir(mailctl::repo_root())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {name} failed");
    target_dir().join("debug").join(name)
}

fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| mailctl::repo_root().join("target"))
}

/// Where infra/browser.sh installed playwright-core (checked first thing by the browser
/// suites, so that a missing install fails at once with what to run).
pub fn browser_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var("MAILFLOW_BROWSER_DIR").expect(
        "MAILFLOW_BROWSER_DIR is not set: run the tests with infra/test.sh (infra/browser.sh installs Chromium and playwright-core)",
    ))
}

/// Where the browser suites' screenshots go: MAILFLOW_SCREENSHOT_DIR (relative to the
/// repository), else the browser directory's `shots/`.
pub fn screenshot_dir() -> std::path::PathBuf {
    std::env::var("MAILFLOW_SCREENSHOT_DIR")
        .map(|d| mailctl::repo_root().join(d))
        .unwrap_or_else(|_| browser_dir().join("shots"))
}

/// Opens `html` (an email) in headless Chromium with the script `tests/browser/{script}`,
/// which takes `--html` and `--shots` (`screenshot_dir()`) and `args`, and answers the JSON
/// it printed. `name` keeps
/// each test's files apart.
pub async fn browse(script: &str, name: &str, html: &str, args: &[&str]) -> serde_json::Value {
    let (dir, root, shots) = (browser_dir(), mailctl::repo_root(), screenshot_dir());
    std::fs::create_dir_all(&shots).unwrap();
    let page = dir.join(format!("{name}.html"));
    std::fs::write(&page, html).unwrap();
    // The script beside its node_modules, so that `import "playwright-core"` resolves.
    let copy = dir.join(script);
    std::fs::copy(root.join("tests/browser").join(script), &copy).unwrap();
    let out = tokio::process::Command::new("node")
        .arg(&copy)
        .arg("--html")
        .arg(&page)
        .arg("--shots")
        .arg(&shots)
        .args(args)
        .output()
        .await
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser run failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{stderr}", String::from_utf8_lossy(&out.stdout)))
}

/// The sum of a JSON object's counts (`skipped`, `byLocale`...), as a summary prints them.
pub fn total(counts: &serde_json::Value) -> u64 {
    let counts = counts
        .as_object()
        .unwrap_or_else(|| panic!("{counts} is not an object of counts"));
    counts
        .values()
        .map(|n| n.as_u64().unwrap_or_else(|| panic!("{n} is not a count")))
        .sum()
}
