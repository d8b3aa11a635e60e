//! The two public Function URLs under junk, on the local stack with the
//! template's defaults: the local Function URL throttles each function as Lambda does (429
//! beyond its ReservedConcurrentExecutions, or ten requests per second per environment), so
//! a URL sized too small shows here as it would on AWS.
//!
//! Junk (no token that verifies, a method, path or size that can never succeed) is sent at
//! the model's rate, `JUNK_PER_SECOND` on each URL, first alone, then while real one-click
//! POSTs and real first opens (every card and badge of an email at once, the badges' static
//! images, a click) are made. Every real request must succeed, every junk request get a
//! 4xx that is not 429, and junk alone must reach no store: the functions' AWS and MongoDB
//! calls go through fault switches that refuse nothing and count every call.
//! No assertion is on time (a shared two-core machine): the figures are printed.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::open_content::SlotUrls;
use mailflow::domain::public_urls::{PublicUrls, JUNK_PER_SECOND};
use mailflow_local::fault_switch::{Fault, FaultSwitch, MONGODB};
use mailflow_local::{http, names};
use mailflow_tests::test_env;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const W47: &str = "weekly-2026-W47";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
const JUNK_ALONE: Duration = Duration::from_secs(1);
const UNDER_JUNK: Duration = Duration::from_secs(3);
/// One one-click and one email's first open this often while junk arrives: 8 readers in
/// the 3 s, so that however slow the local stores are, their requests in flight (at most
/// 8 emails of six) stay within OpenContent's 69 environments: the local durations are not
/// Lambda's (the model's are), only the junk is at the model's rate.
const REAL_EVERY: Duration = Duration::from_millis(375);

/// One request's outcome: what it was, its status, how long it took.
#[derive(Clone, Debug)]
struct Outcome {
    kind: &'static str,
    status: u16,
    took: Duration,
}

#[derive(Default)]
struct Outcomes(Mutex<Vec<Outcome>>);

impl Outcomes {
    fn add(&self, kind: &'static str, status: u16, took: Duration) {
        self.0.lock().unwrap().push(Outcome { kind, status, took });
    }

