//! The send rate's rules: the ceiling, the shared rate lowered and climbing back, the
//! slots and the chunks an environment takes.

use super::*;

fn quota(max_send_rate: f64) -> Result<SendQuota, QuotaUnknown> {
    Ok(SendQuota {
        max_send_rate,
        max_24_hour_send: 50_000.0,
        sent_last_24_hours: 0.0,
    })
}

#[test]
fn the_lower_of_the_configured_rate_and_the_account_maximum() {
    let rate = |quota| SendRate::with_quota(14.0, &quota);
    assert_eq!(rate(quota(1.0)).campaign_wide(), 1.0);
    assert_eq!(rate(quota(1.0)).source(), RateSource::SesQuota);
    assert_eq!(rate(quota(200.0)).campaign_wide(), 14.0);
    assert_eq!(rate(quota(200.0)).source(), RateSource::Configured);
    let unknown = rate(Err(QuotaUnknown("GetAccount answered HTTP 404".into())));
    assert_eq!((unknown.campaign_wide(), unknown.ses_max), (14.0, None));
}

#[test]
fn concurrency_follows_the_rate() {
    let default = Environment::DEFAULT;
    let environments = |rate| SendRate::configured(rate).environments(&default);
    // 128 MB is 7 % of a vCPU: 29 ms of CPU an email, 10 of them and the round trips.
    assert_eq!(default.rate().floor(), 18.0);
    assert_eq!(environments(14.0), 2);
    assert_eq!(environments(55.0), 3);
    assert_eq!(environments(56.0), 4);
    assert_eq!(environments(1_000.0), 55);
    assert_eq!(environments(1_000_000.0), 1000);
    let capped = SendRate::with_quota(10_000.0, &quota(100.0));
    assert_eq!(capped.environments(&default), 6);
    // A vCPU and batches of 100: 0.21 s of CPU and 0.25 s of round trips a batch.
    let big = Environment {
        records_at_once: 100,
        memory_mb: 1_769,
    };
    assert_eq!(big.rate().floor(), 217.0);
    assert_eq!(SendRate::configured(19_000.0).environments(&big), 88);
    assert_eq!(SendRate::configured(20_000.0).environments(&big), 92);
}

#[test]
fn the_batch_keeps_the_rate_items_takes_within_its_budget() {
    assert_eq!(Environment::batch_for(14.0), 10);
    assert_eq!(Environment::batch_for(5_000.0), 25);
    assert_eq!(Environment::batch_for(10_000.0), 50);
    assert_eq!(Environment::batch_for(20_000.0), 100);
    assert_eq!(Environment::batch_for(1e6), 100);
    for rate in [1_000.0, 5_000.0, 10_000.0, 20_000.0] {
        let environment = Environment {
            records_at_once: Environment::batch_for(rate),
            memory_mb: 1_769,
        };
        assert!(environment.takes_per_second(rate) <= RATE_ITEM_TAKES_PER_SECOND);
    }
    // Batches of 10 at 20,000/s: twice the writes the item allows.
    assert_eq!(Environment::DEFAULT.takes_per_second(20_000.0), 2_000.0);
}

#[test]
fn a_throttle_lowers_the_rate_once_per_burst_and_it_climbs_back() {
    let ceiling = SendRate::configured(100.0);
    let start = SharedRate::at(&ceiling, 10_000);
    assert_eq!(start.next(&ceiling, 20_000, false), None, "at the ceiling");

    let lowered = start.next(&ceiling, 20_000, true).unwrap();
    assert_eq!(
        (lowered.rate, lowered.source),
        (70.0, RateSource::Throttled)
    );
    // The same burst's other throttles: no second decrease within the spacing.
    assert_eq!(lowered.next(&ceiling, 20_500, true), None);
    let again = lowered.next(&ceiling, 21_000, true).unwrap();
    assert!((again.rate - 49.0).abs() < 1e-9);

    // Back up a quarter of itself and 5 % of the ceiling per second, to the ceiling and
    // its source.
    let mut rate = again;
    let mut at = rate.changed_at_ms;
    assert_eq!(rate.next(&ceiling, at + 999, false), None);
    while rate.rate < 100.0 {
        at += 1_000;
        rate = rate.next(&ceiling, at, false).unwrap();
    }
    assert_eq!((rate.rate, rate.source), (100.0, RateSource::Configured));
    assert_eq!(at - again.changed_at_ms, 3_000);
}

