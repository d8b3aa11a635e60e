//! The stages before SendEmail sized to the send rate, so that SES's quota, not CreateEmails
//! or GetUsers, bounds a large campaign (`mailctl pipeline` models the whole run;
//! docs/send-rate.md has the figures). RateControl sets CreateEmails' concurrency from
//! `composers_for` each minute, as it sets SendEmail's; GetUsers' memory and in-flight
//! batches are the template's, checked by `get_users_rate`.

use super::send_rate::MB_PER_VCPU;

/// CreateEmails' CPU per email on a whole vCPU: reading, rendering, signing the links,
/// deflating the job (the benchmark's figure, rounded up; docs/benchmarks.md).
pub const CREATE_CPU_US_PER_EMAIL: f64 = 900.0;
/// What a CreateEmails batch waits for besides its CPU: the poll's hand-over, the campaign's
/// state, three MongoDB reads for the whole batch and its SendMessageBatch calls.
pub const CREATE_BATCH_ROUND_TRIPS_S: f64 = 0.06;
/// CreateEmails runs this much faster than the rate, so that SendEmail's queue does not run
/// dry while both mappings add environments.
pub const HEADROOM: f64 = 1.25;
/// GetUsers' CPU per user enqueued, on a whole vCPU (33-37 µs at 100,000 users, rounded up).
pub const GET_USERS_CPU_US_PER_USER: f64 = 40.0;
/// Users per SendMessageBatch call.
pub const USERS_PER_SEND: f64 = 10.0;

/// One CreateEmails execution environment: its batch (`UsersBatchSize`) and memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Composer {
    pub batch: usize,
    pub memory_mb: u32,
}

impl Composer {
    /// The template's defaults.
    pub const DEFAULT: Self = Self {
        batch: 10,
        memory_mb: 256,
    };

    /// Emails per second one environment composes: a batch's CPU on its share of a vCPU, one
    /// email after another (the runtime has one thread), and the batch's round trips.
    pub fn rate(&self) -> f64 {
        let emails = self.batch.max(1) as f64;
        let cpu_s = CREATE_CPU_US_PER_EMAIL / 1e6 * MB_PER_VCPU / f64::from(self.memory_mb.max(1));
        emails / (emails * cpu_s + CREATE_BATCH_ROUND_TRIPS_S)
    }
}

/// CreateEmails' concurrency for a send rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposerSizing {
    /// What the rate needs (`HEADROOM` included).
    pub needed: u32,
    /// What the mapping gets: `needed` within Lambda's 2 and the operator's ceiling.
    pub environments: u32,
    /// `CreateEmailsMaxConcurrency`: each environment holds up to `MONGODB_MAX_POOL_SIZE`
    /// MongoDB connections, so this is the operator's bound on them.
    pub ceiling: u32,
}

impl ComposerSizing {
    /// Whether the ceiling, not the rate, decides: CreateEmails then bounds the campaign.
    pub fn capped(&self) -> bool {
        self.environments < self.needed
    }
}

/// CreateEmails' environments for `rate` emails/s: `HEADROOM` times the rate over what one
/// composes, at least Lambda's minimum of 2 and at most `ceiling`.
pub fn composers_for(rate: f64, composer: &Composer, ceiling: u32) -> ComposerSizing {
    let needed = (rate.max(0.0) * HEADROOM / composer.rate())
        .ceil()
        .min(1_000.0) as u32;
    let ceiling = ceiling.clamp(2, 1_000);
    ComposerSizing {
        needed: needed.max(2),
        environments: needed.clamp(2, ceiling),
        ceiling,
    }
}

/// Users per second one GetUsers invocation enqueues: bounded by its CPU share (one thread)
/// and by `in_flight` SendMessageBatch calls of ten, each a `round_trip_s` away.
pub fn get_users_rate(memory_mb: u32, in_flight: usize, round_trip_s: f64) -> f64 {
    let cpu_s = GET_USERS_CPU_US_PER_USER / 1e6 * MB_PER_VCPU / f64::from(memory_mb.max(1));
    let by_cpu = 1.0 / cpu_s;
    let by_round_trips = in_flight as f64 * USERS_PER_SEND / round_trip_s.max(1e-3);
    by_cpu.min(by_round_trips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composers_follow_the_rate_within_the_ceiling() {
        let default = Composer::DEFAULT;
        // 256 MB is 14 % of a vCPU: about 6.2 ms of CPU per email, ten a batch.
        assert_eq!(default.rate().floor(), 81.0);
        // The default rate needs the minimum.
        let low = composers_for(20.0, &default, 5);
        assert_eq!((low.needed, low.environments, low.capped()), (2, 2, false));
        // 20,000/s at the defaults needs 306; a ceiling of 5 holds it back, and says so.
        let high = composers_for(20_000.0, &default, 5);
        assert_eq!(
            (high.needed, high.environments, high.capped()),
            (306, 5, true)
        );
        // A whole vCPU and batches of 100: 38 environments.
        let big = Composer {
            batch: 100,
            memory_mb: 1_769,
        };
        assert_eq!(composers_for(20_000.0, &big, 1_000).environments, 38);
        assert_eq!(composers_for(f64::NAN, &big, 1).environments, 2);
    }

    #[test]
    fn get_users_is_bounded_by_its_cpu_or_its_round_trips() {
        // The template before: 256 MB and 8 batches in flight at 20 ms.
        assert_eq!(get_users_rate(256, 8, 0.02).floor(), 3_617.0);
        // One vCPU and 64 in flight: 25,000 users/s, its CPU's bound.
        assert_eq!(get_users_rate(1_769, 64, 0.02).round(), 25_000.0);
    }
}
