//! SES's events sized to the send rate: how many each email yields and how many environments
//! SesEvents needs to keep up with them (RateControl sets its mapping's MaximumConcurrency
//! from `handlers_for` each minute, as it sets SendEmail's and CreateEmails'). Experiment
//! decisions, the reconcile of unrecorded sends and bounce suppression wait on these events,
//! so they must be handled at the rate they come, not minutes later (docs/send-rate.md,
//! "The events path").

use super::fan_out::HEADROOM;
use super::send_rate::MB_PER_VCPU;

/// SesEvents' CPU per event on a whole vCPU: the event parsed and its tags decoded, and the
/// send record's note, one SDK request (240-325 µs of CPU measured, docs/benchmarks.md),
/// rounded up. An estimate: the stage is not benchmarked alone.
pub const EVENT_CPU_US: f64 = 400.0;
/// What a batch waits for besides its CPU: its records' writes run at once
/// (`RECORD_CONCURRENCY` 10), so about one DynamoDB round trip (5-15 ms), a MongoDB
/// suppression or a reconcile for the rare record, and the poll's hand-over.
pub const EVENT_BATCH_ROUND_TRIPS_S: f64 = 0.05;

/// Events per email with opens and clicks not tracked: delivery, or a bounce, or a reject
/// (one of them for every email SES accepts), plus complaints and transient bounces after a
/// delivery (a percent, generously). SES's SEND events are not published: they would double
/// it and the events above reconcile as they did.
pub const OUTCOME_EVENTS_PER_EMAIL: f64 = 1.01;
/// Opens and clicks per email when tracked (an estimate: Apple Mail's prefetch opens every
/// email it receives, people open some twice, a few click).
pub const OPENS_PER_EMAIL: f64 = 0.6;
pub const CLICKS_PER_EMAIL: f64 = 0.05;

/// SES events per email the configuration set publishes.
pub fn events_per_email(tracks_opens_and_clicks: bool) -> f64 {
    let engagement = if tracks_opens_and_clicks {
        OPENS_PER_EMAIL + CLICKS_PER_EMAIL
    } else {
        0.0
    };
    OUTCOME_EVENTS_PER_EMAIL + engagement
}

/// One SesEvents execution environment: its batch (`SesEventsBatchSize`) and memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Handler {
    pub batch: usize,
    pub memory_mb: u32,
}

impl Handler {
    /// The template's defaults.
    pub const DEFAULT: Self = Self {
        batch: 10,
        memory_mb: 128,
    };

    /// Events per second one environment handles: a batch's CPU on its share of a vCPU, one
    /// event after another (the runtime has one thread), and the batch's round trips.
    pub fn rate(&self) -> f64 {
        let events = self.batch.max(1) as f64;
        let cpu_s = EVENT_CPU_US / 1e6 * MB_PER_VCPU / f64::from(self.memory_mb.max(1));
        events / (events * cpu_s + EVENT_BATCH_ROUND_TRIPS_S)
    }
}

/// SesEvents' environments for `events_per_second`: `HEADROOM` times them over what one
/// handles (so a backlog drains), at least Lambda's minimum of 2 and at most 1,000.
pub fn handlers_for(events_per_second: f64, handler: &Handler) -> u32 {
    (events_per_second.max(0.0) * HEADROOM / handler.rate())
        .ceil()
        .clamp(2.0, 1_000.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sesevents_follows_the_events_of_the_rate() {
        // 128 MB is 7 % of a vCPU: 5.5 ms of CPU an event, ten a batch with 50 ms of round
        // trips: 95 events/s.
        assert_eq!(Handler::DEFAULT.rate().round(), 95.0);
        assert_eq!(events_per_email(false), 1.01);
        assert!((events_per_email(true) - 1.66).abs() < 1e-9);
        // The SES sandbox's rate needs the minimum; 20,000 emails/s 266 at 128 MB.
        assert_eq!(handlers_for(14.0, &Handler::DEFAULT), 2);
        assert_eq!(handlers_for(20_000.0 * 1.01, &Handler::DEFAULT), 266);
        // Opens and clicks tracked at 20,000/s on one vCPU: 185 events/s each, 225.
        let big = Handler {
            batch: 10,
            memory_mb: 1_769,
        };
        assert_eq!(handlers_for(20_000.0 * 1.66, &big), 225);
        assert_eq!(handlers_for(f64::NAN, &big), 2);
    }
}
