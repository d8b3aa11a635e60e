//! A pacer: at most `rate` acquisitions per second, evenly spaced (a token bucket of
//! capacity one), shared by all concurrent sends of one execution environment. No bursts, so
//! the observed rate over any run never exceeds the configured one.

use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

pub struct Pacer {
    interval: Duration,
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub fn per_second(rate: f64) -> Self {
        Self {
            interval: Duration::from_secs_f64(1.0 / rate),
            next: Mutex::new(None),
        }
    }

    /// Waits for the next free slot and takes it.
    pub async fn acquire(&self) {
        let slot = self.reserve(Instant::now()).await;
        tokio::time::sleep_until(slot).await;
    }

    /// Takes the next free slot at or after `now`.
    async fn reserve(&self, now: Instant) -> Instant {
        let mut next = self.next.lock().await;
        let slot = next.map_or(now, |n| n.max(now));
        *next = Some(slot + self.interval);
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_spaced_by_the_interval_and_never_bunch_up() {
        let pacer = Pacer::per_second(10.0);
        let t0 = Instant::now();
        let mut slots = Vec::new();
        for _ in 0..5 {
            slots.push(pacer.reserve(t0).await - t0);
        }
        let ms: Vec<u128> = slots.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![0, 100, 200, 300, 400]);
        // After an idle gap the next slot is "now": no burst of saved-up tokens.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pacer.reserve(later).await, later);
        assert_eq!(
            pacer.reserve(later).await - later,
            Duration::from_millis(100)
        );
    }
}
