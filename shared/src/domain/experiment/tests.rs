use super::*;

fn experiment(json: serde_json::Value) -> Result<Experiment, ExperimentError> {
    Experiment::parse(&json.to_string())
}

fn two() -> Experiment {
    experiment(serde_json::json!({
        "variants": [{"name": "a"}, {"name": "b", "share": 3}],
        "testPercent": 20, "waitHours": 4,
    }))
    .unwrap()
}

#[test]
fn assignment_is_stable_and_the_shares_hold_over_100000_users() {
    let e = two();
    let mut counts = [0u64; 3];
    for u in 0..100_000 {
        let user = format!("user-{u}");
        let first = e.assign("weekly-2026-W48", &user);
        assert_eq!(first, e.assign("weekly-2026-W48", &user), "stable");
        match first {
            Assignment::Test(i) => counts[i] += 1,
            Assignment::Rest => counts[2] += 1,
        }
    }
    // Expected: a 5 %, b 15 %, rest 80 %; each within 4 standard deviations.
    for (count, share) in counts.iter().zip([0.05f64, 0.15, 0.80]) {
        let expected = 100_000.0 * share;
        let sd = (100_000.0 * share * (1.0 - share)).sqrt();
        assert!(
            (*count as f64 - expected).abs() < 4.0 * sd,
            "{count} vs {expected} ± {sd}"
        );
    }
    // Another campaign draws anew: not the same users in the test group.
    let moved = (0..1000)
        .filter(|u| {
            let user = format!("user-{u}");
            e.assign("weekly-2026-W48", &user) != e.assign("weekly-2026-W49", &user)
        })
        .count();
    assert!(moved > 100, "{moved}");
}

#[test]
fn the_draw_is_independent_of_the_holdout() {
    let e = two();
    let (mut held, mut held_in_test) = (0u32, 0u32);
    for u in 0..100_000 {
        let user = format!("user-{u}");
        if crate::domain::guardrails::held_out("weekly-2026-W48", &user, 1000) {
            held += 1;
            held_in_test += u32::from(e.assign("weekly-2026-W48", &user) != Assignment::Rest);
        }
    }
    // 10 % held out; of them 20 % in the test group, as of everyone.
    let share = f64::from(held_in_test) / f64::from(held);
    assert!((share - 0.20).abs() < 0.02, "{share}");
}

#[test]
fn a_bad_experiment_is_refused_naming_what_to_fix() {
    let cases = [
        (
            serde_json::json!({"variants": [{"name": "a"}], "testPercent": 20, "waitHours": 4}),
            "1 variants",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "a"}], "testPercent": 20, "waitHours": 4}),
            "two variants are named",
        ),
        (
            serde_json::json!({"variants": [{"name": "A b"}, {"name": "c"}], "testPercent": 20, "waitHours": 4}),
            "is not 1-32",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 0, "waitHours": 4}),
            "testPercent 0",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20, "waitHours": 0}),
            "waitHours 0",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b", "subject": {"en": "Hi"}}], "testPercent": 20, "waitHours": 4}),
            "missing de, fr",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b", "subject": {"en": "{{ nope }}", "fr": "x", "de": "x"}}], "testPercent": 20, "waitHours": 4}),
            "en subject:1: undefined value: `nope`",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b", "subject": {"en": "{% if %}", "fr": "x", "de": "x"}}], "testPercent": 20, "waitHours": 4}),
            "en subject:1",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b", "template": "fancy"}], "testPercent": 20, "waitHours": 4}),
            "has no body \"fancy\"",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20, "waitHours": 4, "defaultVariant": "c"}),
            "defaultVariant",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20, "waitHours": 4, "winProbability": 100}),
            "winProbability",
        ),
        (
            serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 20, "waitHours": 4, "wait": 4}),
            "unknown field",
        ),
    ];
    // As a campaign of the bundled digest checks it at its start.
    let bundled = crate::ports::LoadedDefinition::bundled().unwrap();
    let for_digest = |json: serde_json::Value| {
        let experiment = experiment(json).map_err(|e| e.to_string())?;
        crate::domain::definition::render::check_experiment(
            &experiment,
            &bundled.definition,
            &bundled.files,
        )
    };
    for (json, expected) in cases {
        let err = for_digest(json.clone()).unwrap_err();
        assert!(err.contains(expected), "{json}: {err}");
    }
    let good = serde_json::json!({"variants": [{"name": "a"},
        {"name": "b", "subject": {"en": "{{ data.followers.count }} new", "fr": "{{ user.name }}", "de": "x"}, "template": "short"}],
        "testPercent": 20, "waitHours": 4});
    for_digest(good).unwrap();
    // A definition's languages, subjects and bodies are not the digest's: parsed, they are
    // left to the campaign's start.
    let for_a_definition = serde_json::json!({"variants": [{"name": "a"},
        {"name": "b", "subject": {"en": "{{ data.orders.count }} orders"}, "template": "long"}],
        "testPercent": 20, "waitHours": 4});
    experiment(for_a_definition).unwrap();
}

