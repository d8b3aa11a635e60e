//! The shared send rate on the local stack: the rate item in the campaigns table (takes that
//! never overlap however many environments take at once, the conditional rate change).
//! RateControl sizing SendEmail's event source mapping is proven with its binary
//! (`runtime_api`).

use mailflow::adapters::rate_item::{RateItem, RATE_ITEM_KEY};
use mailflow::domain::send_rate::{epoch_us, SendRate, SharedRate};
use mailflow::ports::{RateBucket, SlotRequest, Taken};
use mailflow_local::names;
use mailflow_tests::test_env;
use std::time::SystemTime;

/// Takes `count` slots 1 ms apart, with no deadline to speak of.
async fn take(item: &RateItem, count: u32, now_us: u64) -> Taken {
    let request = SlotRequest {
        count,
        interval_us: 1_000,
        now_us,
        latest_us: now_us + 60_000_000,
    };
    item.take(&request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn environments_taking_at_once_get_consecutive_slots_that_never_overlap() {
    let env = test_env("rate-item", |_| {}).await.unwrap();
    let table = env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap();
    let item = RateItem::new(env.dynamo(), table);

    // Idle: the first take starts now.
    let now = epoch_us(SystemTime::now());
    let first = take(&item, 10, now).await;
    assert_eq!(first.slots.first_us, now);

    // Sixteen takes at once (environments taking together): each gets its own run of slots.
    let takes = (0..16).map(|_| {
        let item = item.clone();
        async move { take(&item, 10, now).await }
    });
    let mut slots: Vec<u64> = futures::future::join_all(takes)
        .await
        .into_iter()
        .flat_map(|t| t.slots.times().collect::<Vec<_>>())
        .collect();
    slots.sort();
    let expected: Vec<u64> = (10..170).map(|i| now + i * 1_000).collect();
    assert_eq!(slots, expected, "one schedule, no slot twice, none skipped");

    // The rate changes only from the version an environment saw.
    let ceiling = SendRate::configured(14.0);
    let start = SharedRate::at(&ceiling, 1_000);
    assert!(item.change_rate(None, &start).await.unwrap());
    assert!(
        !item.change_rate(None, &start).await.unwrap(),
        "set already"
    );
    let lowered = start.next(&ceiling, 5_000, true).unwrap();
    assert!(item.change_rate(Some(&start), &lowered).await.unwrap());
    assert!(
        !item.change_rate(Some(&start), &lowered).await.unwrap(),
        "seen is stale"
    );
    let view = item.read().await.unwrap();
    assert_eq!(view.rate, Some(lowered));

    // The item keeps nothing per environment: its size, and each take's write units, do
    // not grow with the environments sending. (An `envs` map an older version wrote goes
    // at the next idle start.)
    let raw = env
        .dynamo()
        .get_item()
        .table_name(table)
        .key(
            "campaignId",
            aws_sdk_dynamodb::types::AttributeValue::S(RATE_ITEM_KEY.into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let mut attributes: Vec<&str> = raw.keys().map(String::as_str).collect();
    attributes.sort();
    assert_eq!(
        attributes,
        [
            "campaignId",
            "ceiling",
            "ceilingFromSes",
            "nextFreeUs",
            "rate",
            "rateChangedAt",
            "rateLoweredAt",
            "rateSource"
        ]
    );
    let later = epoch_us(SystemTime::now());
    let taken = take(&item, 1, later).await;

    // A schedule already past a taker's deadline is left alone, and says when it frees up.
    let next_free = taken.slots.first_us + 1_000;
    let request = SlotRequest {
        count: 10,
        interval_us: 1_000,
        now_us: later,
        latest_us: next_free - 1,
    };
    let refused = item.take(&request).await.unwrap();
    assert_eq!(
        (refused.slots.count, refused.slots.first_us),
        (0, next_free)
    );
    let after = take(&item, 1, later).await;
    assert_eq!(after.slots.first_us, next_free, "nothing was taken");

    // No campaign listing ever shows the rate item.
    let campaigns = mailflow::adapters::campaigns::CampaignsTable::new(env.dynamo(), table);
    let running = campaigns.campaigns_in("RUNNING").await.unwrap();
    assert!(!running.iter().any(|id| id == RATE_ITEM_KEY));
}
