//! How much concurrency the two public Function URLs (Unsubscribe, OpenContent) need at a
//! send rate, with junk on top (docs/open-time-content.md, "Capacity").
//!
//! Lambda answers a Function URL request that finds every reserved environment busy with a
//! 429, and it also refuses more than 10 requests per second per reserved environment: a
//! loss system, not a queue. So a function needs the larger of
//!
//! - **by duration**: enough environments that at most 1 request in 1,000 finds them all
//!   busy (Erlang's B formula: arrivals at random, each request holding an environment for
//!   its duration). An email opened for the first time is six requests at once (each slot's
//!   card and badge), so its load counts in whole emails, six environments each;
//! - **by rate**: the requests of the busiest second (the mean plus 3.09 standard
//!   deviations, the 1-in-1,000 quantile of random arrivals) within 10 per environment.
//!
//! Where the requests come from, per email delivered (the send rate): Apple Mail Privacy
//! Protection fetches every image of an email when it is delivered, so first opens arrive
//! at the send rate (every recipient on Apple Mail: the worst case, about twice a real
//! audience's share); link scanners at businesses follow links at delivery; one-click POSTs
//! are a small fraction. Junk (requests that can never succeed, answered from memory before
//! any I/O) is sized at `JUNK_PER_SECOND` on each URL. A request's duration is for 128 MB
//! (7 % of a vCPU: our CPU times 14) with its round trips.

use super::send_rate::MB_PER_VCPU;

/// Lambda serves at most this many requests per second per environment: a function's
/// requests per second are bounded at ten times its concurrency (AWS's "Lambda concurrency"
/// page; throttles of reason `ReservedFunctionInvocationRateLimitExceeded`).
pub const REQUESTS_PER_SECOND_PER_ENVIRONMENT: f64 = 10.0;
/// The share of requests the sizing lets find no environment at the modelled peak.
pub const THROTTLED_AT_MOST: f64 = 0.001;
/// Standard deviations above the mean of the busiest second (the normal 1-in-1,000 quantile).
const Z_ONE_IN_1000: f64 = 3.09;

/// Junk each URL is sized to take on top of its real load: twice the hundred a second at
/// which one-click POSTs failed with the old 10 environments.
pub const JUNK_PER_SECOND: f64 = 200.0;
/// Our CPU for a junk request on a whole core, rounded up: the stage's part (the event
/// parsed, refused, answered, its log line) measured 5-12 µs with the release build, and the
/// runtime's two HTTP exchanges with Lambda's Runtime API.
pub const JUNK_CPU_US: f64 = 100.0;
/// Lambda's own time per invocation besides ours (the Runtime API's next and response).
pub const INVOCATION_OVERHEAD_S: f64 = 0.002;

/// The share of emails whose images are fetched when they are delivered (Apple Mail Privacy
/// Protection): 1.0, as if every recipient read on Apple Mail.
pub const PREFETCHED_AT_DELIVERY: f64 = 1.0;
/// Each request of an email opened for the first time: its first request chooses the picks
/// and freezes them (7 ms of CPU on a core, 100 ms at 128 MB, and 10 round trips), the
/// others wait for that answer in 100 ms steps.
pub const FIRST_OPEN_SECONDS: f64 = 0.2;
/// A static image (`static/*.png`, where the badges redirect): served from memory.
pub const STATIC_SECONDS: f64 = 0.01;
/// The share of emails whose links a scanner follows at delivery (Safe Links, Proofpoint,
/// Mimecast, Barracuda: the business mailboxes of an audience).
pub const SCANNED_AT_DELIVERY: f64 = 0.2;
/// A pick's link: the picks read, the subscription checked, counted (5 ms of CPU on a core,
/// 70 ms at 128 MB, and up to 7 round trips).
pub const CLICK_SECONDS: f64 = 0.15;

/// The footer's links to the preference centre (the topic's and "Manage all emails"), each
/// a GET that a scanner following links at delivery fetches.
pub const FOOTER_LINKS: f64 = 2.0;
/// A preference-centre GET: one MongoDB read and the page.
pub const PAGE_SECONDS: f64 = 0.15;
/// One-click POSTs per email delivered while the campaign goes out: 1 %, ten times what a
/// campaign that people dislike sees.
pub const ONE_CLICKS_PER_EMAIL: f64 = 0.01;
/// A one-click: one MongoDB update and the send record's note.
pub const ONE_CLICK_SECONDS: f64 = 0.15;

/// Requests of one kind: `per_second` arrivals, each of `at_once` requests arriving
/// together, each holding an environment for `seconds`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    pub what: &'static str,
    pub per_second: f64,
    pub at_once: u32,
    pub seconds: f64,
}

impl Load {
    fn requests_per_second(&self) -> f64 {
        self.per_second * f64::from(self.at_once)
    }
}