#[test]
fn a_later_start_keeps_the_experiment_or_is_refused() {
    let recorded = two().starting_at(1_001);
    assert_eq!(
        recorded.decide_at_ms,
        Some(2_000 + 4 * 3_600_000),
        "on a whole second"
    );
    let id = CampaignId::parse("weekly-2026-W48").unwrap();
    recorded.settle(&two(), &id).unwrap();
    let mut other = two();
    other.test_percent = 30;
    assert!(matches!(
        recorded.settle(&other, &id),
        Err(ExperimentError::Changed { .. })
    ));
}

/// ln Γ(x) (Lanczos, g = 7): for the closed form only.
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let sum: f64 = C[0] + (1..9).map(|i| C[i] / (x + i as f64)).sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

fn ln_beta(a: f64, b: f64) -> f64 {
    ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b)
}

/// Evan Miller, "Formulas for Bayesian A/B Testing" (2015): P(B > A) in closed form.
fn miller(a: (f64, f64), b: (f64, f64)) -> f64 {
    (0..b.0 as u64)
        .map(|i| {
            let i = i as f64;
            (ln_beta(a.0 + i, a.1 + b.1)
                - (b.1 + i).ln()
                - ln_beta(1.0 + i, b.1)
                - ln_beta(a.0, a.1))
            .exp()
        })
        .sum()
}

#[test]
fn the_integration_agrees_with_the_closed_form_for_two_variants() {
    for (a, b) in [
        ((1.0 + 30.0, 1.0 + 470.0), (1.0 + 45.0, 1.0 + 455.0)),
        ((1.0 + 3.0, 1.0 + 97.0), (1.0 + 4.0, 1.0 + 96.0)),
        ((1.0 + 200.0, 1.0 + 9_800.0), (1.0 + 260.0, 1.0 + 9_740.0)),
        ((1.0, 1.0), (1.0, 1.0)),
    ] {
        let p = probability_best(&[a, b]);
        let exact = miller(a, b);
        assert!((p[1] - exact).abs() < 1e-3, "{p:?} vs {exact}");
        assert!((p[0] + p[1] - 1.0).abs() < 1e-6);
    }
}

fn tallies(rows: &[(&str, u64, u64)]) -> BTreeMap<String, Tally> {
    rows.iter()
        .map(|(name, delivered, clicks)| {
            (
                name.to_string(),
                Tally {
                    sent: *delivered,
                    delivered: *delivered,
                    human_clicks: *clicks,
                    human_opens: *delivered,
                    last_sent_ms: None,
                },
            )
        })
        .collect()
}