#[test]
fn a_long_refusal_stops_at_the_floor() {
    let ceiling = SendRate::configured(1000.0);
    let mut rate = SharedRate::at(&ceiling, 0);
    assert!(!rate.at_floor());
    for second in 1..100 {
        if let Some(next) = rate.next(&ceiling, second * 1_000, true) {
            rate = next;
        }
    }
    assert_eq!(rate.rate, 20.0);
    // What the rate-at-floor alarm watches; one step up and it is off the floor.
    assert!(rate.at_floor());
    assert!(!rate.next(&ceiling, 200_000, false).unwrap().at_floor());
}

#[test]
fn a_new_ceiling_is_taken_at_once_unless_throttling_holds_the_rate_lower() {
    let old = SendRate::configured(100.0);
    let raised = SendRate::with_quota(500.0, &quota(400.0));
    let start = SharedRate::at(&old, 0);
    let next = start.next(&raised, 1, false).unwrap();
    assert_eq!((next.rate, next.source), (400.0, RateSource::SesQuota));
    assert_eq!(next.changed_at_ms, 1);

    let throttled = start.next(&old, 5_000, true).unwrap();
    let next = throttled.next(&raised, 5_001, false).unwrap();
    assert_eq!((next.rate, next.ceiling), (70.0, 400.0));
    assert_eq!(next.source, RateSource::Throttled);
    let lowered = SendRate::with_quota(500.0, &quota(10.0));
    let next = throttled.next(&lowered, 5_002, false).unwrap();
    assert_eq!((next.rate, next.source), (10.0, RateSource::SesQuota));
}

#[test]
fn slots_and_chunks() {
    let slots = Slots {
        first_us: 1_000,
        interval_us: Slots::interval_at(4.0),
        count: 3,
    };
    assert_eq!(
        slots.times().collect::<Vec<_>>(),
        vec![1_000, 251_000, 501_000]
    );
    assert_eq!(
        [0, 1, 2, 9, 10, 13].map(|d| chunk_for(d, true, 10)),
        [1, 1, 2, 9, 20, 20]
    );
    assert_eq!(
        [0, 1, 9, 10, 13, 30].map(|d| chunk_for(d, false, 10)),
        [1, 1, 9, 10, 13, 20]
    );
    assert_eq!(
        [10, 99, 100, 500].map(|d| chunk_for(d, true, 100)),
        [10, 99, 200, 200]
    );
    assert_eq!(RateSource::parse("SES quota"), Some(RateSource::SesQuota));
}

#[test]
fn a_stack_takes_its_share_of_the_accounts_maximum() {
    // Two stacks on one account at 50 % each: 7/s apiece of SES's 14, not 14 each.
    let half = SendRate::with_quota_share(100.0, 0.5, &quota(14.0));
    assert_eq!(half.campaign_wide(), 7.0);
    assert_eq!(half.source(), RateSource::SesQuota);
    // A share that leaves more than the configured rate changes nothing.
    let plenty = SendRate::with_quota_share(5.0, 0.5, &quota(14.0));
    assert_eq!(plenty.campaign_wide(), 5.0);
    // Quota unknown: the configured rate, as before.
    let unknown = SendRate::with_quota_share(5.0, 0.5, &Err(QuotaUnknown("x".into())));
    assert_eq!(unknown.campaign_wide(), 5.0);
}