/// What one public URL needs at a send rate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlSizing {
    pub loads: Vec<Load>,
    /// Requests per second at the modelled peak, junk included.
    pub requests_per_second: f64,
    /// Environments busy on average (requests per second times their duration).
    pub busy: f64,
    /// Environments for at most 1 request in 1,000 to find them all busy.
    pub by_duration: u32,
    /// Environments for the busiest second's requests within ten per environment.
    pub by_rate: u32,
    /// The larger: the ReservedConcurrentExecutions the function needs.
    pub needed: u32,
}

impl UrlSizing {
    fn of(loads: Vec<Load>) -> Self {
        let requests_per_second: f64 = loads.iter().map(Load::requests_per_second).sum();
        let busy = loads
            .iter()
            .map(|l| l.requests_per_second() * l.seconds)
            .sum();
        // Requests that arrive together need their environments together: counted in
        // groups, each group's environments times the group's size.
        let grouped: u32 = loads
            .iter()
            .filter(|l| l.at_once > 1)
            .map(|l| l.at_once * servers_for(l.per_second * l.seconds, THROTTLED_AT_MOST))
            .sum();
        let single_load = loads
            .iter()
            .filter(|l| l.at_once <= 1)
            .map(|l| l.per_second * l.seconds)
            .sum();
        let by_duration = grouped + servers_for(single_load, THROTTLED_AT_MOST);
        let busiest = requests_per_second + Z_ONE_IN_1000 * requests_per_second.sqrt();
        let by_rate = (busiest / REQUESTS_PER_SECOND_PER_ENVIRONMENT).ceil() as u32;
        Self {
            loads,
            requests_per_second,
            busy,
            by_duration,
            by_rate,
            needed: by_duration.max(by_rate).max(1),
        }
    }
}

/// A junk request's duration on a `memory_mb` environment.
pub fn junk_seconds(memory_mb: u32) -> f64 {
    JUNK_CPU_US / 1e6 * MB_PER_VCPU / f64::from(memory_mb.max(1)) + INVOCATION_OVERHEAD_S
}

/// The junk load on one URL.
fn junk(per_second: f64, memory_mb: u32) -> Load {
    Load {
        what: "junk",
        per_second: per_second.max(0.0),
        at_once: 1,
        seconds: junk_seconds(memory_mb),
    }
}

/// OpenContent at `send_rate` emails/s with `slots` pick slots per email, `junk` junk
/// requests per second, on `memory_mb` environments (the template's 128).
pub fn open_content(send_rate: f64, slots: u8, junk_per_second: f64, memory_mb: u32) -> UrlSizing {
    let rate = finite(send_rate);
    let slots = u32::from(slots);
    let mut loads = vec![junk(junk_per_second, memory_mb)];
    if slots > 0 {
        loads.extend([
            Load {
                what: "first opens (every card and badge of an email at once)",
                per_second: rate * PREFETCHED_AT_DELIVERY,
                at_once: 2 * slots,
                seconds: FIRST_OPEN_SECONDS,
            },
            Load {
                what: "static badge images",
                per_second: rate * PREFETCHED_AT_DELIVERY * f64::from(slots),
                at_once: 1,
                seconds: STATIC_SECONDS,
            },
            Load {
                what: "links followed by scanners",
                per_second: rate * SCANNED_AT_DELIVERY * f64::from(slots),
                at_once: 1,
                seconds: CLICK_SECONDS,
            },
        ]);
    }
    UrlSizing::of(loads)
}

/// Unsubscribe at `send_rate` emails/s, `junk` junk requests per second, on `memory_mb`
/// environments (the template's 128).
pub fn unsubscribe(send_rate: f64, junk_per_second: f64, memory_mb: u32) -> UrlSizing {
    let rate = finite(send_rate);
    UrlSizing::of(vec![
        junk(junk_per_second, memory_mb),
        Load {
            what: "preference centre GETs by scanners",
            per_second: rate * SCANNED_AT_DELIVERY * FOOTER_LINKS,
            at_once: 1,
            seconds: PAGE_SECONDS,
        },
        Load {
            what: "one-click POSTs",
            per_second: rate * ONE_CLICKS_PER_EMAIL,
            at_once: 1,
            seconds: ONE_CLICK_SECONDS,
        },
    ])
}

fn finite(rate: f64) -> f64 {
    if rate.is_finite() {
        rate.max(0.0)
    } else {
        0.0
    }
}

/// Erlang's B formula: the share of arrivals that find all `servers` busy when `load`
/// servers' worth of work arrives at random (requests per second times their duration).
pub fn erlang_b(servers: u32, load: f64) -> f64 {
    let mut blocked = 1.0;
    for n in 1..=servers {
        blocked = load * blocked / (f64::from(n) + load * blocked);
    }
    blocked
}

/// The fewest servers for which at most `share` of arrivals find all busy.
pub fn servers_for(load: f64, share: f64) -> u32 {
    if load.is_nan() || load <= 0.0 {
        return 0;
    }
    let mut blocked = 1.0;
    let mut servers = 0u32;
    while blocked > share && servers < 100_000 {
        servers += 1;
        blocked = load * blocked / (f64::from(servers) + load * blocked);
    }
    servers
}

