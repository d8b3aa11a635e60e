//! What SendEmail is given in the lab: its settings as the template sets them (the waiting
//! room's too), and a campaign's backlog of email jobs.

use anyhow::Result;
use mailflow::config::SendEmailConfig;
use mailflow::domain::campaign::CampaignId;
use mailflow::domain::messages::EmailJob;
use mailflow::domain::send_rate::Environment;
use std::collections::BTreeMap;

/// SendEmail's settings at `rate` emails/s, for `environment`'s batch and memory.
pub(super) fn config(rate: f64, environment: &Environment) -> Result<SendEmailConfig> {
    let mut vars = BTreeMap::from([
        ("MONGODB_URI", "mongodb://127.0.0.1:1".to_string()),
        ("SENDS_TABLE_NAME", "lab-sends".into()),
        ("CAMPAIGNS_TABLE_NAME", "lab-campaigns".into()),
        ("EMAILS_QUEUE_URL", "lab-emails".into()),
        ("SENDER_ADDRESS", "lab@example.com".into()),
        ("SEND_RATE_PER_SECOND", rate.to_string()),
        ("VISIBILITY_TIMEOUT_SECONDS", "180".into()),
        ("FUNCTION_TIMEOUT_SECONDS", "30".into()),
        (
            "RECORD_CONCURRENCY",
            environment.records_at_once.to_string(),
        ),
        (
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            environment.memory_mb.to_string(),
        ),
    ]);
    vars.extend(waiting_room_vars());
    Ok(SendEmailConfig::from_source(&|k: &str| {
        vars.get(k).cloned()
    })?)
}

/// The waiting room's settings SendEmail reads (users met in their quiet hours wait there).
pub(crate) fn waiting_room_vars() -> [(&'static str, String); 5] {
    [
        ("WAITING_TABLE_NAME", "lab-waiting".into()),
        ("RELEASE_SCHEDULE_GROUP", "lab-releases".into()),
        (
            "RELEASE_SCHEDULER_ROLE_ARN",
            "arn:aws:iam::000000000000:role/lab".into(),
        ),
        (
            "RELEASE_DEAD_LETTER_ARN",
            "arn:aws:sqs:us-east-1:000000000000:lab".into(),
        ),
        (
            "RELEASE_FUNCTION_ARN",
            "arn:aws:lambda:us-east-1:000000000000:function:lab-get-users".into(),
        ),
    ]
}

/// `count` email jobs of one campaign, each in the UTC zone of a user without one.
pub(crate) fn jobs(count: usize) -> Vec<String> {
    let campaign = CampaignId::parse("lab-rate").expect("a valid id");
    let now_ms = mailflow::domain::ledger::epoch_ms(mailflow::runtime::clock::now()) as i64;
    let window = mailflow::domain::campaign::Window::new(
        time::macros::datetime!(2026-11-16 0:00 UTC),
        time::macros::datetime!(2026-11-23 0:00 UTC),
    )
    .expect("a window");
    (0..count)
        .map(|i| {
            let job = EmailJob {
                campaign_id: campaign.clone(),
                user_id: format!("u{i:07}"),
                to: format!("user{i}@example.com"),
                subject: "Your week".into(),
                html: "<p>Hello</p>".into(),
                text: "Hello".into(),
                unsubscribe_url: None,
                include_failed: false,
                include_cancelled: false,
                due: None,
                topic: mailflow::domain::messages::weekly_topic(),
                zone: None,
                variant: None,
                // All rendered at the start: a run longer than the standing's bound reads
                // each person's standing again, as SendEmail does with a backlog.
                rendered_at_ms: Some(now_ms),
                window: Some(window),
                definition: None,
            };
            serde_json::to_string(&job).expect("a job serialises")
        })
        .collect()
}
