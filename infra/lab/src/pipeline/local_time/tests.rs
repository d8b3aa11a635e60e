use super::*;
use clap::Parser;

#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    options: PipelineOptions,
}

/// A million-user slot released within about a minute: 20,000 users a second.
const GOAL_PER_SECOND: f64 = 20_000.0;

/// 200,000 users in one zone, held at GetUsers' pace (its CPU modelled, in virtual time)
/// and released at their slot. On eight shards its 25,000 holds a second would be about
/// 3,000 write units a second on each key: they are throttled (GetUsers slows to what
/// the partitions take, or a segment fails), and a release one shard at a time stays
/// under one partition's writes, far from the goal. Shards sized to the peak and a
/// release in lanes hold everyone unthrottled and release them at the goal, nobody lost
/// or released twice. (Debug build: about 30 s.)
#[test]
fn a_one_zone_slot_is_held_and_released_within_dynamodbs_limits() {
    let mut options = Defaults::parse_from(["lab", "--local-time", "--one-zone"]).options;
    options.users = 200_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let [before, now] = runtime.block_on(async {
        let before = PipelineOptions {
            local_time: options.local_time.clone().before(),
            ..options.clone()
        };
        let before = super::super::run_local_time(&before).await.unwrap();
        let now = super::super::run_local_time(&options).await.unwrap();
        [before, now].map(|mut r| r.remove(0))
    });
    assert!(
        before.hold_error.is_some() || before.release_per_second < GOAL_PER_SECOND,
        "{before:?}"
    );
    assert!(before.write_throttles > 0, "{before:?}");
    assert_eq!(now.hold_error, None, "{now:?}");
    assert!(now.release_per_second >= GOAL_PER_SECOND, "{now:?}");
    assert!(now.peak_key_writes_per_second <= 1_000.0, "{now:?}");
    assert_eq!(
        (now.lost, now.twice, now.still_waiting),
        (0, 0, 0),
        "{now:?}"
    );
}

/// Past the users queue: 10,000 users in the lab's zone mix (six slots), each slot's
/// users rendered and sent at 5,000/s as it is released, Lambda's mappings scaling from
/// five environments again at each slot. Every released user gets one email, none goes
/// to a DLQ, and the lateness at SES's acceptance is the release's plus the sending's:
/// seconds, not the slot's whole day; each slot's two schedules are created within
/// EventBridge Scheduler's rate. (Debug build: about 20 s.)
#[test]
fn a_local_time_campaign_is_sent_slot_by_slot() {
    let mut options = Defaults::parse_from(["lab", "--local-time", "--through-sending"]).options;
    options.users = 10_000;
    options.quota = 5_000.0;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let report = runtime
        .block_on(super::super::run_local_time(&options))
        .unwrap()
        .remove(0);
    let sent = report.sending.as_ref().expect("through sending");
    assert_eq!(
        (report.lost, report.twice, report.still_waiting),
        (0, 0, 0),
        "{report:?}"
    );
    assert_eq!(
        (sent.lost, sent.twice, sent.dead_lettered),
        (0, 0, 0),
        "{sent:?}"
    );
    assert!(report.slots.len() > 1, "{report:?}");
    // Each slot's release and sweep were created within Scheduler's rate.
    assert!(
        report.schedules_created >= 2.0 * report.slots.len() as f64
            && report.schedule_throttles == 0,
        "{report:?}"
    );
    // Later than the release, and by the sending's seconds only.
    assert!(sent.sent_late_p50_ms > report.late_p50_ms, "{report:?}");
    assert!(sent.sent_late_p99_ms < 30_000, "{sent:?}");
    assert!(sent.busiest_first_s < 2.0, "{sent:?}");
}
