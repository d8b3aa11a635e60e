//! Keeps the configuration in step across code, template.yaml and the README: every variable
//! a function reads is set in the template and documented, and the numbers that must agree
//! (timeouts, visibility, concurrency) do.

use mailflow::config::{
    CreateEmailsConfig, GetUsersConfig, MongoConfig, OpenContentFunctionConfig, PickLinks,
    RateControlConfig, ReputationGuardConfig, SendEmailConfig, SesEventsConfig, UnsubscribeConfig,
    UnsubscribeFunctionConfig,
};
use mailflow_local::names;
use mailflow_local::template::{EnvValue, Template};
use std::collections::BTreeSet;

fn template() -> Template {
    Template::load(&mailctl::repo_root().join("template.yaml")).unwrap()
}

/// A number a function's environment gets: a literal or a parameter's default.
fn number(t: &Template, function: &str, var: &str) -> u32 {
    let raw = match &t.function(function).unwrap().env[var] {
        EnvValue::Literal(v) => v.clone(),
        EnvValue::Ref(p) => t.parameters[p]
            .clone()
            .unwrap_or_else(|| panic!("{p} has no default")),
        EnvValue::Join(..) | EnvValue::Arn(_) => {
            panic!("{function}: {var} is not a number")
        }
    };
    raw.parse().unwrap()
}

#[test]
fn every_variable_is_set_in_the_template_and_documented() {
    let t = template();
    let readme = std::fs::read_to_string(mailctl::repo_root().join("README.md")).unwrap();
    let functions: [(&str, Vec<&str>); 8] = [
        (
            "GetUsersFunction",
            [MongoConfig::VARS, GetUsersConfig::VARS].concat(),
        ),
        (
            "CreateEmailsFunction",
            [
                MongoConfig::VARS,
                CreateEmailsConfig::VARS,
                UnsubscribeConfig::VARS,
                PickLinks::VARS,
            ]
            .concat(),
        ),
        (
            "SendEmailFunction",
            [MongoConfig::VARS, SendEmailConfig::VARS].concat(),
        ),
        ("RateControlFunction", RateControlConfig::VARS.to_vec()),
        (
            "UnsubscribeFunction",
            [
                MongoConfig::VARS,
                UnsubscribeConfig::VARS,
                UnsubscribeFunctionConfig::VARS,
            ]
            .concat(),
        ),
        (
            "OpenContentFunction",
            [
                MongoConfig::VARS,
                UnsubscribeConfig::VARS,
                OpenContentFunctionConfig::VARS,
            ]
            .concat(),
        ),
        (
            "SesEventsFunction",
            [MongoConfig::VARS, SesEventsConfig::VARS].concat(),
        ),
        (
            "ReputationGuardFunction",
            ReputationGuardConfig::VARS.to_vec(),
        ),
    ];
    for (function, vars) in functions {
        let set: BTreeSet<&str> = t
            .function(function)
            .unwrap()
            .env
            .keys()
            .map(String::as_str)
            .collect();
        let read: BTreeSet<&str> = vars.iter().copied().collect();
        assert_eq!(
            set, read,
            "{function}: template.yaml sets exactly what the code reads"
        );
        for var in vars {
            assert!(
                readme.contains(&format!("`{var}`")),
                "README does not document {var}"
            );
        }
    }
    for var in ["LOG_FORMAT", "AWS_ENDPOINT_URL", "RUST_LOG"]
        .iter()
        .chain(MongoConfig::ALTERNATIVE_VARS)
        .chain(UnsubscribeConfig::ALTERNATIVE_VARS)
    {
        assert!(
            readme.contains(&format!("`{var}`")),
            "README does not document {var}"
        );
    }
}

#[test]
fn send_email_numbers_agree_with_its_queue_and_event_source() {
    let t = template();
    check_numbers(&t);
    // The concurrency follows the rate (SendEmail sets it); the template gives where it starts,
    // the least a mapping takes, whatever the rate.
    let overrides = [(names::SEND_RATE_PER_SECOND.to_string(), "900".to_string())].into();
    let t = Template::parse_with(&t.source, &overrides).unwrap();
    assert_eq!(
        t.function("SendEmailFunction").unwrap().sqs_events[0].maximum_concurrency,
        Some(2)
    );
    check_numbers(&t);
}