#[test]
fn the_rule_names_a_clear_winner_and_otherwise_the_default_says_why() {
    let e = two();
    let clear = decide(&e, &tallies(&[("a", 1000, 20), ("b", 1000, 60)]), None, 7);
    assert_eq!((clear.winner.as_str(), clear.by), ("b", DecidedBy::Rule));
    assert!(
        clear.reason.contains("b is the best with probability"),
        "{}",
        clear.reason
    );
    assert!(clear.win_probability_bp["b"] > 9_900);
    let close = decide(&e, &tallies(&[("a", 1000, 50), ("b", 1000, 52)]), None, 7);
    assert_eq!((close.winner.as_str(), close.by), ("a", DecidedBy::Default));
    assert!(
        close.reason.contains("no variant is the best"),
        "{}",
        close.reason
    );
    let few = decide(&e, &tallies(&[("a", 1000, 20), ("b", 499, 200)]), None, 7);
    assert_eq!((few.winner.as_str(), few.by), ("a", DecidedBy::Default));
    assert!(few.reason.contains("b 499"), "{}", few.reason);
    // An exact tie is no win, however low the bar: the default goes.
    let low = Experiment {
        win_probability: 51,
        default_variant: Some("b".into()),
        ..e.clone()
    };
    let tie = decide(&low, &tallies(&[("a", 1000, 50), ("b", 1000, 50)]), None, 7);
    assert_eq!((tie.winner.as_str(), tie.by), ("b", DecidedBy::Default));
    let picked = decide(&e, &tallies(&[("a", 10, 1)]), Some("b"), 7);
    assert_eq!((picked.winner.as_str(), picked.by), ("b", DecidedBy::Hand));
    // Opens decide only when asked: every email opened (Apple MPP) ties them.
    let opens = Experiment {
        metric: Metric::Opens,
        default_variant: Some("b".into()),
        ..e.clone()
    };
    let tied = decide(
        &opens,
        &tallies(&[("a", 1000, 20), ("b", 1000, 60)]),
        None,
        7,
    );
    assert_eq!((tied.winner.as_str(), tied.by), ("b", DecidedBy::Default));
}

#[test]
fn without_enough_people_no_variant_wins_by_the_rule() {
    // Shares 1:10 and nobody clicked: the prior alone would make the smaller variant the
    // best with probability 90.9 %.
    let mut e = two();
    e.variants[1].share = 10;
    let none = decide(&e, &tallies(&[("a", 600, 0), ("b", 6000, 0)]), None, 7);
    assert_eq!((none.winner.as_str(), none.by), ("a", DecidedBy::Default));
    assert!(
        none.reason
            .contains("too few people clicked to decide (need 30 in the test group; have 0)"),
        "{}",
        none.reason
    );
    let b_first = Experiment {
        default_variant: Some("b".into()),
        ..e.clone()
    };
    let few = decide(
        &b_first,
        &tallies(&[("a", 600, 2), ("b", 6000, 27)]),
        None,
        7,
    );
    assert_eq!((few.winner.as_str(), few.by), ("b", DecidedBy::Default));
    assert!(few.reason.contains("have 29"), "{}", few.reason);
    // Enough people: the rule decides.
    let enough = decide(
        &b_first,
        &tallies(&[("a", 600, 30), ("b", 6000, 30)]),
        None,
        7,
    );
    assert_eq!((enough.winner.as_str(), enough.by), ("a", DecidedBy::Rule));
    // The bar is the file's.
    let bad = experiment(
        serde_json::json!({"variants": [{"name": "a"}, {"name": "b"}],
        "testPercent": 20, "waitHours": 4, "minPeople": 0}),
    );
    assert!(bad.unwrap_err().to_string().contains("minPeople 0"));
}

#[test]
fn five_variants_share_the_probability_and_the_best_wins() {
    let mut e = two();
    e.variants = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| Variant {
            name: n.to_string(),
            share: 1,
            subject: BTreeMap::new(),
            template: None,
        })
        .collect();
    let t = tallies(&[
        ("a", 600, 30),
        ("b", 600, 32),
        ("c", 600, 28),
        ("d", 600, 70),
        ("e", 600, 31),
    ]);
    let d = decide(&e, &t, None, 0);
    assert_eq!(d.winner, "d");
    let total: u32 = d.win_probability_bp.values().sum();
    assert!((9_990..=10_010).contains(&total), "{total}");
}

#[test]
fn the_wilson_interval_holds_the_rate() {
    let (lo, hi) = wilson(50, 1000).unwrap();
    assert!(
        lo < 0.05 && 0.05 < hi && lo > 0.035 && hi < 0.067,
        "{lo} {hi}"
    );
    assert_eq!(wilson(0, 0), None);
    let (lo, hi) = wilson(0, 10).unwrap();
    assert!(lo == 0.0 && hi > 0.2);
}
