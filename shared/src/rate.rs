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
        let slot = {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn spaces_acquisitions_evenly() {
        let pacer = std::sync::Arc::new(Pacer::per_second(10.0));
        let start = Instant::now();
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let p = pacer.clone();
                tokio::spawn(async move {
                    p.acquire().await;
                    Instant::now()
                })
            })
            .collect();
        let mut times = Vec::new();
        for t in tasks {
            times.push(t.await.unwrap() - start);
        }
        times.sort();
        // Paused clock: exact slots at 0, 100, 200, 300, 400 ms.
        let ms: Vec<u128> = times.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![0, 100, 200, 300, 400]);
    }
}