/// The public URLs' reserved concurrency: RateControl (and `mailctl plan`) read the very
/// parameters the functions are bounded by, and the defaults are what the model needs at the
/// default send rate and pick slots (`domain::public_urls`).
#[test]
fn the_public_urls_are_sized_for_the_default_send_rate() {
    use mailflow::domain::public_urls::PublicUrls;
    let t = template();
    let default = |p: &str| t.parameters[p].clone().unwrap();
    let reserved = |t: &Template, f: &str| t.function(f).unwrap().reserved_concurrency;
    assert_eq!(
        reserved(&t, names::UNSUBSCRIBE),
        Some(PublicUrls::DEFAULT.unsubscribe_concurrency)
    );
    assert_eq!(
        reserved(&t, names::OPEN_CONTENT),
        Some(PublicUrls::DEFAULT.open_content_concurrency)
    );
    assert_eq!(
        default("PickSlots"),
        PublicUrls::DEFAULT.pick_slots.to_string()
    );
    let rate: f64 = default(names::SEND_RATE_PER_SECOND).parse().unwrap();
    let short = PublicUrls::DEFAULT.check(rate).short();
    assert!(short.is_empty(), "at the default {rate}/s: {short:?}");
    // One parameter each, read by both.
    let overrides = [
        ("UnsubscribeConcurrency".to_string(), "31".to_string()),
        ("OpenContentConcurrency".to_string(), "241".to_string()),
        ("PickSlots".to_string(), "2".to_string()),
    ]
    .into();
    let t = Template::parse_with(&t.source, &overrides).unwrap();
    let control = "RateControlFunction";
    assert_eq!(reserved(&t, names::UNSUBSCRIBE), Some(31));
    assert_eq!(number(&t, control, "UNSUBSCRIBE_CONCURRENCY"), 31);
    assert_eq!(reserved(&t, names::OPEN_CONTENT), Some(241));
    assert_eq!(number(&t, control, "OPEN_CONTENT_CONCURRENCY"), 241);
    assert_eq!(number(&t, control, "PICK_SLOTS"), 2);
    assert_eq!(number(&t, names::OPEN_CONTENT, "PICK_SLOTS"), 2);
}

fn check_numbers(t: &Template) {
    let send = t.function("SendEmailFunction").unwrap();
    let queue = t.queue(&send.sqs_events[0].queue).unwrap();
    assert_eq!(
        number(t, "SendEmailFunction", "VISIBILITY_TIMEOUT_SECONDS"),
        queue.visibility_timeout
    );
    assert_eq!(
        number(t, "SendEmailFunction", "FUNCTION_TIMEOUT_SECONDS"),
        send.timeout
    );
    // SendEmail sends its whole batch at once: the pacer sizes its chunks by it.
    assert_eq!(
        number(t, "SendEmailFunction", "RECORD_CONCURRENCY"),
        send.sqs_events[0].batch_size,
        "SendEmail's RECORD_CONCURRENCY is its batch size"
    );
    assert_eq!(
        Some(number(t, "SendEmailFunction", "EMAILS_MAX_RECEIVE_COUNT")),
        queue
            .redrive
            .as_ref()
            .map(|(_, max_receives)| *max_receives),
        "EMAILS_MAX_RECEIVE_COUNT is the emails queue's maxReceiveCount"
    );
    // Every consumer's queue hides a message longer than the consumer can run.
    for f in &t.functions {
        for event in &f.sqs_events {
            let q = t.queue(&event.queue).unwrap();
            assert!(
                q.visibility_timeout > f.timeout,
                "{}: visibility must exceed Timeout",
                event.queue
            );
            assert!(q.redrive.is_some(), "{} needs a DLQ", event.queue);
            assert!(
                event.report_batch_item_failures,
                "{}: ReportBatchItemFailures",
                f.logical_id
            );
        }
    }
}

