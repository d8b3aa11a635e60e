//! The sends table's warm-up: not a limit, said beside the limits (`checks`).

use super::{Account, Demand};

/// What to say when the sends table's or its index's warm throughput is below the campaign's
/// writes: not a limit (on demand, DynamoDB serves up to twice the previous peak at once and
/// scales beyond it within 30 minutes), but a campaign beyond it is throttled until then, for
/// about half an hour per doubling.
pub fn warm_up(demand: &Demand, account: &Account) -> Option<String> {
    let (table, index) = demand.writes();
    // Scaled up to what it may take at most: beyond that the binding line says it.
    let short = [
        (
            "sends table",
            account.sends_table_warm_write_units,
            table,
            account.sends_table_write_units,
        ),
        (
            "campaign index",
            account.sends_index_warm_write_units,
            index,
            account.sends_index_write_units,
        ),
    ]
    .into_iter()
    .filter_map(|(what, warm, needed, ceiling)| {
        let reached = needed.min(ceiling);
        warm.filter(|w| reached > *w)
            .map(|w| (what, w, needed, reached))
    })
    .map(|(what, warm, needed, reached)| {
        let doublings = (reached / warm).log2().ceil();
        format!(
            "the {what} serves {warm:.0} write units/s at once and the rate needs {needed:.0}: \
             throttled for up to {:.0} minutes ({doublings:.0} doublings) while DynamoDB scales it",
            doublings * 30.0
        )
    })
    .collect::<Vec<_>>();
    // The template's parameters that pre-warm both: what the rate reaches within the quota
    // (whole hundreds), never below what either already serves (DynamoDB refuses a decrease).
    let figure = |needed: f64, ceiling: f64, warm: Option<f64>| {
        ((needed.min(ceiling) / 100.0).ceil() * 100.0).max(warm.unwrap_or(0.0))
    };
    (!short.is_empty()).then(|| {
        format!(
            "{}; pre-warm them: deploy with SendsTableWarmWrites={:.0} SendsIndexWarmWrites={:.0} \
             (docs/deploying.md, \"The sends table's throughput\")",
            short.join("; "),
            figure(
                table,
                account.sends_table_write_units,
                account.sends_table_warm_write_units
            ),
            figure(
                index,
                account.sends_index_write_units,
                account.sends_index_warm_write_units
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::capacity::checks;
    use crate::domain::capacity::test_demand as demand;

    #[test]
    fn warm_throughput_is_a_warm_up_not_a_ceiling() {
        // A new on-demand table serves 4,000 at once: the quota raised to 80,000 holds the
        // 60,200 units of 20,000/s (no limit binds on the table), and the warm-up is said.
        let mut account = Account::defaults("us-east-1");
        account.sends_table_write_units = 80_000.0;
        account.sends_index_write_units = 80_000.0;
        account.sends_table_warm_write_units = Some(4_000.0);
        let all = checks(&demand(20_000.0, 266), &account, None);
        assert!(!all[1].binds() && !all[2].binds(), "{all:?}");
        let note = warm_up(&demand(20_000.0, 266), &account).unwrap();
        assert!(
            note.contains("the sends table serves 4000 write units/s at once and the rate needs 60200: throttled for up to 120 minutes (4 doublings)"),
            "{note}"
        );
        // Up to the table's quota, not beyond it (the binding line says the rest): from
        // 4,000 to a quota of 16,000 is two doublings.
        let mut capped = account.clone();
        capped.sends_table_write_units = 16_000.0;
        let note = warm_up(&demand(20_000.0, 266), &capped).unwrap();
        assert!(note.contains("up to 60 minutes (2 doublings)"), "{note}");
        // The table pre-warmed and its index not: the index is said (40,200 over 4,000).
        account.sends_table_warm_write_units = Some(60_200.0);
        account.sends_index_warm_write_units = Some(4_000.0);
        let note = warm_up(&demand(20_000.0, 266), &account).unwrap();
        assert!(
            note.starts_with("the campaign index serves 4000")
                && !note.contains("sends table serves"),
            "{note}"
        );
        // What to deploy with: both figures the rate needs, so that neither waits.
        assert!(
            note.contains("deploy with SendsTableWarmWrites=60200 SendsIndexWarmWrites=40200"),
            "{note}"
        );
        // Never a decrease (DynamoDB refuses one), never beyond the quota: a table warmer
        // than the rate needs keeps its figure; an index on a quota of 16,000 asks for that.
        account.sends_table_warm_write_units = Some(70_000.0);
        account.sends_index_write_units = 16_000.0;
        let note = warm_up(&demand(20_000.0, 266), &account).unwrap();
        assert!(
            note.contains("deploy with SendsTableWarmWrites=70000 SendsIndexWarmWrites=16000"),
            "{note}"
        );
        account.sends_index_write_units = 80_000.0;
        account.sends_table_warm_write_units = Some(60_200.0);
        // Both pre-warmed, or not read: nothing to say.
        account.sends_index_warm_write_units = Some(40_200.0);
        assert_eq!(warm_up(&demand(20_000.0, 266), &account), None);
        account.sends_table_warm_write_units = None;
        account.sends_index_warm_write_units = None;
        assert_eq!(warm_up(&demand(20_000.0, 266), &account), None);
    }
}
