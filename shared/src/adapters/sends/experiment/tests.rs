use super::*;
use crate::adapters::item::{n, s, Item};
use std::collections::HashMap;

#[test]
fn the_tallies_carry_the_test_groups_last_email() {
    let experiment = Experiment::parse(
        r#"{"variants": [{"name": "a"}, {"name": "b"}], "testPercent": 50, "waitHours": 2}"#,
    )
    .unwrap();
    let campaign = "weekly-2026-W47";
    let users: Vec<String> = (0..40).map(|i| format!("u{i:02}")).collect();
    let in_test = |test: bool| -> Vec<String> {
        users
            .iter()
            .filter(|u| (experiment.assign(campaign, u) == Assignment::Rest) != test)
            .cloned()
            .collect()
    };
    let (first, second): (Vec<String>, Vec<String>) = {
        let test = in_test(true);
        (test[..2].to_vec(), test[2..3].to_vec())
    };
    let rest = in_test(false).remove(0);
    let record = |user: &str, variant: &str, times: &[(&str, u64)]| {
        let mut item: Item = HashMap::from([
            ("userId".to_owned(), s(user)),
            ("campaignId".to_owned(), s(campaign)),
            ("status".to_owned(), s("SENT")),
            ("variant".to_owned(), s(variant)),
            ("deliveredAt".to_owned(), n(1)),
        ]);
        for (k, v) in times {
            item.insert((*k).to_owned(), n(*v));
        }
        SendRecord::from_item(&item)
    };
    let records = vec![
        record(
            &first[0],
            "a",
            &[("startedAt", 1_000), ("completedAt", 1_200)],
        ),
        record(&first[1], "a", &[("startedAt", 5_000)]),
        record(
            &second[0],
            "b",
            &[("startedAt", 2_000), ("completedAt", 2_100)],
        ),
        // The rest, sent the winner later, is not the test group's.
        record(&rest, "a", &[("startedAt", 9_000), ("completedAt", 9_100)]),
    ];
    let tallies = experiment_tallies(&records, &experiment);
    // Still being sent (claimed, not completed) counts as its last email.
    assert_eq!(tallies["a"].last_sent_ms, Some(5_000));
    assert_eq!(tallies["b"].last_sent_ms, Some(2_100));
    assert_eq!((tallies["a"].sent, tallies["a"].delivered), (2, 2));
    let decide_at = experiment.clone().starting_at(0).decide_at_ms;
    let recorded = Experiment {
        decide_at_ms: decide_at,
        ..experiment
    };
    assert_eq!(recorded.due_at(&tallies), Some(2 * 3_600_000 + 5_000));
}