#[test]
fn sample_events_are_what_the_handlers_accept() {
    use aws_lambda_events::event::sqs::SqsEvent;
    use mailflow::domain::messages::{parse_body, EmailJob, UserMessage};
    use mailflow::stages::get_users::{parse_request, Request};
    let read = |name: &str| -> serde_json::Value {
        let path = mailctl::repo_root().join("infra/events").join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let local = mailflow::config::LocalTimeConfig::from_source(&|_: &str| None).unwrap();
    let parse_request = |event| parse_request(event, &local, 1_795_824_000_000);
    for name in [
        "schedule.json",
        "manual-run.json",
        "manual-resend.json",
        "manual-local-time.json",
    ] {
        match parse_request(read(name)) {
            Ok(Request::Run(run)) => {
                assert_eq!(run.campaign.id.as_str(), "weekly-2026-W47", "{name}");
                assert_eq!(
                    run.delivery.is_some(),
                    name == "manual-local-time.json",
                    "{name}"
                );
            }
            _ => panic!("{name} is not a GetUsers run"),
        }
    }
    match parse_request(read("release-slot.json")) {
        Ok(Request::Release(release)) => {
            assert_eq!(release.campaign_id.as_str(), "weekly-2026-W47")
        }
        _ => panic!("release-slot.json is not a release"),
    }
    let users: SqsEvent = serde_json::from_value(read("users-batch.json")).unwrap();
    assert!(parse_body::<UserMessage>(users.records[0].body.as_deref()).is_ok());
    assert!(parse_body::<UserMessage>(users.records[1].body.as_deref()).is_err());
    let emails: SqsEvent = serde_json::from_value(read("emails-batch.json")).unwrap();
    assert!(parse_body::<EmailJob>(emails.records[0].body.as_deref()).is_ok());
    assert!(parse_body::<EmailJob>(emails.records[1].body.as_deref()).is_err());
    let events: SqsEvent = serde_json::from_value(read("ses-events-batch.json")).unwrap();
    let now = 0;
    let parsed: Vec<_> = events
        .records
        .iter()
        .map(|r| mailflow::domain::ses_event::parse(r.body.as_deref().unwrap_or_default(), now))
        .collect();
    assert!(parsed[0].is_ok() && parsed[1].is_err() && parsed[2].is_ok());
    let alarm: aws_lambda_events::event::sns::SnsEvent =
        serde_json::from_value(read("reputation-alarm.json")).unwrap();
    let message: serde_json::Value = serde_json::from_str(&alarm.records[0].sns.message).unwrap();
    assert_eq!(message["NewStateValue"], "ALARM");
    assert_eq!(message["Trigger"]["MetricName"], "Reputation.BounceRate");
    let one_click = read("unsubscribe-one-click.json");
    let request =
        mailflow::runtime::function_url::HttpRequest::from_function_url_event(&one_click).unwrap();
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.form(),
        [("List-Unsubscribe".to_owned(), "One-Click".to_owned())]
    );
    let pick = mailflow::runtime::function_url::HttpRequest::from_function_url_event(&read(
        "open-content-pick.json",
    ))
    .unwrap();
    assert_eq!((pick.method.as_str(), pick.path.as_str()), ("GET", "/pick"));
    match parse_request(read("continuation-batch.json")) {
        Ok(Request::Continuations(records)) => {
            use mailflow::stages::get_users::Checkpoint;
            assert!(parse_body::<Checkpoint>(records[0].body.as_deref()).is_ok());
            assert!(parse_body::<Checkpoint>(records[1].body.as_deref()).is_err());
        }
        _ => panic!("continuation-batch.json is not an SQS batch"),
    }
}

#[test]
fn the_moto_fixes_are_pinned_to_the_moto_they_patch() {
    let root = mailctl::repo_root();
    let server = std::fs::read_to_string(root.join("infra/moto_server.py")).unwrap();
    let requirements = std::fs::read_to_string(root.join("infra/requirements-local.txt")).unwrap();
    let patched_for = server
        .lines()
        .find_map(|l| l.strip_prefix("PATCHED_FOR = "))
        .expect("infra/moto_server.py names the moto it patches (PATCHED_FOR)")
        .trim_matches('"');
    let pinned = requirements
        .lines()
        .find_map(|l| l.strip_prefix("moto[server]=="))
        .expect("infra/requirements-local.txt pins moto");
    assert_eq!(
        patched_for, pinned,
        "infra/moto_server.py's fixes were checked against moto {patched_for}, but moto {pinned} is pinned"
    );
}
