//! The operator CLI against the local stack: provision, seed, run, status, resend, redrive,
//! preview, and one-line errors for bad input.

use crate::cli_plan::plan_counts_and_changes_nothing;
use mailflow_tests::{binary, endpoints};
use serde_json::Value;
use std::process::Output;

pub(crate) fn mailctl(args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(binary("mailctl"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("mailctl runs")
}

pub(crate) fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The JSON summary of a command that watched a campaign to its end: it exits 0 when every
/// user was sent to, and 1, after the summary, with one line that counts the FAILED and
/// dead-lettered users otherwise.
pub(crate) fn ended(out: Output, what: &str) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = last_json(&String::from_utf8_lossy(&out.stdout));
    let campaign = summary.get("campaign").unwrap_or(&summary);
    let problems: u64 = [
        "failed",
        "deadLettered",
        "usersDlq",
        "emailsDlq",
        "continuationDlq",
    ]
    .iter()
    .map(|k| {
        campaign[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no {k} in {summary}"))
    })
    .sum();
    if problems == 0 {
        assert!(out.status.success(), "{what}: {stderr}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("mailctl: campaign ") && last.contains(" FAILED"),
            "{what}: {stderr}"
        );
    }
    summary
}

/// `status --json` of a local stack's campaign.
pub(crate) fn status_json(prefix: &str, campaign: &str, env: &[(&str, &str)]) -> Value {
    last_json(&ok(mailctl(
        &[
            "status",
            "--prefix",
            prefix,
            "--campaign",
            campaign,
            "--json",
        ],
        env,
    )))
}

pub(crate) fn rt_block<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> T {
    tokio::runtime::Runtime::new().unwrap().block_on(f).unwrap()
}

pub(crate) fn last_json(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// A send date a week ahead (UTC), still ahead whenever the test runs and within the 14
/// days a campaign may wait, and its 09:00 in Asia/Kathmandu (03:15 UTC) in ms and as text.
pub(crate) fn a_week_ahead() -> (String, i64, String) {
    let date = jiff::tz::TimeZone::UTC
        .to_datetime(jiff::Timestamp::now())
        .date()
        .saturating_add(jiff::Span::new().days(7));
    let slot = format!("{date}T03:15:00Z");
    let ms = slot.parse::<jiff::Timestamp>().unwrap().as_millisecond();
    (date.to_string(), ms, slot)
}

pub(crate) fn unique(name: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 100_000_000;
    format!("cli{t}-{name}")
}

/// A stack provisioned and seeded through mailctl, and the campaign the schedule would run.
pub(crate) struct CliStack {
    pub(crate) prefix: String,
    pub(crate) database: String,
    pub(crate) domain: String,
    pub(crate) campaign: String,
    pub(crate) audience: usize,
}

impl CliStack {
    pub(crate) fn env(&self) -> [(&str, &str); 1] {
        [("MONGODB_DATABASE", self.database.as_str())]
    }

    fn provision_and_seed(name: &str, users: usize) -> Self {
        endpoints();
        let prefix = unique(name);
        let database = prefix.replace('-', "_");
        let env = [("MONGODB_DATABASE", database.as_str())];
        let exports = ok(mailctl(&["provision", "--prefix", &prefix], &env));
        assert!(exports.contains(&format!("MAILFLOW_SENDS_TABLE={prefix}-SendsTable")));
        let domain = format!("{prefix}.example.com");
        let users = users.to_string();
        let seeded = ok(mailctl(
            &["seed", "--users", &users, "--domain", &domain],
            &env,
        ));
        let audience: usize = seeded
            .split("audience ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // `seed` fills the window of the campaign the schedule would run now.
        let campaign =
            mailflow::domain::campaign::Campaign::for_schedule(time::OffsetDateTime::now_utc())
                .id
                .to_string();
        Self {
            prefix,
            database,
            domain,
            campaign,
            audience,
        }
    }
}

#[test]
fn run_status_and_resend_on_a_local_stack() {
    let t = CliStack::provision_and_seed("run", 40);
    let (would_send, would_fail) = plan_counts_and_changes_nothing(&t);
    let run = run_does_what_the_plan_counted(&t, would_send, would_fail);
    a_resend_sends_nothing_new(&t, &run);
    preview_shows_exactly_what_a_user_got(&t);
}

/// A local-time run through `mailctl run --local-time`, then resends: without flags at the
/// local time the run started with (said on stderr), with `--at-once` now; nobody twice.
#[test]
fn a_local_time_run_is_resent_at_its_local_time_unless_told_otherwise() {
    let t = CliStack::provision_and_seed("local", 30);
    // The seeded users have no zone: all wait for the fallback zone's 09:00, one slot, and
    // the simulator's clock jumps to it.
    let (date, slot_ms, _) = a_week_ahead();
    let local = [
        "--local-time",
        "09:00",
        "--send-date",
        &date,
        "--fallback-zone",
        "Asia/Kathmandu",
    ];
    let mut args = vec!["run", "--prefix", &t.prefix, "--campaign", &t.campaign];
    args.extend(local);
    let run = ended(mailctl(&args, &t.env()), "run --local-time");
    let held = run["getUsers"]["localTime"]["waiting"][slot_ms.to_string()]
        .as_u64()
        .unwrap_or_else(|| panic!("{run}"));
    assert_eq!(held as usize, t.audience, "{run}");
    assert!(run["sent"].as_u64().unwrap() > 0, "{run}");
    let status = status_json(&t.prefix, &t.campaign, &t.env());
    assert_eq!(status["localTime"]["stillWaiting"], 0, "{status}");
    assert!(
        status["localTime"]["lateness"]["maxMs"].as_i64().unwrap() >= 0,
        "{status}"
    );

    for (flags, at_local_time) in [(vec![], true), (vec!["--at-once"], false)] {
        let mut args = vec!["resend", "--prefix", &t.prefix, "--campaign", &t.campaign];
        args.extend(flags);
        let out = mailctl(&args, &t.env());
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        let resend = ended(out, "resend");
        assert_eq!(resend["sent"], 0, "{resend}");
        assert_eq!(
            said.contains(&format!(
                "resending at the local time its run started with: 09:00 on {date}"
            )),
            at_local_time,
            "{said}"
        );
        assert_eq!(
            resend["getUsers"].get("localTime").is_some(),
            at_local_time,
            "{resend}"
        );
    }
}

/// `run` and `status`: what the plan counted is what the campaign did.
fn run_does_what_the_plan_counted(t: &CliStack, would_send: u64, would_fail: u64) -> Value {
    let run = ended(
        mailctl(
            &["run", "--prefix", &t.prefix, "--campaign", &t.campaign],
            &t.env(),
        ),
        "run",
    );
    assert_eq!(run["getUsers"]["usersEnqueued"], t.audience);
    // What the plan counted is what the campaign did.
    assert_eq!(run["sent"], would_send, "{run}");
    assert_eq!(run["failed"], would_fail, "{run}");
    let invalid = run["failed"].as_u64().unwrap() as usize;
    assert_eq!(run["sent"].as_u64().unwrap() as usize + invalid, t.audience);
    if invalid > 0 {
        assert_eq!(
            run["campaign"]["failedByReason"]["address is not one RFC 5322 mailbox"],
            invalid
        );
    }

    let status = status_json(&t.prefix, &t.campaign, &t.env());
    assert_eq!(status["state"], "finished");
    assert_eq!(status["sent"], run["sent"]);
    assert_eq!(status["failed"], run["failed"]);
    assert_eq!(status["usersPending"], 0);
    assert_eq!(status["emailsDlq"], 0);

    run
}

/// `resend` and `status --watch`: a resend sends nothing new, and every duplicate the
/// ledger suppressed is counted.
fn a_resend_sends_nothing_new(t: &CliStack, run: &Value) {
    // Everyone eligible already has a SENT record.
    let resend = ended(
        mailctl(
            &["resend", "--prefix", &t.prefix, "--campaign", &t.campaign],
            &t.env(),
        ),
        "resend",
    );
    assert_eq!(resend["sent"], 0);
    // Every SENT user refused once, and once more for any message SQS delivered twice.
    assert!(
        resend["suppressedDuplicates"].as_u64() >= run["sent"].as_u64(),
        "{resend} {run}"
    );
    let status = ended(
        mailctl(
            &[
                "status",
                "--prefix",
                &t.prefix,
                "--campaign",
                &t.campaign,
                "--json",
                "--watch",
            ],
            &t.env(),
        ),
        "status --watch",
    );
    // (--watch refreshes until the queues are empty: here they are, so it prints once.)
    // Status counts every duplicate the ledger suppressed: the resend's, and any copy SQS
    // delivered twice during the first run.
    assert_eq!(
        status["duplicatesSuppressed"].as_u64(),
        Some(
            run["suppressedDuplicates"].as_u64().unwrap()
                + resend["suppressedDuplicates"].as_u64().unwrap()
        )
    );
}

/// `preview`: the same HTML, subject and unsubscribe link as the email in the SES record;
/// a user outside the audience gets the reason on one line.
fn preview_shows_exactly_what_a_user_got(t: &CliStack) {
    let (endpoint, _) = endpoints();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sent = rt
        .block_on(mailflow_local::ses_record::sent_to_domain(
            &endpoint, &t.domain,
        ))
        .unwrap();
    let email = sent.first().expect("the run sent emails");
    let user = email.to[0].split('@').next().unwrap();
    let html = std::env::temp_dir().join(format!("{}.html", t.prefix));
    let preview = ok(mailctl(
        &[
            "preview",
            "--prefix",
            &t.prefix,
            "--user",
            user,
            "--campaign",
            &t.campaign,
            "--out",
            html.to_str().unwrap(),
        ],
        &t.env(),
    ));
    let written = std::fs::read_to_string(&html).unwrap();
    std::fs::remove_file(&html).unwrap();
    assert_eq!(written, email.html.clone().unwrap());
    assert!(preview.contains(&format!("Subject: {}\n", email.subject.as_deref().unwrap())));
    assert!(preview.contains(&format!(
        "List-Unsubscribe: {}\n",
        email.header("List-Unsubscribe").unwrap()
    )));
    assert!(
        preview.ends_with(email.text.as_deref().unwrap()),
        "{preview}"
    );
    // A user outside the audience: the reason, on one line.
    let out = mailctl(
        &[
            "preview",
            "--prefix",
            &t.prefix,
            "--user",
            "nobody",
            "--campaign",
            &t.campaign,
        ],
        &t.env(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("nobody gets no email")
            && err.contains("vanished")
            && err.lines().count() == 1,
        "{err}"
    );
}

/// A campaign that is not weekly, operated through mailctl alone: it needs a window the first
/// time, keeps the one it started with (another is refused, nothing sent), and is planned and
/// resent by its id alone afterwards.
#[test]
fn a_manual_campaign_is_planned_run_and_resent_with_the_window_it_started_with() {
    let t = CliStack::provision_and_seed("manual", 30);
    let week =
        mailflow::domain::campaign::Campaign::for_schedule(time::OffsetDateTime::now_utc()).window;
    let rfc3339 = |at: time::OffsetDateTime| {
        at.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let (since, until) = (rfc3339(week.since), rfc3339(week.until));
    let id = "spring-promo";
    let base = ["--prefix", t.prefix.as_str(), "--campaign", id];
    let with = |command: &str, extra: &[&str]| -> Vec<String> {
        std::iter::once(command)
            .chain(base)
            .chain(extra.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    let call = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        mailctl(&args, &t.env())
    };
    let window = ["--since", since.as_str(), "--until", until.as_str()];

    // Before it ever started, it has no window to plan with.
    let out = call(with("plan", &["--json"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("give --since and --until"),
        "{err}"
    );

    let plan = last_json(&ok(call(with(
        "plan",
        &[&window[..], &["--json"]].concat(),
    ))));
    assert_eq!(plan["audience"], t.audience, "{plan}");
    let run = ended(call(with("run", &window)), "run");
    assert_eq!(run["sent"], plan["wouldSend"], "{run}");

    // Another window under the same id: refused before anything is enqueued.
    let later = rfc3339(week.until + time::Duration::days(1));
    let out = call(with("run", &["--since", &since, "--until", &later]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("was started with the window"),
        "{err}"
    );

    // By its id alone: the recorded window.
    let resend = ended(call(with("resend", &["--include-failed"])), "resend");
    assert_eq!(resend["sent"], 0, "{resend}");
    let again = last_json(&ok(call(with("plan", &["--json"]))));
    assert_eq!(again["audience"], plan["audience"]);
    let status = status_json(&t.prefix, id, &t.env());
    assert_eq!(status["sent"], run["sent"], "{status}");
}

#[test]
fn test_send_sends_the_real_email_to_the_test_address_and_changes_no_record() {
    let (endpoint, _) = endpoints();
    let prefix = unique("testsend");
    let db = prefix.replace('-', "_");
    let env = [("MONGODB_DATABASE", db.as_str())];
    ok(mailctl(&["provision", "--prefix", &prefix], &env));
    let domain = format!("{prefix}.example.com");
    ok(mailctl(
        &["seed", "--users", "20", "--domain", &domain],
        &env,
    ));
    let campaign =
        mailflow::domain::campaign::Campaign::for_schedule(time::OffsetDateTime::now_utc())
            .id
            .to_string();
    // The first seeded user who gets an email, as preview shows it.
    let (user, preview) = (0..20)
        .map(|i| format!("u{i:07}"))
        .find_map(|user| {
            let args = [
                "preview",
                "--prefix",
                &prefix,
                "--user",
                &user,
                "--campaign",
                &campaign,
            ];
            let out = mailctl(&args, &env);
            out.status.success().then(|| {
                (
                    user.clone(),
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                )
            })
        })
        .expect("a seeded user gets an email");
    let to = format!("qa@{prefix}-inbox.example.com");
    let base = [
        "test-send",
        "--prefix",
        &prefix,
        "--campaign",
        &campaign,
        "--user",
        &user,
    ];

    // Not one address: one line, nothing sent (checked below: one email in all).
    for bad in ["qa@", "two@a.example, b@c.example"] {
        let out = mailctl(&[&base[..], &["--to", bad]].concat(), &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert!(err.contains("--to") && err.lines().count() == 1, "{err}");
    }

    let said = ok(mailctl(&[&base[..], &["--to", &to]].concat(), &env));
    assert!(said.contains("no send record or count changed"), "{said}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sent = rt
        .block_on(mailflow_local::ses_record::sent_to_domain(
            &endpoint,
            &format!("{prefix}-inbox.example.com"),
        ))
        .unwrap();
    assert_eq!(sent.len(), 1, "one test email, to the test address only");
    let email = &sent[0];
    assert_eq!(email.to, std::slice::from_ref(&to));
    let subject = email.subject.clone().unwrap();
    assert!(
        preview.contains(&format!(
            "Subject: {}\n",
            subject.trim_start_matches("[TEST] ")
        )),
        "{subject} / {preview}"
    );
    assert!(subject.starts_with("[TEST] "), "{subject}");
    assert_eq!(email.header("X-Mailflow-Test"), Some("true"));
    assert!(
        preview.ends_with(email.text.as_deref().unwrap()),
        "{preview}"
    );
    // Nobody of the seeded domain got anything, and the campaign has no record.
    assert!(rt
        .block_on(mailflow_local::ses_record::sent_to_domain(
            &endpoint, &domain
        ))
        .unwrap()
        .is_empty());
    let status = status_json(&prefix, &campaign, &env);
    for count in ["sent", "failed", "inProgress", "deadLettered"] {
        assert_eq!(status[count], 0, "{count}: {status}");
    }
}

#[test]
fn cancel_is_final_and_run_and_resend_refuse_a_cancelled_campaign() {
    endpoints();
    let prefix = unique("cancel");
    let db = prefix.replace('-', "_");
    let env = [("MONGODB_DATABASE", db.as_str()), ("USER", "ops-alice")];
    ok(mailctl(&["provision", "--prefix", &prefix], &env));
    let campaign = "weekly-2026-W40";
    let said = ok(mailctl(
        &[
            "cancel",
            "--prefix",
            &prefix,
            "--campaign",
            campaign,
            "--reason",
            "wrong template",
        ],
        &env,
    ));
    assert!(said.starts_with(&format!("cancelled {campaign}")), "{said}");
    let one_line_failure = |args: &[&str], expect: &str| {
        let out = mailctl(args, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            err.contains(expect) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    };
    one_line_failure(
        &["cancel", "--prefix", &prefix, "--campaign", campaign],
        "already cancelled by ops-alice",
    );
    for command in ["run", "resend"] {
        one_line_failure(
            &[command, "--prefix", &prefix, "--campaign", campaign],
            "stays cancelled",
        );
    }
    one_line_failure(
        &[
            "cancel",
            "--prefix",
            &prefix,
            "--campaign",
            "not a campaign id",
        ],
        "campaign",
    );
    let status = status_json(&prefix, campaign, &env);
    assert_eq!(status["state"], "cancelled");
    assert_eq!(status["cancelledBy"], "ops-alice");
    assert_eq!(status["cancelReason"], "wrong template");
}

/// A run whose policy skipped everyone (their local time had passed), then a resend: it
/// sends them at once, since they are whom it is for (with the run's skip, it skipped exactly
/// them again).
#[test]
fn a_resend_sends_the_users_the_runs_skip_policy_passed_by() {
    let t = CliStack::provision_and_seed("skipped", 12);
    let today = jiff::tz::TimeZone::UTC
        .to_datetime(jiff::Timestamp::now())
        .date()
        .to_string();
    let run = ended(
        mailctl(
            &[
                "run",
                "--prefix",
                &t.prefix,
                "--campaign",
                &t.campaign,
                "--local-time",
                "00:00",
                "--send-date",
                &today,
                "--fallback-zone",
                "UTC",
                "--passed-time",
                "skip",
            ],
            &t.env(),
        ),
        "run --passed-time skip",
    );
    let audience = Some(t.audience as u64);
    assert_eq!(
        run["getUsers"]["localTime"]["passedSkipped"].as_u64(),
        audience,
        "{run}"
    );
    assert_eq!(run["sent"], 0, "{run}");
    let out = mailctl(
        &["resend", "--prefix", &t.prefix, "--campaign", &t.campaign],
        &t.env(),
    );
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("the run's policy was skip"), "{said}");
    let resend = ended(out, "resend");
    assert_eq!(
        resend["getUsers"]["localTime"]["passedSentNow"].as_u64(),
        audience,
        "{resend}"
    );
    assert!(resend["sent"].as_u64().unwrap() > 0, "{resend}");
}

/// A local-time run whose slot's schedules are lost (its release and its sweep, deleted as
/// soon as GetUsers makes them): its users stay held with nothing to release them, and `run`
/// says so and exits 1 instead of ending as if everyone had been handled.
#[test]
fn a_run_whose_users_are_held_with_no_release_pending_exits_1() {
    let t = CliStack::provision_and_seed("stranded", 10);
    let (date, _, _) = a_week_ahead();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let scheduler = rt.block_on(async {
        aws_sdk_scheduler::Client::new(&mailflow::adapters::aws_config().await)
    });
    let group = format!(
        "{}-{}",
        t.prefix,
        mailflow_local::names::RELEASE_SCHEDULE_GROUP
    );
    let mut run = std::process::Command::new(binary("mailctl"))
        .args(["run", "--prefix", &t.prefix, "--campaign", &t.campaign])
        .args(["--local-time", "09:00", "--send-date", &date])
        .args(["--fallback-zone", "Asia/Kathmandu"])
        .envs(t.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut deleted = 0;
    while run.try_wait().unwrap().is_none() {
        let listed = rt.block_on(scheduler.list_schedules().group_name(&group).send());
        for schedule in listed.iter().flat_map(|l| l.schedules()) {
            let name = schedule.name().unwrap_or_default();
            let gone = rt.block_on(
                scheduler
                    .delete_schedule()
                    .group_name(&group)
                    .name(name)
                    .send(),
            );
            deleted += usize::from(gone.is_ok());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = last_json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(deleted, 2, "{summary}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        summary["campaign"]["stillHeld"].as_u64(),
        Some(t.audience as u64),
        "{summary}"
    );
    assert!(
        stderr.contains("still held for their local time with no release pending"),
        "{stderr}"
    );
}

#[test]
fn redrive_moves_every_dlq_message_back() {
    endpoints();
    let prefix = unique("redrive");
    let exports = ok(mailctl(&["provision", "--prefix", &prefix], &[]));
    let var = |name: &str| {
        exports
            .lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .unwrap()
            .to_owned()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sqs =
        rt.block_on(async { aws_sdk_sqs::Client::new(&mailflow::adapters::aws_config().await) });
    let depth = |url: &str| {
        rt.block_on(mailflow_local::queues::depth(&sqs, url))
            .unwrap()
    };
    for (queue, name) in [("users", "USERS"), ("continuation", "CONTINUATION")] {
        let dlq = var(&format!("MAILFLOW_{name}_DLQ_URL"));
        let source = var(&format!("MAILFLOW_{name}_QUEUE_URL"));
        for i in 0..13 {
            rt.block_on(
                sqs.send_message()
                    .queue_url(&dlq)
                    .message_body(format!("m{i}"))
                    .send(),
            )
            .unwrap();
        }
        let out = ok(mailctl(
            &["redrive", "--queue", queue, "--prefix", &prefix],
            &[],
        ));
        assert!(out.starts_with("moved 13 messages"), "{queue}: {out}");
        assert_eq!(depth(&dlq), (0, 0), "{queue}");
        assert_eq!(depth(&source).0, 13, "{queue}");
    }
}

#[test]
fn bad_input_gets_one_clear_line_and_a_failure_exit() {
    endpoints();
    let long = "x".repeat(600);
    let cases: [(&[&str], &str); 5] = [
        (
            &["status", "--campaign", "no spaces", "--prefix", "x"],
            "campaign id \"no spaces\" is invalid",
        ),
        // About the id, before any table is read.
        (
            &["run", "--campaign", "", "--prefix", "x"],
            "campaign id \"\" is invalid",
        ),
        // Quoted short, with its length.
        (
            &["run", "--campaign", &long, "--prefix", "x"],
            "... (600 characters) is invalid",
        ),
        (
            &[
                "status",
                "--campaign",
                "weekly-2026-W46",
                "--prefix",
                "does-not-exist",
            ],
            "queue does-not-exist-UsersQueue not found",
        ),
        (
            &["resend", "--campaign", "weekly-2026-W46"],
            "MAILFLOW_SENDS_TABLE is not set",
        ),
    ];
    for (args, expected) in cases {
        let out = mailctl(args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(
            !err.contains("stack backtrace") && err.lines().count() == 1 && err.len() < 300,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn without_an_aws_environment_it_says_what_to_set() {
    let home = std::env::temp_dir().join(format!("mailctl-no-aws-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let mut command = std::process::Command::new(binary("mailctl"));
    command.args(["status", "--campaign", "weekly-2026-W46", "--prefix", "x"]);
    for k in [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
    ] {
        command.env_remove(k);
    }
    let out = command.env("HOME", &home).output().expect("mailctl runs");
    std::fs::remove_dir_all(&home).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("eval \"$(infra/local-stack.sh env)\""),
        "{err}"
    );
    assert!(err.contains("AWS_REGION"), "{err}");
    assert!(!err.to_lowercase().contains("metadata"), "{err}");
}

#[test]
fn logs_into_a_pipe_carry_no_colour_codes() {
    endpoints();
    let out = mailctl(
        &[
            "status",
            "--campaign",
            "weekly-2026-W46",
            "--prefix",
            "does-not-exist",
        ],
        &[("RUST_LOG", "debug")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().count() > 1, "debug logs expected: {err}");
    assert!(!err.contains('\u{1b}'), "ANSI escapes in a pipe: {err:?}");
}
