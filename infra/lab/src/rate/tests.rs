use super::*;

/// Four environments on one rate item at 1,000/s, ten batches of ten each, in virtual
/// time (on the wall clock a loaded machine let a chunk's rest go stale and the count
/// below vary): 400 sends from one shared schedule, not before 0.39 s. Each
/// environment's first batch takes its 10; once the queue shows deep, each take of 20
/// serves two batches (1 + 5 per environment), beside setting the rate (one write per
/// environment, the three that lost the race read it): 31 requests.
#[tokio::test(start_paused = true)]
async fn environments_share_one_schedule_taken_in_chunks() {
    use mailflow::stages::send_email::pacing::Pacer;
    mailflow::runtime::clock::follow_tokio_clock();
    let bucket = Arc::new(MemoryRateBucket::default());
    let ceiling = SendRate::configured(1000.0);
    let far = || mailflow::runtime::clock::now() + Duration::from_secs(60);
    let pacers: Vec<_> = (0..4).map(|_| Pacer::new(bucket.clone(), 10)).collect();
    let started = Instant::now();
    for pacer in &pacers {
        for _ in 0..10 {
            pacer.batch(10);
            let tickets: Vec<_> = (0..10).map(|_| pacer.ticket()).collect();
            for ticket in tickets {
                pacer.acquire(ticket, &ceiling, far()).await.unwrap();
            }
        }
    }
    assert!(started.elapsed() >= Duration::from_millis(390));
    let asked = mailflow::runtime::lock(&bucket.asked).clone();
    let chunks = asked.iter().filter(|n| **n == 20).count();
    assert_eq!((asked.len(), chunks), (24, 20), "takes asked for {asked:?}");
    let requests = bucket.requests.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(requests, 4 * 6 + 4 + 3, "{requests} requests for 400 slots");
}

/// The bound the docs give for a shared CI runner (docs/benchmarks.md): on a quiet machine
/// the steady state sees none; a starved runner can fire a few late slots together.
const THROTTLES_PER_1000: usize = 20;

#[tokio::test(flavor = "multi_thread")]
async fn the_shared_rate_holds_across_environments() {
    let options = RateOptions {
        seconds: 4.0,
        ..RateOptions::default()
    };
    let run = run_one(&options, 100.0, 8, Mode::Shared, 7).await.unwrap();
    assert_eq!(
        (run.lost, run.sent_twice, run.dead_lettered),
        (0, 0, 0),
        "{run:?}"
    );
    assert!(
        run.throttles * 1000 <= THROTTLES_PER_1000 * run.emails,
        "{} throttles for {} emails",
        run.throttles,
        run.emails
    );
    // At most 0.1 per email, beside each environment's start (it sets or reads the rate
    // once): 2 requests each, 0.04 per email on a run this short.
    let start = 2.0 * 8.0 / run.emails as f64;
    assert!(run.rate_requests_per_email <= 0.1 + start, "{run:?}");
}

/// 20,000 emails/s in virtual time: environments of one vCPU with batches of 100 (what
/// `Environment::batch_for` and `SendRate::environments` give), the rate item behind
/// DynamoDB's per-item limit.
fn at_twenty_thousand(batch: usize, seconds: f64) -> RateOptions {
    RateOptions {
        quotas: vec![20_000.0],
        environments: vec![0],
        batch,
        memory_mb: Some(1_769),
        seconds,
        virtual_time: true,
        ..RateOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_thousand_a_second_from_one_stack_within_the_rate_items_limit() {
    let run = run(&at_twenty_thousand(0, 1.0)).await.unwrap().remove(0);
    let environment = Environment {
        records_at_once: 100,
        memory_mb: 1_769,
    };
    let environments = SendRate::configured(20_000.0).environments(&environment);
    assert_eq!(
        (run.batch, run.environments),
        (100, environments),
        "{run:?}"
    );
    assert_eq!(
        (
            run.lost,
            run.sent_twice,
            run.dead_lettered,
            run.item_throttles
        ),
        (0, 0, 0, 0),
        "{run:?}"
    );
    assert!(run.steady_share >= 0.95, "{run:?}");
    assert!(run.steady_throttles_per_1000 <= 1.0, "{run:?}");
    // A write per batch (0.01 an email), and each environment's first take and rate
    // write (2 x 86 for 20,000 emails).
    assert!(run.item_write_units_per_email <= 0.02, "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn batches_of_ten_at_twenty_thousand_a_second_meet_the_items_limit() {
    // Every take serves 10 emails: 2,000 writes/s, twice what the item allows.
    let run = run(&at_twenty_thousand(10, 0.5)).await.unwrap().remove(0);
    assert!(run.item_throttles > 0, "{run:?}");
    // Each throttled take waits out the SDK's backoff: the stack falls far behind.
    assert!(run.steady_share < 0.95, "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_ses_slows_the_stack_and_the_rate_recovers() {
    // SES refuses everything from the first second to the third.
    let options = RateOptions {
        seconds: 6.0,
        outage_seconds: vec![1.0, 3.0],
        ..RateOptions::default()
    };
    let run = run_one(&options, 100.0, 4, Mode::Shared, 11).await.unwrap();
    assert!(run.throttles > 0, "the outage was felt: {run:?}");
    // Every throttled email waited and went again: none lost, none twice, none in the DLQ.
    assert_eq!(
        (run.lost, run.sent_twice, run.dead_lettered),
        (0, 0, 0),
        "{run:?}"
    );
    assert_eq!(
        run.final_rate_share,
        Some(1.0),
        "back at the quota: {run:?}"
    );
}
