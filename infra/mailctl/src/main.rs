//! Over 450 lines because it is the command line: every command's arguments and its dispatch,
//! a screen per command.
//! mailctl: run and inspect mailflow campaigns. Endpoints come from the environment
//! (AWS_ENDPOINT_URL, MONGODB_URI), exactly as for the functions. This file parses the
//! command line; each command lives in `commands/`.

mod commands;

use anyhow::Result;
use clap::{Parser, Subcommand};
use commands::{CampaignArgs, GuardrailArgs, LocalTimeArgs, QueueChoice, TargetArgs};

#[derive(Parser)]
#[command(
    name = "mailctl",
    version,
    about = "Run and inspect mailflow campaigns"
)]
struct Cli {
    /// The SAM template that declares the stack.
    #[arg(long, global = true, default_value_os_t = mailflow_local::repo_root().join("template.yaml"))]
    template: std::path::PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum ExperimentCommand {
    /// Decide now instead of at the end of the wait: by the rule on the results so far, or
    /// the variant named. The decision is recorded (final) and the rest of the audience is
    /// sent the winner at once.
    Pick {
        #[arg(long)]
        campaign: String,
        /// The winner, chosen by hand (default: what the rule says now).
        #[arg(long)]
        variant: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Provision a fresh local stack from template.yaml, seed users, run one campaign to
    /// completion and print its summary (needs the local stack: infra/local-stack.sh start).
    Demo {
        /// How many synthetic users to seed.
        #[arg(long, default_value_t = 1000)]
        users: usize,
        /// Seed of the synthetic data (same seed, same users).
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Campaign-wide send rate (emails/s); default: the template's SendRatePerSecond.
        #[arg(long)]
        send_rate: Option<f64>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Measure the pipeline on the local stack through the real function binaries, the three
    /// stages at once: CPU per email, peak RSS, cold start, billable requests per email, binary
    /// sizes and the cost per million emails (infra/bench.sh builds them and runs this).
    Bench {
        #[command(flatten)]
        options: mailflow_lab::bench::BenchOptions,
        /// Print one JSON object instead of Markdown tables.
        #[arg(long)]
        json: bool,
    },
    /// Measure the OpenContent endpoints on the local stack through the release binary: first
    /// opens, reopens, badges and clicks (latency, CPU, backend requests), warm opens per
    /// second, every slot at once, the cost per million (infra/bench-opens.sh runs this).
    Opens {
        #[command(flatten)]
        options: mailflow_lab::opens::OpensOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run a campaign of thousands of users on the local stack while messages are delivered
    /// twice, runs overlap, invocations are killed at every step, SES throttles, MongoDB
    /// restarts and the AWS endpoint drops; print what was injected and what came out (exit
    /// status 1 when an email was lost or sent twice beyond the bound).
    Chaos {
        #[command(flatten)]
        options: mailflow_lab::chaos::ChaosOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run the shared send rate against an SES stand-in that allows its quota and throttles
    /// beyond it (as SES does), with the real SendEmail stage in N environments over in-memory
    /// ports; compare with the static split (docs/benchmarks.md). Needs no local stack.
    Rate {
        #[command(flatten)]
        options: mailflow_lab::rate::RateOptions,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Run a whole campaign (GetUsers, CreateEmails, SendEmail: the real stages over
    /// in-memory ports with AWS's and MongoDB's round trips, each environment's CPU share
    /// modelled) in virtual time, and say what bounds it (docs/send-rate.md). Needs no local
    /// stack; a million users take minutes of this machine's CPU in a release build.
    Pipeline {
        #[command(flatten)]
        options: mailflow_lab::pipeline::PipelineOptions,
        /// The template's earlier fixed sizing (GetUsers at 256 MB with 8 batches in flight,
        /// CreateEmails at 256 MB, batches of 10, 5 environments), for comparison.
        #[arg(long)]
        before: bool,
        /// Print one JSON object instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Create the resources template.yaml declares on the local stack under a prefix, and
    /// print the MAILFLOW_* variables that name them.
    Provision {
        #[arg(long, default_value = "local")]
        prefix: String,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
    },
    /// Start a campaign: on AWS invoke GetUsers; with --prefix run it on the local stack to
    /// completion.
    Run {
        /// Campaign id; default: the campaign the schedule would run now (the last full week).
        #[arg(long)]
        campaign: Option<String>,
        #[command(flatten)]
        window: CampaignArgs,
        #[command(flatten)]
        local: LocalTimeArgs,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Release a local-time campaign's users still waiting in slots whose time has passed
    /// (stranded: their schedules were lost or failed for good): each such slot is swept now.
    Release {
        #[arg(long)]
        campaign: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// A campaign's A/B experiment (docs/experiments.md).
    Experiment {
        #[command(subcommand)]
        action: ExperimentCommand,
    },
    /// Re-run a campaign so that only users without a SENT record get an email.
    Resend {
        #[arg(long)]
        campaign: String,
        /// Also retry users whose send failed permanently (fix their data first), and
        /// reconsider those a guardrail skipped (frequency cap, quiet hours, expired after a
        /// later --deadline); the held-out stay out.
        #[arg(long)]
        include_failed: bool,
        /// Reopen a cancelled campaign (it runs again, recorded with who and when) and send
        /// to the users it left CANCELLED. Without it, resend refuses a cancelled campaign.
        #[arg(long)]
        reopen_cancelled: bool,
        /// Who reopens it (with --reopen-cancelled).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        window: CampaignArgs,
        /// Without --local-time (or --at-once), a local-time campaign is resent at the local
        /// time its run started with.
        #[command(flatten)]
        local: LocalTimeArgs,
        /// Send everyone it still owes now, even a local-time campaign.
        #[arg(long, conflicts_with = "local_time")]
        at_once: bool,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Counts by state for one campaign: queued, in flight, sent, failed, suppressed
    /// duplicates, DLQ depth, send rate and ETA.
    Status {
        #[arg(long)]
        campaign: String,
        /// Refresh every 2 seconds until the queues are empty.
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// One campaign as one self-contained HTML file: `status`'s counts and plots (send rate
    /// against the ceiling, outcomes by reason, local-time lateness by zone, opens and clicks
    /// by hour, the experiment's variants), drawn inline as SVG; nothing fetched.
    Report {
        #[arg(long)]
        campaign: String,
        /// Where the file goes (default: CAMPAIGN-report.html).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Move a dead-letter queue's messages back to its source queue.
    Redrive {
        #[arg(long, value_enum)]
        queue: QueueChoice,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Render exactly the email a user gets: composed by CreateEmails' own code with that
    /// function's configuration (locale, unsubscribe link), reading MongoDB as it does.
    Preview {
        #[arg(long)]
        user: String,
        /// Default: the campaign the schedule would run now.
        #[arg(long)]
        campaign: Option<String>,
        /// The campaign's topic (an id of shared/topics.json); default: the weekly digest's.
        #[arg(long)]
        topic: Option<String>,
        /// Write the HTML here (the headers and text go to stdout).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve a local stack's one-click unsubscribe endpoint (the Unsubscribe function behind
    /// a local Function URL on 127.0.0.1), so that the links in its emails work.
    ServeUnsubscribe {
        /// The port the stack's links point to (template.yaml's Function URL, locally).
        #[arg(long, default_value_t = 8025)]
        port: u16,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve a local stack's open-time content (the OpenContent function behind a local
    /// Function URL on 127.0.0.1): the pick cards, live badges and counted links in its
    /// emails.
    ServeOpenContent {
        /// The port the stack's pick slots point to (template.yaml's Function URL, locally).
        #[arg(long, default_value_t = 8026)]
        port: u16,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Pause a campaign: the consumers of the campaign queues stop (every campaign on the
    /// stack waits: the queues are shared); nothing is lost or sent twice. Resume within the
    /// queues' 14-day retention.
    Pause {
        #[arg(long)]
        campaign: String,
        /// Why (kept with the pause, shown by status).
        #[arg(long, default_value = "paused by an operator")]
        reason: String,
        /// Who (kept with the pause).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Resume a paused campaign: every user not yet sent to gets exactly one email.
    Resume {
        #[arg(long)]
        campaign: String,
        /// Who (kept with the state change).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Cancel a campaign: no further email of it goes out; every user not yet sent to ends
    /// CANCELLED (or skipped, `campaign_cancelled`). Final: run and resend then refuse it.
    Cancel {
        #[arg(long)]
        campaign: String,
        /// Why (kept with the cancellation, shown by status).
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
        /// Who (kept with the cancellation).
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// What a campaign would send, before it sends anything: its audience, by locale, who
    /// would be skipped and why, sample emails, how long it takes at the effective send rate,
    /// the SES quota and cost. Reads only; nothing is enqueued, claimed or sent.
    Plan {
        /// Campaign id; default: the campaign the schedule would run now.
        #[arg(long)]
        campaign: Option<String>,
        /// How many emails to show in full.
        #[arg(long, default_value_t = 2)]
        samples: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        window: CampaignArgs,
        #[command(flatten)]
        local: LocalTimeArgs,
        #[command(flatten)]
        guardrails: GuardrailArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Send one user's real email of a campaign to a test address through SES, marked as a
    /// test ("[TEST] " subject, X-Mailflow-Test header); no send record or count changes.
    TestSend {
        #[arg(long)]
        campaign: String,
        /// The user whose email is sent (their id as `preview --user` takes it).
        #[arg(long)]
        user: String,
        /// Where the test goes: one email address.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        window: CampaignArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Invoke one function of template.yaml with `sam local invoke` against a local stack
    /// (run it through infra/sam-local.sh, which prepares SAM and Docker).
    SamInvoke {
        /// The function's logical id, e.g. GetUsersFunction.
        function: String,
        /// The event file, e.g. infra/events/manual-run.json.
        event: std::path::PathBuf,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Create the MongoDB indexes the functions need (in MONGODB_URI's --database), before
    /// the first campaign: the functions only check for them at cold start. Idempotent.
    CreateIndexes {
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
    },
    /// Insert synthetic users and follows into MONGODB_URI for this week's campaign window.
    Seed {
        #[arg(long, default_value_t = 1000)]
        users: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, env = "MONGODB_DATABASE", default_value = "app")]
        database: String,
        #[arg(long, default_value = "example.com")]
        domain: String,
        /// Give the users a `timezone`: 40 zones from UTC+14 to UTC-12, and some none or an
        /// unknown one (for local-time campaigns).
        #[arg(long)]
        timezones: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mailctl: {}", one_line(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, no backtrace: this is for operators. A cause whose
/// text ends the line already (an error that says its source in its own message, "...: {0}")
/// is said once.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Refuses to start without any AWS configuration rather than let the SDK look for a region
/// on the instance metadata service (two long warnings, seconds of timeouts, then an error
/// that does not say what to set).
fn aws_environment() -> Result<()> {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    let variables = [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
    ];
    let config_file = std::env::var_os("HOME")
        .map(|home| std::path::Path::new(&home).join(".aws/config"))
        .is_some_and(|path| path.exists());
    if variables.iter().any(|k| set(k)) || config_file {
        return Ok(());
    }
    anyhow::bail!(
        "no AWS region is configured: for the local stack run `eval \"$(infra/local-stack.sh env)\"` first; for AWS set AWS_REGION (and credentials, or AWS_PROFILE)"
    )
}

async fn run() -> Result<()> {
    mailflow::runtime::telemetry::init_cli();
    let cli = Cli::parse();
    // The rate lab talks to no AWS endpoint: no SDK configuration (nor its region lookup).
    if let Command::Rate { options, json } = &cli.command {
        return commands::lab::rate(options, *json).await;
    }
    if let Command::Pipeline {
        options,
        before,
        json,
    } = &cli.command
    {
        let options = match before {
            true => options.clone().before(),
            false => options.clone(),
        };
        return commands::lab::pipeline(&options, *json).await;
    }
    aws_environment()?;
    let sdk = mailflow::adapters::aws_config().await;
    let (sdk, template) = (&sdk, cli.template.as_path());
    match cli.command {
        Command::Provision { prefix, database } => {
            commands::setup::provision(sdk, template, &prefix, &database).await
        }
        Command::CreateIndexes { database } => commands::setup::create_indexes(sdk, database).await,
        Command::Seed {
            users,
            seed,
            database,
            domain,
            timezones,
        } => commands::setup::seed(sdk, users, seed, database, domain, timezones).await,
        Command::Run {
            campaign,
            window,
            local,
            guardrails,
            target,
        } => {
            commands::campaign::run(
                sdk,
                template,
                campaign,
                &window,
                &local,
                &guardrails,
                &target,
            )
            .await
        }
        Command::Experiment {
            action:
                ExperimentCommand::Pick {
                    campaign,
                    variant,
                    target,
                },
        } => commands::campaign::pick(sdk, template, &campaign, variant.as_deref(), &target).await,
        Command::Release { campaign, target } => {
            commands::campaign::release(sdk, template, &campaign, &target).await
        }
        Command::Resend {
            campaign,
            include_failed,
            reopen_cancelled,
            by,
            window,
            local,
            at_once,
            guardrails,
            target,
        } => {
            let reopen = reopen_cancelled.then_some(by.as_str());
            let options = commands::campaign::Resend {
                include_failed,
                reopen,
                local,
                at_once,
                guardrails,
            };
            commands::campaign::resend(sdk, template, &campaign, &window, options, &target).await
        }
        Command::Status {
            campaign,
            watch,
            json,
            target,
        } => commands::status::status(sdk, &campaign, watch, json, &target).await,
        Command::Report {
            campaign,
            out,
            target,
        } => commands::status::report(sdk, &campaign, out, &target).await,
        Command::Redrive { queue, target } => commands::status::redrive(sdk, queue, &target).await,
        Command::Preview {
            user,
            campaign,
            topic,
            out,
            target,
        } => commands::preview::preview(sdk, template, &user, campaign, topic, out, &target).await,
        Command::Cancel {
            campaign,
            reason,
            by,
            target,
        } => {
            let target = commands::target(sdk, &target).await?;
            said(mailctl::control::cancel(sdk, &campaign, &by, &reason, &target).await)
        }
        Command::Pause {
            campaign,
            reason,
            by,
            target,
        } => {
            let target = commands::target(sdk, &target).await?;
            said(mailctl::control::pause(sdk, &campaign, &by, &reason, &target).await)
        }
        Command::Resume {
            campaign,
            by,
            target,
        } => {
            let target = commands::target(sdk, &target).await?;
            said(mailctl::control::resume(sdk, &campaign, &by, &target).await)
        }
        Command::Plan {
            campaign,
            samples,
            json,
            window,
            local,
            guardrails,
            target,
        } => {
            let options = commands::preview::PlanOptions {
                samples,
                json,
                local,
                guardrails,
            };
            commands::preview::plan(sdk, template, campaign, &window, &options, &target).await
        }
        Command::TestSend {
            campaign,
            user,
            to,
            window,
            target,
        } => {
            let campaign = commands::resolve_campaign(sdk, &target, &campaign, &window).await?;
            commands::preview::test_send(sdk, template, &user, &campaign, &to, &target).await
        }
        Command::SamInvoke {
            function,
            event,
            target,
        } => commands::sam::sam_invoke(sdk, template, &function, &event, &target).await,
        Command::ServeUnsubscribe { port, target } => {
            use commands::preview::{serve, Served};
            serve(sdk, template, Served::Unsubscribe, port, &target).await
        }
        Command::ServeOpenContent { port, target } => {
            use commands::preview::{serve, Served};
            serve(sdk, template, Served::OpenContent, port, &target).await
        }
        Command::Demo {
            users,
            seed,
            send_rate,
            json,
        } => commands::demo::demo(template, users, seed, send_rate, json).await,
        Command::Bench { options, json } => commands::lab::bench(template, &options, json).await,
        Command::Chaos { options, json } => commands::lab::chaos(template, &options, json).await,
        Command::Opens { options, json } => commands::lab::opens(template, &options, json).await,
        Command::Rate { .. } | Command::Pipeline { .. } => {
            unreachable!("run before the SDK is configured")
        }
    }
}

/// Prints what a command did.
fn said(done: anyhow::Result<String>) -> anyhow::Result<()> {
    println!("{}", done?);
    Ok(())
}
