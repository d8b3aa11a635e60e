//! An A/B experiment on a definition's campaign, on the local stack: its subjects are
//! templates with the definition's data, checked at the start against the version that
//! renders them.

use super::definition_campaigns::{push_example, seed_week, CAMPAIGN};
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use std::time::Duration;

/// An experiment on a definition's campaign: its subjects are templates with the
/// definition's context (a subject per language of the definition, rendered against its
/// samples at the start, one line when one cannot be), and each of the variant's people
/// gets the subject made from their own data.
#[tokio::test(flavor = "multi_thread")]
async fn an_experiments_subjects_on_a_definitions_campaign_are_made_from_its_data() {
    use serde_json::json;
    let env = test_env("def_experiment", |o| {
        o.parameters
            .insert("TrackOpensAndClicks".into(), "true".into());
    })
    .await
    .unwrap();
    let stack = push_example(&env, "orders").await;
    let expected = seed_week(&env, 40, 5).await;
    let with_orders = expected.audience.values().filter(|e| e.is_ok()).count();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let start = |subject: serde_json::Value| {
        json!({"definition": "orders", "campaignId": CAMPAIGN, "experiment": {
            "variants": [{"name": "own"}, {"name": "count", "subject": subject}],
            "testPercent": 100, "waitHours": 3, "minDelivered": 1, "minPeople": 1,
        }})
    };
    for (subject, expected) in [
        (
            json!({"en": "{{ data.orders|length }} orders"}),
            "missing de",
        ),
        (
            json!({"en": "x", "de": "x", "fr": "x"}),
            "no language \"fr\"",
        ),
        (
            json!({"en": "{{ new_followers }} new", "de": "x"}),
            "the experiment variant's en subject:1: undefined value",
        ),
        (
            json!({"en": "x", "de": "{% if %}"}),
            "the experiment variant's de subject:1: syntax error",
        ),
        (
            json!({"en": "x", "de": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"}),
            "fuel",
        ),
        (
            json!({"en": "{{ 'x' * 2000 }}", "de": "x"}),
            "the subject renders 2000 bytes; at most 998",
        ),
        (
            json!({"en": "x".repeat(501), "de": "x"}),
            "501 bytes of template; at most 500",
        ),
    ] {
        let err = pipeline.start(start(subject)).await.unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("experiment variant count: ") && text.contains(expected),
            "{expected}: {text}"
        );
    }
    assert!(env.sent().await.unwrap().is_empty());

    // One customer's data fails the German subject (no such field): they get the language's
    // own subject, as the digest does, instead of no email.
    let subject = json!({
        "en": "[count] {{ data.orders|length }} orders this week",
        "de": "[count] {{ data.orders|length }} Bestellungen diese Woche{% if data.orders|length > 2 %} {{ data.orders[0].nope.deeper }}{% endif %}",
    });
    pipeline.start(start(subject.clone())).await.unwrap();
    // A later start that names no definition (as `mailctl resend` sends it) is checked
    // against the campaign's pinned version, not the digest's locales.
    let mut again = start(subject);
    again.as_object_mut().unwrap().remove("definition");
    let record = stack.campaigns.record(CAMPAIGN).await.unwrap().unwrap();
    let window = record.window.unwrap();
    again["since"] = json!(window
        .since
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap());
    again["until"] = json!(window
        .until
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap());
    again["topic"] = json!(record.topic.unwrap());
    pipeline.start(again).await.unwrap();
    pipeline
        .drain_queues(Duration::from_secs(600))
        .await
        .unwrap();
    let sent = env.sent().await.unwrap();
    // Everyone with orders got one email, whatever their variant's subject did with their data.
    assert_eq!(sent.values().map(Vec::len).sum::<usize>(), with_orders);
    let subjects: Vec<String> = sent
        .values()
        .flatten()
        .filter_map(|m| m.subject.clone())
        .collect();
    let counted: Vec<&String> = subjects
        .iter()
        .filter(|s| s.starts_with("[count] "))
        .collect();
    assert!(
        !counted.is_empty() && counted.len() < subjects.len(),
        "both variants are sent: {subjects:?}"
    );
    for subject in counted {
        let orders = subject.split(' ').nth(1).unwrap_or_default();
        assert!(
            orders.parse::<u32>().is_ok_and(|n| n >= 1),
            "the count is the customer's: {subject}"
        );
    }
}