    fn take(&self) -> Vec<Outcome> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A request and its outcome; a connection error counts as status 0.
async fn send(
    outcomes: &Outcomes,
    kind: &'static str,
    url: &str,
    method: &str,
    body: &[u8],
) -> http::Response {
    let started = Instant::now();
    let headers = [("User-Agent", CHROME), ("Accept-Language", "en")];
    let response = http::request(url, method, &headers, body).await;
    let status = response.as_ref().map_or(0, |r| r.status);
    outcomes.add(kind, status, started.elapsed());
    response.unwrap_or(http::Response {
        status: 0,
        headers: Vec::new(),
        body: Vec::new(),
    })
}

/// One junk request: (kind, method, URL, body).
type Junk = (&'static str, &'static str, String, Vec<u8>);

/// Junk at `per_second` over `junk` (round robin) until `until`, each request on its own
/// task so that slow answers do not slow the sender; returns when all have answered. A
/// sender held up by a busy machine catches up (what is due by now is sent at once), so the
/// rate over the whole time is the one asked, in bursts if need be.
async fn junk_until(
    junk: Arc<Vec<Junk>>,
    per_second: f64,
    until: Instant,
    outcomes: Arc<Outcomes>,
) {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = Vec::new();
    loop {
        tick.tick().await;
        let now = Instant::now().min(until);
        let due = (now.duration_since(started).as_secs_f64() * per_second) as usize;
        while sent.len() < due {
            let (junk, outcomes, i) = (junk.clone(), outcomes.clone(), sent.len());
            sent.push(tokio::spawn(async move {
                let (kind, method, url, body) = &junk[i % junk.len()];
                send(&outcomes, kind, url, method, body).await;
            }));
        }
        if now >= until {
            break;
        }
    }
    for request in sent {
        request.await.unwrap();
    }
}

fn percentile(mut took: Vec<Duration>, p: f64) -> Duration {
    took.sort();
    took.get(((took.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// By kind: how many, their statuses, p50 and p99 latency.
fn summary(outcomes: &[Outcome]) -> String {
    let mut by_kind: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        by_kind.entry(o.kind).or_default().push(o);
    }
    by_kind
        .iter()
        .map(|(kind, all)| {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            for o in all {
                *statuses.entry(o.status).or_default() += 1;
            }
            let took: Vec<Duration> = all.iter().map(|o| o.took).collect();
            format!(
                "  {kind}: {} {statuses:?} p50 {:.1} ms p99 {:.1} ms",
                all.len(),
                percentile(took.clone(), 0.5).as_secs_f64() * 1e3,
                percentile(took, 0.99).as_secs_f64() * 1e3,
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every AWS and MongoDB call the functions made since `from` (the switches' hits).
fn calls_since(switches: &[&FaultSwitch], from: &[usize]) -> Vec<String> {
    switches
        .iter()
        .zip(from)
        .flat_map(|(s, n)| {
            s.hits()
                .into_iter()
                .skip(*n)
                .map(|h| format!("{}.{}", h.service, h.operation))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_clicks_and_images_keep_working_under_junk_at_the_modelled_rate() {
    // The functions' MongoDB and AWS calls pass through switches that only count them.
    let (aws_endpoint, mongo_uri) = mailflow_tests::endpoints();
    let mongo_server = mongo_uri
        .trim_start_matches("mongodb://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mongo = FaultSwitch::start_mongodb(mongo_server).await.unwrap();
    let aws = FaultSwitch::start(&aws_endpoint).await.unwrap();
    let mut env = test_env("public-urls", |o| {
        // The template's default rate: its reserved concurrency defaults are sized for it.
        o.parameters.remove(names::SEND_RATE_PER_SECOND);
        o.mongodb_uri = Some(mongo.mongodb_uri());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id(W47, None).unwrap();
    let seeded = env.seed(40, &campaign).await.unwrap();
    let readers: Vec<String> = seeded.audience.keys().take(8).cloned().collect();
    assert_eq!(readers.len(), 8);
    env.stack.sdk = aws.sdk_through(&env.stack.sdk);
    let unsubscribe = env.serve_unsubscribe().await.unwrap();
    let open_content = mailflow_local::pipeline::serve_open_content(
        &env.stack,
        0,
        Arc::new(mailflow::ports::SystemClock),
    )
    .await
    .unwrap();
    assert_eq!(
        (unsubscribe.reserved(), open_content.reserved()),
        (
            Some(PublicUrls::DEFAULT.unsubscribe_concurrency),
            Some(PublicUrls::DEFAULT.open_content_concurrency)
        ),
        "the template's reserved concurrency, enforced"
    );
    for (service, switch) in [
        ("dynamodb", &aws),
        ("secretsmanager", &aws),
        (MONGODB, &mongo),
    ] {
        switch.set(service, "*", Fault::Delay(Duration::ZERO), None);
    }

    // Real links, signed and sealed with the stack's own secret.
    let function_env = env.stack.env(names::UNSUBSCRIBE).unwrap();
    let signer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap();
    let one_click = |user: &str| {
        let token = signer.token(&campaign.id, &campaign.topic, user);
        format!("{}?token={token}", unsubscribe.url())
    };
    let slots = |user: &str| {
        SlotUrls::for_email(
            &signer.slot_sealer(),
            open_content.url(),
            &campaign.id,
            user,
            mailflow::domain::open_content::Language::En,
            PublicUrls::DEFAULT.pick_slots,
        )
    };
    let foreign =
        mailflow::domain::unsubscribe_link::Signer::new(&"f".repeat(40), "weekly-digest").unwrap();
    let forged_token = foreign.token(&campaign.id, &campaign.topic, &readers[0]);
    let forged_slot = SlotUrls::for_email(
        &foreign.slot_sealer(),
        open_content.url(),
        &campaign.id,
        &readers[0],
        mailflow::domain::open_content::Language::En,
        1,
    );
    let (u, o) = (unsubscribe.url(), open_content.url());
    let form = b"List-Unsubscribe=One-Click".to_vec();
    let unsubscribe_junk: Arc<Vec<Junk>> = Arc::new(vec![
        ("junk: GET without a token", "GET", u.to_owned(), Vec::new()),
        (
            "junk: one-click with a forged token",
            "POST",
            format!("{u}?token={forged_token}"),
            form.clone(),
        ),
        (
            "junk: one-click, not a token",
            "POST",
            format!("{u}?token=nonsense"),
            form,
        ),
        ("junk: PUT", "PUT", format!("{u}?token=x"), Vec::new()),
        (
            "junk: a 9 KiB form",
            "POST",
            u.to_owned(),
            vec![b'a'; 9 * 1024],
        ),
        (
            "junk: a scanner's path",
            "GET",
            format!("{u}wp-login.php"),
            Vec::new(),
        ),
    ]);
    let open_content_junk: Arc<Vec<Junk>> = Arc::new(vec![
        (
            "junk: a card without a token",
            "GET",
            format!("{o}pick"),
            Vec::new(),
        ),
        (
            "junk: a badge, not a token",
            "GET",
            format!("{o}badge?t=nonsense"),
            Vec::new(),
        ),
        (
            "junk: another stack's card",
            "GET",
            forged_slot[0].image.clone(),
            Vec::new(),
        ),
        (
            "junk: another stack's link",
            "GET",
            forged_slot[0].link.clone(),
            Vec::new(),
        ),
        (
            "junk: POST a card",
            "POST",
            format!("{o}pick?t=x"),
            Vec::new(),
        ),
        (
            "junk: a scanner's path",
            "GET",
            format!("{o}wp-login.php"),
            Vec::new(),
        ),
    ]);
    let junk = Arc::new(Outcomes::default());
    let real = Arc::new(Outcomes::default());

    // 1. Junk alone: answered, and not one call to MongoDB, DynamoDB or Secrets Manager.
    let from = [aws.hits().len(), mongo.hits().len()];
    let until = Instant::now() + JUNK_ALONE;
    tokio::join!(
        junk_until(
            unsubscribe_junk.clone(),
            JUNK_PER_SECOND,
            until,
            junk.clone()
        ),
        junk_until(
            open_content_junk.clone(),
            JUNK_PER_SECOND,
            until,
            junk.clone()
        ),
    );
    let alone = junk.take();
    assert_eq!(
        calls_since(&[&aws, &mongo], &from),
        Vec::<String>::new(),
        "junk reached a store"
    );

    // 2. Junk while readers open their emails and unsubscribe.
    let from = [aws.hits().len(), mongo.hits().len()];
    let started = Instant::now();
    let until = started + UNDER_JUNK;
    let readers_done = {
        let (real, readers) = (real.clone(), readers.clone());
        let emails: Vec<(String, Vec<SlotUrls>)> =
            readers.iter().map(|r| (one_click(r), slots(r))).collect();
        async move {
            let mut tick = tokio::time::interval(REAL_EVERY);
            let mut readers = Vec::new();
            for (unsubscribe, slots) in emails {
                tick.tick().await;
                if Instant::now() >= until {
                    break;
                }
                let real = real.clone();
                readers.push(tokio::spawn(async move {
                    let one_click = async {
                        let body = b"List-Unsubscribe=One-Click";
                        send(&real, "one-click", &unsubscribe, "POST", body).await;
                    };
                    // Every card and badge at once, as a mail client (or Apple's proxy at
                    // delivery) fetches them, then the badges' images and one click.
                    let open = async {
                        let cards = slots
                            .iter()
                            .map(|s| send(&real, "card (first open)", &s.image, "GET", b""));
                        let badges = slots
                            .iter()
                            .map(|s| send(&real, "badge (first open)", &s.badge, "GET", b""));
                        let (_, badges) = tokio::join!(
                            futures::future::join_all(cards),
                            futures::future::join_all(badges)
                        );
                        let base = slots[0].image.rsplit_once('/').unwrap().0.to_owned();
                        for badge in badges {
                            let to = badge.header("location").unwrap_or("none").to_owned();
                            send(&real, "badge image", &format!("{base}/{to}"), "GET", b"").await;
                        }
                        send(&real, "link", &slots[0].link, "GET", b"").await;
                    };
                    tokio::join!(one_click, open);
                }));
            }
            for reader in readers {
                reader.await.unwrap();
            }
        }
    };
    tokio::join!(
        junk_until(unsubscribe_junk, JUNK_PER_SECOND, until, junk.clone()),
        junk_until(open_content_junk, JUNK_PER_SECOND, until, junk.clone()),
        readers_done,
    );
    let elapsed = started.elapsed();
    let (under, real) = (junk.take(), real.take());
    let calls = calls_since(&[&aws, &mongo], &from).len();

    println!(
        "junk alone ({} requests sent in {JUNK_ALONE:?}, {:.0}/s on each URL):\n{}\nunder junk ({} junk requests sent in {UNDER_JUNK:?}, {:.0}/s on each URL, and {} real requests; all answered after {elapsed:.1?}; {calls} store calls):\n{}\n{}\nthrottled: Unsubscribe {}, OpenContent {}",
        alone.len(),
        alone.len() as f64 / 2.0 / JUNK_ALONE.as_secs_f64(),
        summary(&alone),
        under.len(),
        under.len() as f64 / 2.0 / UNDER_JUNK.as_secs_f64(),
        real.len(),
        summary(&under),
        summary(&real),
        unsubscribe.throttled(),
        open_content.throttled(),
    );
    // Every real request answered as it should: nothing refused, nothing failed.
    // A one-click MongoDB did not take in its 3 s (a loaded runner's SecantusDB) is recorded
    // in DynamoDB and answered 202: answered, and the leave kept.
    let expected = |kind: &str, status: u16| match kind {
        "one-click" => status == 200 || status == 202,
        "card (first open)" | "badge image" => status == 200,
        _ => status == 307,
    };
    let wrong: Vec<&Outcome> = real
        .iter()
        .filter(|o| !expected(o.kind, o.status))
        .collect();
    assert!(wrong.is_empty(), "real requests failed: {wrong:?}");
    assert!(
        real.iter().filter(|o| o.kind == "one-click").count() >= 4,
        "{}",
        summary(&real)
    );
    // Every junk request refused with a 4xx of its own, never for want of an environment.
    let refused_wrongly: Vec<&Outcome> = alone
        .iter()
        .chain(&under)
        .filter(|o| !(400..500).contains(&o.status) || o.status == 429)
        .collect();
    assert!(refused_wrongly.is_empty(), "{refused_wrongly:?}");
    assert_eq!((unsubscribe.throttled(), open_content.throttled()), (0, 0));
    // The real requests did reach the stores (through the switches). (Whether a first open
    // froze its picks is not asked: on a loaded machine a store slower than its bound gets
    // the fallback card, served, not frozen, as it should.)
    assert!(calls > 0);
}
