use super::*;

fn shards(lanes: &VecDeque<ReleasePosition>) -> Vec<u8> {
    lanes.iter().map(|l| l.shard).collect()
}

#[test]
fn a_schedules_event_releases_every_shard_a_sweep_from_the_last() {
    let release = lanes_from(&ReleasePosition::default(), 4);
    assert_eq!(shards(&release), [0, 1, 2, 3]);
    let sweep = ReleasePosition {
        backwards: true,
        ..Default::default()
    };
    assert_eq!(shards(&lanes_from(&sweep, 4)), [3, 2, 1, 0]);
}

/// An event a serial release left on the continuation queue: the shard it had got to
/// from its last user, the shards after it whole (a sweep counted from the last).
#[test]
fn an_event_from_the_serial_release_goes_on_where_it_stopped() {
    let from = ReleasePosition {
        shard: 5,
        after: Some("u42".into()),
        backwards: false,
    };
    let lanes = lanes_from(&from, 8);
    assert_eq!(shards(&lanes), [5, 6, 7]);
    assert_eq!(lanes[0].after.as_deref(), Some("u42"));
    assert_eq!(lanes[1].after, None);
    let sweep = ReleasePosition {
        shard: 2,
        after: Some("u7".into()),
        backwards: true,
    };
    let lanes = lanes_from(&sweep, 8);
    assert_eq!(shards(&lanes), [5, 4, 3, 2, 1, 0]);
    assert_eq!(lanes[0].after.as_deref(), Some("u7"));
}
