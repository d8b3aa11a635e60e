//! The pacer over the in-memory rate item: chunks, throttles, slow stores, ceilings.

use super::*;
use crate::ports::memory::MemoryRateBucket;
use crate::ports::{RateView, Taken};
use std::sync::Arc;

fn far() -> SystemTime {
    SystemTime::now() + Duration::from_secs(60)
}

type Shared = Arc<MemoryRateBucket>;

/// Two environments on one rate item at 100/s, each having sent once.
async fn two_sending_at_100() -> (Shared, SendRate, Pacer<Shared>, Pacer<Shared>) {
    let bucket = Arc::new(MemoryRateBucket::default());
    let ceiling = SendRate::configured(100.0);
    let (a, b) = (
        Pacer::new(bucket.clone(), 10),
        Pacer::new(bucket.clone(), 10),
    );
    a.acquire(a.ticket(), &ceiling, far()).await.unwrap();
    b.acquire(b.ticket(), &ceiling, far()).await.unwrap();
    (bucket, ceiling, a, b)
}

#[tokio::test]
async fn batches_further_apart_than_a_chunk_stays_fresh_take_one_batch_each() {
    // A slow environment (its CPU): the rest of a two-batch chunk would be stale by the time
    // its next batch begins, and lost to every environment.
    let bucket = Arc::new(MemoryRateBucket::default());
    let ceiling = SendRate::configured(1000.0);
    let pacer = Pacer::new(bucket.clone(), 10);
    for _ in 0..3 {
        pacer.batch(10);
        let tickets: Vec<_> = (0..10).map(|_| pacer.ticket()).collect();
        for ticket in tickets {
            pacer.acquire(ticket, &ceiling, far()).await.unwrap();
        }
        tokio::time::sleep(MAX_LATENESS).await;
    }
    assert_eq!(*crate::runtime::lock(&bucket.asked), vec![10, 10, 10]);
}

#[tokio::test]
async fn a_throttle_lowers_the_rate_every_environment_takes_slots_at() {
    let (bucket, ceiling, a, b) = two_sending_at_100().await;
    a.throttled(&ceiling).await;
    a.throttled(&ceiling).await;
    assert_eq!(a.throttles(), 2);
    let rate = bucket.read().await.unwrap().rate.unwrap();
    assert_eq!(rate.rate, 70.0, "lowered once for the burst");
    // B's chunk of 11 was taken at 100/s; its next chunk is at the lowered rate.
    for _ in 0..11 {
        b.acquire(b.ticket(), &ceiling, far()).await.unwrap();
    }
    assert_eq!(b.local.lock().await.rate.unwrap().rate, 70.0);
}

#[tokio::test]
async fn a_burst_of_throttles_costs_each_environment_a_constant_number_of_rate_requests() {
    let (bucket, ceiling, a, b) = two_sending_at_100().await;
    // A lowers the rate first; B, whose view is now stale, meets twenty throttles of the
    // same burst: one refused change and one read, then nothing.
    a.throttled(&ceiling).await;
    let before = bucket.requests.load(Ordering::Relaxed);
    for _ in 0..20 {
        b.throttled(&ceiling).await;
    }
    assert_eq!(bucket.requests.load(Ordering::Relaxed) - before, 2);
    assert_eq!(b.local.lock().await.rate.unwrap().rate, 70.0);
}

#[tokio::test]
async fn an_environment_without_the_quota_keeps_the_ceiling_one_with_it_wrote() {
    let bucket = Arc::new(MemoryRateBucket::default());
    let read = SendRate {
        configured: 100.0,
        ses_max: Some(50.0),
    };
    // B's read of SES's quota failed: it falls back to the configured rate.
    let unknown = SendRate::configured(100.0);
    let (a, b) = (
        Pacer::new(bucket.clone(), 10),
        Pacer::new(bucket.clone(), 10),
    );
    a.acquire(a.ticket(), &read, far()).await.unwrap();
    let written = bucket.read().await.unwrap().rate.unwrap();
    for _ in 0..10 {
        b.acquire(b.ticket(), &unknown, far()).await.unwrap();
        a.acquire(a.ticket(), &read, far()).await.unwrap();
    }
    // The rate A wrote first is the one there is: never raised by B and lowered again.
    let rate = bucket.read().await.unwrap().rate.unwrap();
    assert_eq!(rate, written);
    assert_eq!((rate.rate, rate.ceiling), (50.0, 50.0));
    // A throttle B meets lowers from that ceiling and keeps it.
    b.throttled(&unknown).await;
    let rate = bucket.read().await.unwrap().rate.unwrap();
    assert_eq!((rate.rate, rate.ceiling), (35.0, 50.0));
    assert!(rate.ceiling_from_ses);
}