/// The reserved concurrency configured for the two URLs, the pick slots, and their memory,
/// as RateControl's environment carries them (for `mailctl plan` and RateControl's check).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicUrls {
    pub unsubscribe_concurrency: u32,
    pub open_content_concurrency: u32,
    pub pick_slots: u8,
}

impl PublicUrls {
    /// The template's defaults.
    pub const DEFAULT: Self = Self {
        unsubscribe_concurrency: 26,
        open_content_concurrency: 69,
        pick_slots: 3,
    };
    /// The functions' memory in the template.
    pub const MEMORY_MB: u32 = 128;

    /// Both URLs at `send_rate`, with the designed junk: what each needs against what it has.
    pub fn check(&self, send_rate: f64) -> PublicUrlsCheck {
        PublicUrlsCheck {
            unsubscribe: unsubscribe(send_rate, JUNK_PER_SECOND, Self::MEMORY_MB),
            unsubscribe_concurrency: self.unsubscribe_concurrency,
            open_content: open_content(
                send_rate,
                self.pick_slots,
                JUNK_PER_SECOND,
                Self::MEMORY_MB,
            ),
            open_content_concurrency: self.open_content_concurrency,
        }
    }
}

/// Each URL's need at a send rate and its configured concurrency.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicUrlsCheck {
    pub unsubscribe: UrlSizing,
    pub unsubscribe_concurrency: u32,
    pub open_content: UrlSizing,
    pub open_content_concurrency: u32,
}

/// A URL whose reserved concurrency is below what the model needs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Short {
    /// The template parameter that sets it.
    pub parameter: &'static str,
    pub configured: u32,
    pub needed: u32,
}

impl PublicUrlsCheck {
    /// The URLs whose concurrency is below what the model needs.
    pub fn short(&self) -> Vec<Short> {
        [
            (
                "UnsubscribeConcurrency",
                self.unsubscribe_concurrency,
                self.unsubscribe.needed,
            ),
            (
                "OpenContentConcurrency",
                self.open_content_concurrency,
                self.open_content.needed,
            ),
        ]
        .into_iter()
        .filter(|(_, configured, needed)| configured < needed)
        .map(|(parameter, configured, needed)| Short {
            parameter,
            configured,
            needed,
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erlang_b_is_the_textbook_formula() {
        // One server: load / (1 + load).
        assert!((erlang_b(1, 1.0) - 0.5).abs() < 1e-12);
        // Tables: 10 servers at 5 erlangs block 1.84 %; 2.8 erlangs need 10 servers for 0.1 %.
        assert!((erlang_b(10, 5.0) - 0.018_4).abs() < 1e-4);
        assert_eq!(servers_for(2.8, 0.001), 10);
        assert!(erlang_b(9, 2.8) > 0.001 && erlang_b(10, 2.8) <= 0.001);
        assert_eq!(servers_for(0.0, 0.001), 0);
        assert_eq!(servers_for(f64::NAN, 0.001), 0);
    }

    #[test]
    fn the_template_defaults_are_what_the_default_send_rate_needs() {
        let check = PublicUrls::DEFAULT.check(14.0);
        // OpenContent: 14 emails/s each six requests for 0.2 s (2.8 emails at once: 10
        // emails' worth, 60 environments), plus junk, badges' images and scanners' clicks.
        assert_eq!(
            (check.open_content.by_duration, check.open_content.by_rate),
            (69, 40)
        );
        assert_eq!(check.open_content.needed, 69);
        // Unsubscribe: its requests are short, but Lambda's ten per environment per second
        // make the busiest of 206 a second (250) need 26.
        assert_eq!(
            (check.unsubscribe.by_duration, check.unsubscribe.by_rate),
            (7, 26)
        );
        assert_eq!(check.unsubscribe.needed, 26);
        assert!(check.short().is_empty(), "{:?}", check.short());
        // The old 10 fell short at a hundred junk requests a second already.
        assert_eq!(unsubscribe(14.0, 100.0, 128).needed, 14);
    }

    #[test]
    fn the_need_follows_the_send_rate_and_the_slots() {
        let need = |rate| PublicUrls::DEFAULT.check(rate);
        let (slow, fast) = (need(14.0), need(100.0));
        assert!(fast.open_content.needed > 3 * slow.open_content.needed);
        assert_eq!(fast.open_content.needed, 235);
        assert_eq!(fast.unsubscribe.needed, 29);
        let short: Vec<_> = fast
            .short()
            .into_iter()
            .map(|s| (s.parameter, s.configured, s.needed))
            .collect();
        assert_eq!(
            short,
            [
                ("UnsubscribeConcurrency", 26, 29),
                ("OpenContentConcurrency", 69, 235)
            ]
        );
        // No slots: only junk reaches OpenContent.
        let none = open_content(100.0, 0, JUNK_PER_SECOND, 128);
        assert_eq!(none.loads.len(), 1);
        assert_eq!(none.needed, 25);
        // A junk request at 128 MB: 100 µs of a core is 1.4 ms, plus Lambda's 2 ms.
        assert!((junk_seconds(128) - 0.003_382).abs() < 1e-6);
    }
}
