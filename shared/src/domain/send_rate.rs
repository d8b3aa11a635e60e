//! The send rate, in one place: `SendRate` says how fast (the configured rate or SES's maximum)
//! and how the SendEmail environments share it; `Pacer` keeps one environment to its share:
//! at most `rate` acquisitions per second, evenly spaced (a token bucket of capacity one),
//! shared by all concurrent sends of the environment. No bursts, so the observed rate over
//! any run never exceeds the configured one.

use futures::future::{BoxFuture, FutureExt, Shared};
use std::future::Future;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

/// Why SES's quota is not known (the configured rate is used then): one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuotaUnknown(pub String);

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

/// The send rate, the whole rule in one place: the campaign-wide rate is the configured
/// `SEND_RATE_PER_SECOND`, or SES's maximum send rate when that is lower (sending faster only
/// earns throttling), and each of the `environments` SendEmail execution environments
/// (`SEND_MAX_CONCURRENCY`) paces itself at an even share of it. SendEmail, `mailctl plan` and
/// `mailctl status` all read the rate from here.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendRate {
    /// `SEND_RATE_PER_SECOND`.
    pub configured: f64,
    /// SES's `MaxSendRate`, when SES said it.
    pub ses_max: Option<f64>,
    /// How many SendEmail environments share the rate.
    pub environments: u32,
}

impl SendRate {
    /// The configured rate alone (SES's quota not asked).
    pub fn configured(configured: f64, environments: u32) -> Self {
        Self {
            configured,
            ses_max: None,
            environments,
        }
    }

    /// The rate once SES's quota is read. Where SES did not say (`quota` is the reason), the
    /// configured rate; either way the outcome is logged, once per execution environment.
    pub fn with_quota(
        configured: f64,
        environments: u32,
        quota: &Result<SendQuota, QuotaUnknown>,
    ) -> Self {
        let rate = Self {
            ses_max: quota.as_ref().ok().map(|q| q.max_send_rate),
            ..Self::configured(configured, environments)
        };
        match quota {
            Ok(quota) => {
                tracing::info!(
                    configured,
                    max_send_rate = quota.max_send_rate,
                    max_24_hour_send = quota.max_24_hour_send,
                    sent_last_24_hours = quota.sent_last_24_hours,
                    effective = rate.campaign_wide(),
                    "SES quota read"
                );
                if rate.capped_by_ses() {
                    tracing::warn!(
                        configured,
                        effective = rate.campaign_wide(),
                        "SEND_RATE_PER_SECOND is above the account's maximum send rate: sending at the maximum"
                    );
                }
            }
            Err(reason) => tracing::info!(
                %reason,
                configured,
                "SES quota not known: sending at the configured SEND_RATE_PER_SECOND"
            ),
        }
        rate
    }

    /// Whether SES's maximum, not the configuration, sets the rate.
    pub fn capped_by_ses(&self) -> bool {
        self.ses_max.is_some_and(|max| max < self.configured)
    }

    /// Emails per second, all environments together.
    pub fn campaign_wide(&self) -> f64 {
        match self.ses_max {
            Some(max) => self.configured.min(max),
            None => self.configured,
        }
    }

    /// Emails per second one environment sends at: an even share of the campaign-wide rate.
    pub fn per_environment(&self) -> f64 {
        self.campaign_wide() / f64::from(self.environments.max(1))
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
        let rate = |quota| SendRate::with_quota(14.0, 2, &quota);
        assert_eq!(rate(quota(1.0)).campaign_wide(), 1.0);
        assert!(rate(quota(1.0)).capped_by_ses());
        assert_eq!(rate(quota(200.0)).campaign_wide(), 14.0);
        assert!(!rate(quota(200.0)).capped_by_ses());
        let unknown = rate(Err(QuotaUnknown("GetAccount answered HTTP 404".into())));
        assert_eq!((unknown.campaign_wide(), unknown.ses_max), (14.0, None));
    }

    #[test]
    fn each_environment_sends_at_an_even_share() {
        assert_eq!(SendRate::configured(14.0, 2).per_environment(), 7.0);
        assert_eq!(SendRate::configured(14.0, 1).per_environment(), 14.0);
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