#[tokio::test]
async fn a_raised_configured_rate_is_taken_up_where_no_environment_reads_the_quota() {
    let bucket = Arc::new(MemoryRateBucket::default());
    let old = Pacer::new(bucket.clone(), 10);
    old.acquire(old.ticket(), &SendRate::configured(50.0), far())
        .await
        .unwrap();
    // A deploy raised SEND_RATE_PER_SECOND; SES's quota cannot be read anywhere.
    let new = Pacer::new(bucket.clone(), 10);
    new.acquire(new.ticket(), &SendRate::configured(100.0), far())
        .await
        .unwrap();
    new.acquire(new.ticket(), &SendRate::configured(100.0), far())
        .await
        .unwrap();
    let rate = bucket.read().await.unwrap().rate.unwrap();
    assert_eq!((rate.rate, rate.ceiling), (100.0, 100.0));
}

#[tokio::test]
async fn a_slot_after_the_deadline_is_not_waited_for() {
    let pacer = Pacer::new(MemoryRateBucket::default(), 10);
    let ceiling = SendRate::configured(1.0);
    let soon = || SystemTime::now() + Duration::from_millis(500);
    pacer
        .acquire(pacer.ticket(), &ceiling, soon())
        .await
        .unwrap();
    // The next slot is a second after the first: past a deadline half a second away, so
    // nothing is taken and the record is told when the schedule frees up.
    let requests = pacer.bucket.requests.load(Ordering::Relaxed);
    match pacer.acquire(pacer.ticket(), &ceiling, soon()).await {
        Err(NoSlot::Full(wait)) => assert!(wait <= Duration::from_secs(1), "{wait:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(pacer.bucket.requests.load(Ordering::Relaxed), requests + 1);
}

/// A store slower than `MAX_LATENESS` (DynamoDB retrying a throttled write, a loaded
/// emulator): each take still sends, rather than discarding its stale chunk and taking
/// again until the deadline.
struct Slow(MemoryRateBucket);

impl RateBucket for Slow {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        let taken = self.0.take(request).await;
        tokio::time::sleep(MAX_LATENESS * 2).await;
        taken
    }
    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        self.0.change_rate(seen, next).await
    }
    async fn read(&self) -> Result<RateView, RateError> {
        self.0.read().await
    }
}

#[tokio::test]
async fn a_slow_store_still_grants_a_send_per_take() {
    let pacer = Pacer::new(Slow(MemoryRateBucket::default()), 10);
    let ceiling = SendRate::configured(1000.0);
    pacer.batch(10);
    let tickets: Vec<_> = (0..10).map(|_| pacer.ticket()).collect();
    for ticket in tickets {
        pacer.acquire(ticket, &ceiling, far()).await.unwrap();
    }
    // The first take's ten slots span 10 ms and all but its first are stale when it
    // answers: one send per take, not a loop of takes that never sends.
    let takes = pacer.bucket.0.requests.load(Ordering::Relaxed) - 1;
    assert_eq!(takes, 10, "one take per send at worst");
}

#[tokio::test]
async fn a_ticket_given_up_no_longer_counts() {
    let pacer = Pacer::new(MemoryRateBucket::default(), 10);
    let tickets: Vec<_> = (0..6).map(|_| pacer.ticket()).collect();
    assert_eq!(pacer.demand.load(Ordering::Relaxed), 6);
    drop(tickets);
    assert_eq!(pacer.demand.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_big_batch_at_a_low_rate_reserves_no_more_than_it_can_use() {
    // Batches of 100 at 14/s: two batches would be 14 s of the whole stack's schedule. A take
    // spans at most MAX_CHUNK_SPAN (20 slots), and never past the invocation's deadline.
    let bucket = Arc::new(MemoryRateBucket::default());
    let ceiling = SendRate::configured(14.0);
    let pacer = Pacer::new(bucket.clone(), 100);
    for _ in 0..2 {
        pacer.batch(100);
    }
    let tickets: Vec<_> = (0..100).map(|_| pacer.ticket()).collect();
    let mut tickets = tickets.into_iter();
    pacer
        .acquire(tickets.next().unwrap(), &ceiling, far())
        .await
        .unwrap();
    let near = SystemTime::now() + Duration::from_millis(500);
    let fresh = Pacer::new(bucket.clone(), 100);
    let _demand: Vec<_> = (0..100).map(|_| fresh.ticket()).collect();
    let _ = fresh.acquire(fresh.ticket(), &ceiling, near).await;
    let asked = crate::runtime::lock(&bucket.asked).clone();
    assert_eq!(asked[0], 20, "{asked:?}");
    // Half a second to its deadline: 7 slots at most.
    assert!(asked[1] <= 7, "{asked:?}");
}
