use super::*;
use crate::domain::topics::TopicId;

const NOW: i64 = 1_796_029_200_000;
const HOUR: i64 = 3_600_000;

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W47", None).unwrap()
}

fn experiment() -> Experiment {
    serde_json::from_value(serde_json::json!({
        "variants": [{"name": "a"}, {"name": "b"}],
        "testPercent": 20, "waitHours": 4,
    }))
    .unwrap()
}

fn request(guardrails: &GuardrailRequest) -> StartRequest<'_> {
    StartRequest {
        guardrails,
        experiment: None,
        delivery: None,
        quiet_hours: None,
    }
}

const DEFAULTS: GuardrailDefaults = GuardrailDefaults {
    holdout_bp: 500,
    deadline_hours: 48,
};

#[test]
fn a_first_start_takes_the_stacks_defaults_unless_it_started_before_guardrails() {
    let given = GuardrailRequest::default();
    let id = campaign().id;
    let first = request(&given)
        .registration(&id, DEFAULTS, false, NOW, NOW)
        .unwrap();
    assert_eq!(first.guardrails.holdout_bp, 500);
    assert_eq!(first.guardrails.deadline_ms, Some(NOW + 48 * HOUR));
    let older = request(&given)
        .registration(&id, DEFAULTS, true, NOW, NOW)
        .unwrap();
    assert_eq!(older.guardrails, CampaignGuardrails::default());
}

#[test]
fn an_experiment_is_dated_from_the_test_groups_last_email_and_its_deadline_checked() {
    let e = experiment();
    let quiet = QuietHours::parse("22:00-07:00", QuietPolicy::Defer).unwrap();
    let given = GuardrailRequest::default();
    let start = StartRequest {
        experiment: Some(&e),
        quiet_hours: Some(quiet),
        ..request(&given)
    };
    let id = campaign().id;
    let registered = start.registration(&id, DEFAULTS, false, NOW, NOW).unwrap();
    let decide_at = registered.experiment.unwrap().decide_at_ms.unwrap();
    // Quiet hours of nine hours (ten with a DST change) hold the test group back first.
    assert_eq!(decide_at, NOW + quiet.length_ms() + 4 * HOUR);
    let early = GuardrailRequest {
        deadline_ms: Some(NOW + 5 * HOUR),
        ..Default::default()
    };
    let refused = StartRequest {
        guardrails: &early,
        ..start
    }
    .registration(&id, DEFAULTS, false, NOW, NOW);
    assert!(matches!(
        refused,
        Err(StartError::Experiment(
            ExperimentError::DeadlineFirst { .. }
        ))
    ));
}

#[test]
fn a_later_start_keeps_what_the_record_fixed_and_may_move_the_deadline() {
    let given = GuardrailRequest::default();
    let mut c = campaign();
    let registered = request(&given)
        .registration(&c.id, DEFAULTS, false, NOW, NOW)
        .unwrap();
    let recorded = CampaignRecord {
        window: Some(c.window),
        topic: Some("product-news".into()),
        guardrails: Some(CampaignGuardrails {
            holdout_bp: 1_000,
            ..registered.guardrails
        }),
        ..Default::default()
    };
    let settled = request(&given)
        .settle(&mut c, false, &registered, &recorded, NOW)
        .unwrap();
    assert_eq!(
        c.topic,
        TopicId::parse("product-news").unwrap(),
        "the recorded topic"
    );
    assert_eq!(settled.guardrails.holdout_bp, 1_000, "as first recorded");
    assert_eq!(settled.moved, None);
    let later = GuardrailRequest {
        deadline_ms: Some(NOW + 72 * HOUR),
        ..Default::default()
    };
    let settled = request(&later)
        .settle(&mut c, false, &registered, &recorded, NOW)
        .unwrap();
    assert_eq!(settled.moved.unwrap().deadline_ms, Some(NOW + 72 * HOUR));
    let other_holdout = GuardrailRequest {
        holdout_bp: Some(200),
        ..Default::default()
    };
    assert!(matches!(
        request(&other_holdout).settle(&mut c, false, &registered, &recorded, NOW),
        Err(StartError::Campaign(CampaignError::HoldoutChanged { .. }))
    ));
}

#[test]
fn an_experiment_given_to_a_campaign_started_without_one_is_refused() {
    let e = experiment();
    let given = GuardrailRequest::default();
    let start = StartRequest {
        experiment: Some(&e),
        ..request(&given)
    };
    let mut c = campaign();
    let registered = start
        .registration(&c.id, DEFAULTS, false, NOW, NOW)
        .unwrap();
    let recorded = CampaignRecord::default();
    assert!(matches!(
        start.settle(&mut c, false, &registered, &recorded, NOW),
        Err(StartError::Experiment(ExperimentError::Late(_)))
    ));
}
