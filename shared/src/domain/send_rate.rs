//! A pacer: at most `rate` acquisitions per second, evenly spaced (a token bucket of
//! capacity one), shared by all concurrent sends of one execution environment. No bursts, so
//! the observed rate over any run never exceeds the configured one.

use futures::future::{BoxFuture, FutureExt, Shared};
use std::future::Future;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

/// What SES lets the account send (read by `adapters::ses::send_quota`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendQuota {
    /// Emails per second.
    pub max_send_rate: f64,
    /// Emails per rolling 24 hours, and how many of them are used.
    pub max_24_hour_send: f64,
    pub sent_last_24_hours: f64,
}

/// The campaign-wide rate to send at: the configured one, or the account's maximum when that
/// is lower (sending faster only earns throttling). Where SES did not say (`quota` is the
/// reason), the configured rate, and the reason is logged once, at cold start.
pub fn effective_send_rate(configured: f64, quota: &Result<SendQuota, String>) -> f64 {
    match quota {
        Ok(quota) => {
            let rate = configured.min(quota.max_send_rate);
            tracing::info!(
                configured,
                max_send_rate = quota.max_send_rate,
                max_24_hour_send = quota.max_24_hour_send,
                sent_last_24_hours = quota.sent_last_24_hours,
                effective = rate,
                "SES quota read"
            );
            if rate < configured {
                tracing::warn!(
                    configured,
                    effective = rate,
                    "SEND_RATE_PER_SECOND is above the account's maximum send rate: sending at the maximum"
                );
            }
            rate
        }
        Err(reason) => {
            tracing::info!(
                %reason,
                configured,
                "SES quota not known: sending at the configured SEND_RATE_PER_SECOND"
            );
            configured
        }
    }
}

pub struct Pacer {
    /// Known at the first acquisition: the rate may still be on its way then (see `when_known`).
    interval: OnceCell<Duration>,
    rate: Shared<BoxFuture<'static, f64>>,
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub fn per_second(rate: f64) -> Self {
        Self::when_known(async move { rate })
    }

    /// A pacer whose rate (per second) `rate` yields; the first acquisition waits for it.
    /// SendEmail's rate depends on SES's quota: read while the function fetches its first
    /// event and claims its records, rather than before (at cold start).
    pub fn when_known(rate: impl Future<Output = f64> + Send + 'static) -> Self {
        Self {
            interval: OnceCell::new(),
            rate: rate.boxed().shared(),
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
        let interval = *self
            .interval
            .get_or_init(|| async { Duration::from_secs_f64(1.0 / self.rate.clone().await) })
            .await;
        let mut next = self.next.lock().await;
        let slot = next.map_or(now, |n| n.max(now));
        *next = Some(slot + interval);
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_of_the_configured_rate_and_the_account_maximum() {
        let quota = |max_send_rate| {
            Ok(SendQuota {
                max_send_rate,
                max_24_hour_send: 50_000.0,
                sent_last_24_hours: 0.0,
            })
        };
        assert_eq!(effective_send_rate(14.0, &quota(1.0)), 1.0);
        assert_eq!(effective_send_rate(14.0, &quota(200.0)), 14.0);
        assert_eq!(
            effective_send_rate(14.0, &Err("GetAccount answered HTTP 404".into())),
            14.0
        );
    }

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

    #[tokio::test]
    async fn a_rate_on_its_way_holds_the_first_slot_until_it_arrives() {
        let (rate, arrives) = tokio::sync::oneshot::channel::<f64>();
        let pacer = Pacer::when_known(async move { arrives.await.unwrap_or(1.0) });
        let t0 = Instant::now();
        assert!(pacer.reserve(t0).now_or_never().is_none());
        rate.send(4.0).unwrap();
        assert_eq!(pacer.reserve(t0).await, t0);
        assert_eq!(pacer.reserve(t0).await - t0, Duration::from_millis(250));
    }
}
