use super::*;
use clap::Parser;

#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    options: PipelineOptions,
}

/// GetUsers drives its SendMessageBatch calls while the audience reads its next cursor
/// batch (MongoDB 10 ms and SQS 20 ms away, CPU not modelled): 16,300 users/s, where
/// calls that waited out each getMore made 13,800.
#[tokio::test(start_paused = true)]
async fn get_users_sends_while_its_cursor_reads() {
    mailflow::runtime::clock::follow_tokio_clock();
    let mut options = Defaults::parse_from(["lab"]).options;
    options.users = 20_000;
    options.cpu_us = vec![0.0, 0.0, 0.0];
    options.mongo_latency_ms = vec![10, 10];
    options.sqs_latency_ms = vec![20, 20];
    let rate = fan_out_rate(&options).await.unwrap();
    assert!(rate > 15_000.0, "{rate:.0} users/s");
}

/// GetUsers reads the audience up to two cursor batches ahead (`read_ahead`): at the lab's
/// defaults its CPU (40 µs a user on its one vCPU) allows 25,000 users/s, and it makes
/// more than 20,000, where reading in line, every getMore's round trip stopping the
/// enqueueing, made 19,900 (100,000 users; 24,100 with the read-ahead).
#[tokio::test(start_paused = true)]
async fn get_users_reads_the_audience_ahead_of_its_sends() {
    mailflow::runtime::clock::follow_tokio_clock();
    let mut options = Defaults::parse_from(["lab"]).options;
    options.users = 40_000;
    let rate = fan_out_rate(&options).await.unwrap();
    assert!(rate > 20_000.0, "{rate:.0} users/s");
}

/// At 20,000 emails/s the campaign index as it was (the claim put each record in it, so
/// its three writes per email all wrote the index: 60,000 units a second over 16 keys of
/// 1,000 each, on a table quota of 40,000) throttles SendEmail's ledger writes. The
/// sparse index (two index writes per email over 128 keys: 313 a second each) on the
/// raised quota takes them all. Two seconds of sending (one before), the environments at
/// once.
#[tokio::test]
async fn the_sends_table_takes_20000_emails_a_second_where_its_dense_index_did_not() {
    let mut options = Defaults::parse_from(["lab"]).options;
    options.users = 40_000;
    options.no_ramp = true;
    options.sends_table_quota = TableQuota::Raised;
    let now = run(&options).await.unwrap().remove(0);
    let table = &now.sends_table;
    let throttled: u64 = table.limits.values().map(|c| c.throttles).sum();
    assert_eq!(
        (
            throttled,
            table.writes_failed,
            table.notes_failed,
            table.unrecorded
        ),
        (0, 0, 0, 0),
        "{table:?}"
    );
    assert_eq!(
        (now.lost, now.sent_twice, now.dead_lettered),
        (0, 0, 0),
        "{now:?}"
    );
    assert!(now.steady_share >= 0.95, "{now:?}");
    assert!(
        (table.index_units_per_email - 2.0).abs() < 0.05,
        "{table:?}"
    );

    // One second of sending is enough to throttle it.
    options.users = 20_000;
    options.sends_index = IndexDesign::Dense16;
    options.sends_table_quota = TableQuota::Default;
    let before = run(&options).await.unwrap().remove(0);
    let table = &before.sends_table;
    assert!(
        table.limits["campaign index partition writes"].throttles > 0,
        "{table:?}"
    );
    assert!(
        table.writes_failed + table.notes_failed > 0 && table.unrecorded > 0
            || before.steady_share < 0.95,
        "{before:?}"
    );
}

/// The same campaign under the template's sizing and under the sizing before it: the
/// quota bounds the first; five CreateEmails environments at 256 MB (about 470-480/s,
/// well under the 1,200/s quota) bound the second. (Small, so that debug builds run it:
/// the environments start at once. At 600/s the two were too close to tell apart: the
/// composing could end before the sending's last tenth, and the run named SendEmail.)
#[tokio::test]
async fn the_quota_bounds_a_campaign_where_create_emails_did_before() {
    let mut options = Defaults::parse_from(["lab"]).options;
    options.users = 1_000;
    options.quota = 1_200.0;
    options.no_ramp = true;
    let now = run(&options).await.unwrap().remove(0);
    assert_eq!(now.bound, "SES quota", "{now:?}");
    assert!(now.steady_share >= 0.95, "{now:?}");
    let before = run(&options.clone().before()).await.unwrap().remove(0);
    assert_eq!(before.bound, "CreateEmails", "{before:?}");
    assert!(before.steady_share < 0.9, "{before:?}");
    for report in [&now, &before] {
        assert_eq!(
            (report.lost, report.sent_twice, report.dead_lettered),
            (0, 0, 0),
            "{report:?}"
        );
    }
}

/// A campaign larger than what SES's 24-hour quota has left: the quota's worth is sent,
/// the rest is held on the emails queue an hour at a time (about one receive an hour a
/// record, never a hot loop, never the DLQ), and goes once the rolling window lets it,
/// each email once.
#[tokio::test]
async fn a_campaign_over_the_24_hour_quota_sends_the_rest_when_the_window_rolls() {
    let mut options = Defaults::parse_from(["lab"]).options;
    options.users = 1_000;
    options.quota = 500.0;
    options.ses_daily_quota = Some(600);
    options.no_ramp = true;
    let report = run(&options).await.unwrap().remove(0);
    assert_eq!(
        (report.lost, report.sent_twice, report.dead_lettered),
        (0, 0, 0),
        "{report:?}"
    );
    let by_second = |from: f64, to: f64| -> f64 {
        let (from, to) = (from as usize, (to as usize).min(report.quota_use.len()));
        report.quota_use[from..to].iter().sum::<f64>() * options.quota
    };
    // The first day: the quota's 600 and not one more.
    let first_day = by_second(0.0, report.first_email_s + 86_000.0).round();
    assert_eq!(first_day, 600.0, "{report:?}");
    // The rest a day after the first sends, not sooner, and within its hold (an hour, or 15
    // minutes more for a record requeued as a fresh copy near the receive limit).
    assert!(
        report.first_to_last_s >= 86_400.0 && report.first_to_last_s < 86_400.0 + 4_600.0,
        "{} s",
        report.first_to_last_s
    );
    // 400 held records, each refused about once an hour for a day: not each second.
    let refusals = report.over_daily_quota;
    assert!(
        (400..=400 * 26).contains(&refusals),
        "{refusals} refusals for the 24-hour quota"
    );
}
