//! The freeze protocol, the badges, the clicks and the refusals, over the in-memory ports.

use super::*;
use crate::domain::campaign::CampaignId;
use crate::domain::ledger::SendStatus;
use crate::domain::open_content::picks::Follower;
use crate::domain::open_content::{Language, SlotUrls};
use crate::ports::memory::{MemoryOpenContent, MemoryPicks, MemoryRecords};
use crate::ports::SystemClock;
use std::collections::HashSet;
use std::sync::atomic::AtomicI64;

const KEY: &str = "0123456789abcdef0123456789abcdef";
const CAMPAIGN: &str = "weekly-2026-W47";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";

/// A clock the test moves.
#[derive(Default)]
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn config(extra: &[(&str, &str)]) -> OpenContentFunctionConfig {
    let mut pairs: HashMap<String, String> = [
        ("MONGODB_URI", "mongodb://127.0.0.1:1/"),
        ("MONGODB_DATABASE", "app"),
        ("UNSUBSCRIBE_SECRET", KEY),
        ("SENDS_TABLE_NAME", "sends"),
        ("OPEN_CONTENT_TABLE_NAME", "open"),
        ("PROFILE_URL_TEMPLATE", "https://app.example/u/{id}"),
        ("PICKS_FALLBACK_URL", "https://app.example/followers"),
        ("CLICK_GRACE_SECONDS", "10"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    pairs.retain(|_, v| !v.is_empty());
    OpenContentFunctionConfig::from_source(&move |k: &str| pairs.get(k).cloned()).unwrap()
}

fn follower(id: &str, name: &str) -> Follower {
    Follower {
        id: id.into(),
        name: Some(name.into()),
        exists: true,
    }
}

/// `u1` has five followers and follows one of them back.
fn directory() -> MemoryPicks {
    MemoryPicks {
        followers: [(
            "u1".to_string(),
            vec![
                follower("a", "Ada"),
                follower("b", "Bo"),
                follower("c", "Cy"),
                follower("d", "Di"),
                follower("oid:65a1f0c2e4b0a1b2c3d4e5f6", "Ed"),
            ],
        )]
        .into(),
        followed_back: [("u1".to_string(), HashSet::from(["b".to_string()]))].into(),
        ..Default::default()
    }
}

type Stage = OpenContent<MemoryOpenContent, MemoryPicks, MemoryRecords>;

fn stage(directory: MemoryPicks, clock: Arc<dyn Clock>, extra: &[(&str, &str)]) -> Stage {
    OpenContent::new(
        SlotSealer::new(KEY).unwrap(),
        MemoryOpenContent::default(),
        directory,
        MemoryRecords::with("u1", CAMPAIGN, SendStatus::Sent),
        clock,
        config(extra),
    )
}

fn urls(user: &str) -> Vec<SlotUrls> {
    SlotUrls::for_email(
        &SlotSealer::new(KEY).unwrap(),
        "https://o.example/",
        &CampaignId::parse(CAMPAIGN).unwrap(),
        user,
        Language::En,
        3,
    )
}

fn get(url: &str, ua: &str) -> HttpRequest {
    let rest = url.strip_prefix("https://o.example").unwrap();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    HttpRequest {
        method: "GET".into(),
        path: path.into(),
        query: query.into(),
        user_agent: ua.into(),
        ..Default::default()
    }
}

fn frozen_ids(stage: &Stage) -> Vec<String> {
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    stage.store.with_frozen(&email)
}

impl MemoryOpenContent {
    fn with_frozen(&self, email: &SendKey) -> Vec<String> {
        futures::executor::block_on(self.frozen(email))
            .unwrap()
            .map(|p| p.items.into_iter().map(|i| i.id).collect())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn every_slot_at_once_computes_once_and_shows_one_consistent_set() {
    let mut dir = directory();
    dir.delay = Duration::from_millis(150);
    let reads = dir.reads.clone();
    let s = stage(dir, Arc::new(SystemClock), &[]);
    let slots = urls("u1");
    // All images and badges of the email at once, as a mail client fetches them.
    let requests: Vec<HttpRequest> = slots
        .iter()
        .flat_map(|u| [get(&u.image, CHROME), get(&u.badge, CHROME)])
        .collect();
    let answers = futures::future::join_all(
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| s.handle(r, if i % 2 == 0 { "req-a" } else { "req-b" })),
    )
    .await;
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one computation");
    assert_eq!(s.store.freezes.load(Ordering::SeqCst), 1);
    // Newest first, not the followed-back "b", none twice.
    assert_eq!(frozen_ids(&s), ["a", "c", "d"]);
    for (i, a) in answers.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(a.status, 200);
            assert_eq!(a.header("content-type"), Some("image/png"));
            assert_eq!(a.header("cache-control"), Some(FROZEN));
        } else {
            assert_eq!(a.status, 307);
            assert_eq!(a.header("location"), Some("static/none.png"));
            assert_eq!(a.header("cache-control"), Some("no-store"));
        }
    }
    // The cards are the picks', in slot order.
    assert_eq!(
        answers[0].body,
        card::pick_card("a", Some("Ada"), Language::En).bytes
    );
    assert_eq!(
        answers[2].body,
        card::pick_card("c", Some("Cy"), Language::En).bytes
    );
    // A reopen from another client, on a new environment with the same store: the same set,
    // no new computation.
    let again = OpenContent::new(
        SlotSealer::new(KEY).unwrap(),
        s.store.clone(),
        directory(),
        MemoryRecords::default(),
        Arc::new(SystemClock),
        config(&[]),
    );
    let reopened = again
        .handle(&get(&slots[0].image, "GoogleImageProxy"), "req-c")
        .await;
    assert_eq!(reopened.body, answers[0].body);
    assert_eq!(again.directory.reads.load(Ordering::SeqCst), 0);
    // Following back "c" since changes nothing for this email.
    assert_eq!(frozen_ids(&again), ["a", "c", "d"]);
    let counts = s
        .store
        .counters(&CampaignId::parse(CAMPAIGN).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (counts.picks_frozen, counts.opens, counts.proxy_opens),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_winner_that_dies_is_replaced_after_its_lease() {
    let dir = directory();
    let reads = dir.reads.clone();
    let s = stage(
        dir,
        Arc::new(SystemClock),
        &[("PICK_COMPUTE_TIMEOUT_MS", "200")],
    );
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    // A request claimed the email and died: its lease runs 300 ms more.
    let now = u64::try_from(SystemClock.now_ms()).unwrap();
    assert_eq!(
        s.store.claim(&email, "dead", now, now + 300).await.unwrap(),
        FreezeClaim::Won
    );
    let started = Instant::now();
    let answer = s.handle(&get(&urls("u1")[0].image, CHROME), "req").await;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited for the lease"
    );
    assert_eq!(answer.header("cache-control"), Some(FROZEN));
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(frozen_ids(&s), ["a", "c", "d"]);
    assert_eq!(
        s.store.freezes.load(Ordering::SeqCst),
        1,
        "this request froze"
    );
    // Frozen, the email's item keeps the picks alone: the lease is gone.
    assert_eq!(s.store.lease(&email), None);
}

#[tokio::test]
async fn a_slow_choice_freezes_the_fallback_and_no_image_breaks() {
    let mut dir = directory();
    dir.delay = Duration::from_millis(400);
    let s = stage(
        dir,
        Arc::new(SystemClock),
        &[("PICK_COMPUTE_TIMEOUT_MS", "100")],
    );
    let slots = urls("u1");
    let card_answer = s.handle(&get(&slots[0].image, CHROME), "r").await;
    assert_eq!(card_answer.status, 200);
    assert_eq!(
        card_answer.body,
        Static::Fallback(Language::En).image().bytes
    );
    let email = SendKey::new("u1", CampaignId::parse(CAMPAIGN).unwrap());
    assert!(
        s.store.frozen(&email).await.unwrap().unwrap().fallback,
        "frozen: every open the same"
    );
    let link = s.handle(&get(&slots[1].link, CHROME), "r").await;
    assert_eq!(
        link.header("location"),
        Some("https://app.example/followers")
    );
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!((counts.picks_frozen, counts.fallbacks), (1, 1));
}

fn email_campaign() -> CampaignId {
    CampaignId::parse(CAMPAIGN).unwrap()
}

#[tokio::test]
async fn clicks_make_hot_and_popular_as_the_rule_says_and_hot_fades() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
    let s = stage(people(), clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
    assert_eq!(badge_of(&s, "u1", 0).await, "static/none.png");
    // One click on "a" (u1's slot 0): the campaign's most clicked, so popular.
    let went = click(&s, "u1", 0).await;
    assert_eq!(went.status, 307);
    assert_eq!(went.header("location"), Some("https://app.example/u/a"));
    assert_eq!(went.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(badge_of(&s, "u1", 0).await, "static/popular.png");
    // "c" (u1's slot 1) ties at one person: popular too; then two more people click it
    // (u2's and u3's third pick), each in a minute of their own: three people in three
    // minutes of the last ten, hot.
    click(&s, "u1", 1).await;
    assert_eq!(badge_of(&s, "u1", 1).await, "static/popular.png");
    for user in ["u2", "u3"] {
        clock.0.fetch_add(MINUTE, Ordering::SeqCst);
        click(&s, user, 2).await;
    }
    assert_eq!(badge_of(&s, "u1", 1).await, "static/hot.png");
    assert_eq!(
        badge_of(&s, "u1", 0).await,
        "static/none.png",
        "no longer the top"
    );
    // Activity stops: ten minutes on, "c" is not hot but still the most clicked.
    clock.0.fetch_add(10 * MINUTE, Ordering::SeqCst);
    assert_eq!(badge_of(&s, "u1", 1).await, "static/popular.png");
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!(
        (counts.clicks, counts.unique_clicks, counts.ignored_clicks),
        (4, 4, 0)
    );
    // Without consent (the default), nothing is noted on the send record.
    assert!(s.records.get("u1", CAMPAIGN).unwrap().1.is_empty());
}

#[tokio::test]
async fn scanners_head_and_clicks_at_delivery_are_answered_but_not_counted() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(5_000_000, Ordering::SeqCst);
    let s = stage(directory(), clock.clone(), &[]);
    let link = &urls("u1")[0].link;
    // A click that freezes the picks itself (images blocked), within the grace: a scanner.
    assert_eq!(
        s.handle(&get(link, CHROME), "r").await.header("location"),
        Some("https://app.example/u/a")
    );
    let mut head = get(link, CHROME);
    head.method = "HEAD".into();
    clock.0.fetch_add(60_000, Ordering::SeqCst);
    // Neither a HEAD nor a known scanner is counted, whoever reads the email: they ask
    // MongoDB nothing (a scanner repeating a valid link costs no read).
    let asked = s.directory.calls.load(Ordering::SeqCst);
    assert_eq!(s.handle(&head, "r").await.status, 307);
    assert_eq!(
        s.handle(&get(link, "Mozilla/5.0 (compatible; Barracuda)"), "r")
            .await
            .status,
        307
    );
    assert_eq!(s.directory.calls.load(Ordering::SeqCst), asked);
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!((counts.clicks, counts.ignored_clicks), (0, 3));
    // After the grace, a person's click counts.
    s.handle(&get(link, CHROME), "r").await;
    assert_eq!(s.store.counters(&email_campaign()).await.unwrap().clicks, 1);
}

#[tokio::test]
async fn an_unsubscribed_readers_email_still_works_and_counts_nothing() {
    let mut dir = directory();
    dir.quiet.insert("u1".into());
    let s = stage(dir, Arc::new(SystemClock), &[("CLICK_GRACE_SECONDS", "0")]);
    let slots = urls("u1");
    assert_eq!(
        s.handle(&get(&slots[0].image, CHROME), "r").await.status,
        200
    );
    assert_eq!(
        s.handle(&get(&slots[0].link, CHROME), "r").await.status,
        307
    );
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!(
        (counts.opens, counts.clicks, counts.picks_frozen),
        (0, 0, 1)
    );
    assert!(s.records.get("u1", CAMPAIGN).unwrap().1.is_empty());
}

#[tokio::test]
async fn tampered_tokens_get_a_transparent_image_or_a_404_and_statics_are_cached() {
    let s = stage(directory(), Arc::new(SystemClock), &[]);
    let slot = &urls("u1")[0];
    let tampered = |url: &str| {
        let mut r = get(url, CHROME);
        let mut q = r.query.into_bytes();
        let last = q.len() - 2;
        q[last] = if q[last] == b'A' { b'B' } else { b'A' };
        r.query = String::from_utf8(q).unwrap();
        r
    };
    for url in [&slot.image, &slot.badge] {
        let a = s.handle(&tampered(url), "r").await;
        assert_eq!(
            (a.status, a.header("content-type")),
            (404, Some("image/png"))
        );
        assert_eq!(a.body, PIXEL.bytes);
    }
    let a = s.handle(&tampered(&slot.link), "r").await;
    assert_eq!((a.status, a.header("location")), (404, None));
    let mut no_token = get(&slot.image, CHROME);
    no_token.query.clear();
    assert_eq!(s.handle(&no_token, "r").await.status, 404);
    assert_eq!(
        s.directory.reads.load(Ordering::SeqCst),
        0,
        "nothing computed"
    );
    let mut post = get(&slot.link, CHROME);
    post.method = "POST".into();
    assert_eq!(s.handle(&post, "r").await.status, 405);
    for name in ["hot", "popular", "none", "fallback"] {
        let a = s
            .handle(
                &get(&format!("https://o.example/static/{name}.png"), ""),
                "r",
            )
            .await;
        assert_eq!(
            (a.status, a.header("cache-control")),
            (200, Some(IMMUTABLE))
        );
    }
    assert_eq!(
        s.handle(&get("https://o.example/elsewhere", ""), "r")
            .await
            .status,
        404
    );
}

/// Every call any port has had (each a DynamoDB request or a MongoDB round trip on AWS).
fn store_calls(s: &Stage) -> u64 {
    s.store.calls.load(Ordering::SeqCst)
        + s.directory.calls.load(Ordering::SeqCst)
        + s.records.calls.load(Ordering::SeqCst)
}

/// Junk on a public URL: whatever can never succeed, and the static images, are answered
/// from memory before any port is called (the sealing keys are the stage's since its cold
/// start: no secret either).
#[tokio::test]
async fn junk_is_answered_from_memory() {
    let s = stage(directory(), Arc::new(SystemClock), &[]);
    let slot = &urls("u1")[0];
    let foreign = SlotUrls::for_email(
        &SlotSealer::new(&"f".repeat(40)).unwrap(),
        "https://o.example/",
        &CampaignId::parse(CAMPAIGN).unwrap(),
        "u1",
        Language::En,
        3,
    );
    let with = |method: &str, url: &str| {
        let mut r = get(url, CHROME);
        r.method = method.into();
        r
    };
    let token = slot.image.split_once("?t=").unwrap().1;
    let junk: Vec<(&str, HttpRequest, u16)> = vec![
        (
            "a card without a token",
            get("https://o.example/pick", CHROME),
            404,
        ),
        (
            "a badge, empty token",
            get("https://o.example/badge?t=", CHROME),
            404,
        ),
        (
            "a link, not a token",
            get("https://o.example/go?t=nonsense", CHROME),
            404,
        ),
        (
            "a token too long",
            get(
                &format!("https://o.example/pick?t={}", "A".repeat(5_000)),
                CHROME,
            ),
            404,
        ),
        ("another stack's card", get(&foreign[0].image, CHROME), 404),
        ("another stack's link", get(&foreign[1].link, CHROME), 404),
        (
            "a good token, another path",
            get(&format!("https://o.example/wp-login.php?t={token}"), CHROME),
            404,
        ),
        ("the root", get("https://o.example/", ""), 404),
        ("POST a good card", with("POST", &slot.image), 405),
        ("PUT a good link", with("PUT", &slot.link), 405),
        ("DELETE", with("DELETE", "https://o.example/go"), 405),
        ("OPTIONS", with("OPTIONS", &slot.badge), 405),
        (
            "a static image",
            get("https://o.example/static/hot.png", ""),
            200,
        ),
    ];
    for (case, request, status) in junk {
        assert_eq!(s.handle(&request, "r").await.status, status, "{case}");
        assert_eq!(store_calls(&s), 0, "{case}: a port was called");
    }
    let answer = s
        .handle_function_url(&serde_json::json!({"rawPath": "/pick"}), "r")
        .await;
    assert_eq!(answer["statusCode"], 400);
    assert_eq!(store_calls(&s), 0);
    // A real card does ask (and answers).
    assert_eq!(s.handle(&get(&slot.image, CHROME), "r").await.status, 200);
    assert!(store_calls(&s) > 0);
}

#[test]
fn destinations_are_the_configured_page_with_the_id_encoded() {
    assert_eq!(
        profile_url("https://x/u/{id}", "a b/é?"),
        "https://x/u/a%20b%2F%C3%A9%3F"
    );
    assert_eq!(
        profile_url("https://x/u?id={id}", "oid:65a1"),
        "https://x/u?id=oid%3A65a1"
    );
}

// ---- People, not requests; stores that hang; consent. ----

const MINUTE: i64 = 60_000;

/// `u1` as above; `u2`, `u3` and `u4` each followed by "x", "a" and "c" (their picks, in
/// that order): "a" is a pick of every email, "x" the first of u2-u4's.
fn people() -> MemoryPicks {
    let mut dir = directory();
    for user in ["u2", "u3", "u4"] {
        dir.followers.insert(
            user.into(),
            vec![
                follower("x", "Xi"),
                follower("a", "Ada"),
                follower("c", "Cy"),
            ],
        );
    }
    dir
}

async fn badge_of(s: &Stage, user: &str, slot: usize) -> String {
    let answer = s.handle(&get(&urls(user)[slot].badge, CHROME), "r").await;
    answer.header("location").unwrap_or_default().to_owned()
}

async fn click(s: &Stage, user: &str, slot: usize) -> HttpResponse {
    s.handle(&get(&urls(user)[slot].link, CHROME), "r").await
}

#[tokio::test]
async fn one_person_clicking_every_minute_makes_a_pick_neither_hot_nor_popular() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
    let s = stage(people(), clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
    // u1 scripts its first pick ("a"): five clicks a minute for ten minutes.
    for _ in 0..10 {
        for _ in 0..5 {
            assert_eq!(click(&s, "u1", 0).await.status, 307);
        }
        assert_eq!(badge_of(&s, "u1", 0).await, "static/popular.png");
        clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    }
    // Two other people click "x" once each: two people beat one person's fifty clicks.
    click(&s, "u2", 0).await;
    click(&s, "u3", 0).await;
    assert_eq!(
        badge_of(&s, "u1", 0).await,
        "static/none.png",
        "one person is neither hot nor the most clicked"
    );
    assert_eq!(badge_of(&s, "u2", 0).await, "static/popular.png");
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!(
        (counts.clicks, counts.unique_clicks),
        (52, 3),
        "every click is counted; each person once per pick"
    );
}

#[tokio::test]
async fn hot_takes_k_people_in_k_minutes_and_a_burst_is_popular_only() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
    let s = stage(people(), clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
    // Three people on "a" within one minute: the most clicked, but a burst is not hot.
    for user in ["u2", "u3", "u4"] {
        click(&s, user, 1).await;
    }
    assert_eq!(badge_of(&s, "u1", 0).await, "static/popular.png");
    // Two of them again, in two more minutes: three people, three minutes: hot.
    clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    click(&s, "u2", 1).await;
    assert_eq!(badge_of(&s, "u1", 0).await, "static/popular.png");
    clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    click(&s, "u3", 1).await;
    assert_eq!(badge_of(&s, "u1", 0).await, "static/hot.png");
    // Two people in three minutes on "x" are not.
    for user in ["u2", "u3"] {
        click(&s, user, 0).await;
    }
    clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    click(&s, "u2", 0).await;
    assert_eq!(badge_of(&s, "u2", 0).await, "static/none.png");
    // The window moves on: not hot any more, still the most clicked.
    clock.0.fetch_add(10 * MINUTE, Ordering::SeqCst);
    assert_eq!(badge_of(&s, "u1", 0).await, "static/popular.png");
}

#[tokio::test]
async fn without_consent_opens_and_clicks_are_counted_but_noted_on_no_record() {
    for (tracking, noted) in [
        ("", vec![]),
        ("false", vec![]),
        // A person's: noted as such, and as opened and clicked.
        (
            "true",
            vec![
                Engagement::HumanOpened,
                Engagement::Opened,
                Engagement::HumanClicked,
                Engagement::Clicked,
            ],
        ),
    ] {
        let clock = Arc::new(TestClock::default());
        clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
        let s = stage(
            directory(),
            clock.clone(),
            &[
                ("CLICK_GRACE_SECONDS", "0"),
                ("TRACK_OPENS_AND_CLICKS", tracking),
            ],
        );
        let slots = urls("u1");
        assert_eq!(
            s.handle(&get(&slots[0].image, CHROME), "r").await.status,
            200
        );
        clock.0.fetch_add(MINUTE, Ordering::SeqCst);
        assert_eq!(
            s.handle(&get(&slots[1].link, CHROME), "r").await.status,
            307
        );
        assert_eq!(
            s.records.get("u1", CAMPAIGN).unwrap().1,
            noted,
            "TRACK_OPENS_AND_CLICKS={tracking:?}"
        );
        let counts = s.store.counters(&email_campaign()).await.unwrap();
        assert_eq!(
            (counts.opens, counts.clicks, counts.unique_clicks),
            (1, 1, 1),
            "aggregates are counted either way"
        );
        // The pick still works: the same card on a reopen, the link to the pick.
        assert_eq!(frozen_ids(&s), ["a", "c", "d"]);
        // What the table keeps per email is its frozen picks, nothing of opens or clicks
        // (the clicks are in the picks' sketches, which hold no one's id).
        let items = s.store.email_items();
        assert_eq!(items.len(), 1);
        let item = items.values().next().unwrap();
        assert_eq!((item.lease.is_none(), item.picks.is_some()), (true, true));
    }
}

#[tokio::test]
async fn each_request_makes_a_bounded_number_of_writes() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
    let s = stage(people(), clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
    let slots = urls("u1");
    let writes = || s.store.writes.load(Ordering::SeqCst);
    let mut last = 0;
    let mut cost = |what: &str, expected: u64| {
        let now = writes();
        assert_eq!(now - last, expected, "{what}");
        last = now;
    };
    // The first open: the claim, the freeze, and one write of the counts (frozen, opened).
    s.handle(&get(&slots[0].image, CHROME), "r").await;
    cost("first open", 3);
    s.handle(&get(&slots[0].image, CHROME), "r").await;
    cost("a reopen: the open counted", 1);
    s.handle(&get(&slots[1].image, CHROME), "r").await;
    s.handle(&get(&slots[0].badge, CHROME), "r").await;
    cost("another card, a badge", 0);
    // A first click: the minute's sketch, the pick's, the campaign's top, the counts.
    click(&s, "u1", 0).await;
    cost("first click", 4);
    // A script: the minute's sketch (refused: this person is in it), the counts.
    for _ in 0..5 {
        click(&s, "u1", 0).await;
        cost("a repeat within the minute", 2);
    }
    // A minute later: the new minute's sketch, the pick's (refused), the counts.
    clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    click(&s, "u1", 0).await;
    cost("the same person a minute later", 3);
    // A first click on "c": one person, as "a" has: the top needs no raise.
    click(&s, "u1", 1).await;
    cost("a first click not past the top", 3);
}

#[tokio::test(start_paused = true)]
async fn a_hung_table_breaks_no_image_badge_or_link() {
    let s = stage(directory(), Arc::new(TestClock::default()), &[]);
    s.store.hung.store(true, Ordering::SeqCst);
    let slots = urls("u1");
    let quick = READ_TIMEOUT + s.config.count_timeout * 2 + Duration::from_secs(1);
    let (card, took) = timed(s.handle(&get(&slots[0].image, CHROME), "r")).await;
    assert_eq!(
        (card.status, card.header("cache-control")),
        (200, Some("no-store"))
    );
    assert_eq!(
        card.body,
        Static::Fallback(Language::En).image().bytes,
        "the fallback, not frozen"
    );
    assert!(took < quick, "{took:?}");
    let (link, took) = timed(s.handle(&get(&slots[0].link, CHROME), "r")).await;
    assert_eq!(
        link.header("location"),
        Some("https://app.example/followers")
    );
    assert!(took < quick, "{took:?}");
    let (badge, took) = timed(s.handle(&get(&slots[0].badge, CHROME), "r")).await;
    assert_eq!(badge.header("location"), Some("static/none.png"));
    assert!(took < quick, "{took:?}");
    // Back: the first open after it freezes, as ever.
    s.store.hung.store(false, Ordering::SeqCst);
    let card = s.handle(&get(&slots[0].image, CHROME), "r").await;
    assert_eq!(card.header("cache-control"), Some(FROZEN));
}

#[tokio::test]
async fn a_missing_index_still_stops_the_cold_start() {
    let s = stage(directory(), Arc::new(SystemClock), &[]);
    assert!(s.prepare().await.is_ok());
    let mut dir = directory();
    dir.missing_index = Some("the index { followerId: 1, followeeId: 1 } is missing".into());
    let s = stage(dir, Arc::new(SystemClock), &[]);
    let err = s.prepare().await.unwrap_err();
    assert!(err.0.contains("followerId"), "{err}");
}

/// A MongoDB that accepts connections and never answers (the driver would wait 30 s to
/// select it; the function's timeout is 10 s).
async fn hung_mongodb() -> mongodb::Database {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{port}/"))
        .await
        .unwrap()
        .database("app")
}

type HungStage = OpenContent<MemoryOpenContent, crate::adapters::picks::MongoPicks, MemoryRecords>;

async fn hung_stage(clock: Arc<dyn Clock>) -> HungStage {
    OpenContent::new(
        SlotSealer::new(KEY).unwrap(),
        MemoryOpenContent::default(),
        crate::adapters::picks::MongoPicks::new(hung_mongodb().await),
        MemoryRecords::with("u1", CAMPAIGN, SendStatus::Sent),
        clock,
        config(&[("CLICK_GRACE_SECONDS", "0")]),
    )
}

/// Served without waiting for the hung store: on tokio's paused clock, the time a request
/// took is the time it waited on timers, the same on any machine.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = tokio::time::Instant::now();
    let out = f.await;
    (out, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_hung_mongodb_holds_no_frozen_card_badge_link_or_static_image() {
    let clock = Arc::new(TestClock::default());
    clock.0.store(1_000 * MINUTE, Ordering::SeqCst);
    let s = hung_stage(clock.clone()).await;
    // u1's email was opened before MongoDB hung: its picks are frozen.
    let email = SendKey::new("u1", email_campaign());
    let picks = Picks {
        items: ["a", "c", "d"]
            .map(|id| Pick {
                id: id.into(),
                name: None,
            })
            .to_vec(),
        fallback: false,
        frozen_at_ms: 0,
    };
    s.store.freeze(&email, &picks).await.unwrap();
    let slots = urls("u1");
    // Well under the driver's 30 s, well over every bound of ours.
    let quick = Duration::from_secs(3);

    let (card, took) = timed(s.handle(&get(&slots[0].image, CHROME), "r")).await;
    assert_eq!(
        (card.status, card.header("cache-control")),
        (200, Some(FROZEN))
    );
    assert_eq!(card.body, card::pick_card("a", None, Language::En).bytes);
    assert!(took < quick, "the first card waited {took:?} for MongoDB");

    let (link, took) = timed(s.handle(&get(&slots[1].link, CHROME), "r")).await;
    assert_eq!(
        (link.status, link.header("location")),
        (307, Some("https://app.example/u/c"))
    );
    assert!(took < quick, "the click waited {took:?} for MongoDB");

    let (badge, took) = timed(s.handle(&get(&slots[2].badge, CHROME), "r")).await;
    assert_eq!(badge.status, 307);
    assert!(took < quick, "the badge waited {took:?}");
    let (image, took) =
        timed(s.handle(&get("https://o.example/static/hot.png", CHROME), "r")).await;
    assert_eq!(image.status, 200);
    assert!(took < quick, "a static image waited {took:?}");

    // Nothing could be checked, so nothing about the person was counted.
    let counts = s.store.counters(&email_campaign()).await.unwrap();
    assert_eq!((counts.opens, counts.clicks), (0, 0), "{counts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hung_mongodb_at_a_first_open_freezes_the_fallback_within_the_choice_bound() {
    let s = hung_stage(Arc::new(TestClock::default())).await;
    let slots = urls("u2");
    let bound = s.config.compute_timeout + Duration::from_secs(1);
    let (card, took) = timed(s.handle(&get(&slots[0].image, CHROME), "r")).await;
    assert_eq!(card.status, 200);
    assert_eq!(card.body, Static::Fallback(Language::En).image().bytes);
    assert!(took < bound, "the first open took {took:?}");
    let (link, took) = timed(s.handle(&get(&slots[0].link, CHROME), "r")).await;
    assert_eq!(
        link.header("location"),
        Some("https://app.example/followers")
    );
    assert!(took < bound, "its click took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_without_mongodb_serves_what_it_can() {
    let s = hung_stage(Arc::new(TestClock::default())).await;
    let (prepared, took) = timed(s.prepare()).await;
    assert!(prepared.is_ok(), "{prepared:?}");
    assert!(
        took < Duration::from_secs(5),
        "the cold start waited {took:?}"
    );
}

/// The clock of tokio's paused time: a lease ends when the test's timers say so.
struct PausedClock(tokio::time::Instant);

impl Clock for PausedClock {
    fn now_ms(&self) -> i64 {
        1_000 * MINUTE + self.0.elapsed().as_millis() as i64
    }
}

/// Every wait at its worst at once: the table answers each call in 990 ms (just inside its
/// bound), MongoDB chooses in 1.4 s (inside its 1.5 s), and a winner that died holds the
/// email's lease for 4 s more. Before one deadline per request, the card took 7.84 s (every
/// bound added up: read, claim, the wait, claim again, choose, freeze, count; a badge's read
/// on top), past what the function may spend.
#[tokio::test(start_paused = true)]
async fn every_answer_comes_within_the_request_deadline_when_every_store_is_slow() {
    for (what, route) in [("card", 0), ("badge", 1), ("link", 2)] {
        let mut directory = directory();
        directory.delay = Duration::from_millis(1_400);
        let clock = Arc::new(PausedClock(tokio::time::Instant::now()));
        let s = stage(directory, clock.clone(), &[("CLICK_GRACE_SECONDS", "0")]);
        let email = SendKey::new("u1", email_campaign());
        let now = clock.now_ms() as u64;
        let dead = s
            .store
            .claim(&email, "dead", now, now + 4_000)
            .await
            .unwrap();
        assert_eq!(dead, FreezeClaim::Won);
        s.store.delay_ms.store(990, Ordering::SeqCst);
        let slots = urls("u1");
        let url = match route {
            0 => &slots[0].image,
            1 => &slots[0].badge,
            _ => &slots[0].link,
        };
        let (answer, took) = timed(s.handle(&get(url, CHROME), "r")).await;
        assert!(took <= REQUEST_DEADLINE, "the {what} took {took:?}");
        match route {
            0 => assert_eq!(
                (answer.status, answer.header("cache-control")),
                (200, Some("no-store")),
                "the fallback card, not frozen"
            ),
            1 => assert_eq!(answer.status, 307),
            _ => assert_eq!(
                answer.header("location"),
                Some("https://app.example/followers")
            ),
        }
        // Not frozen in a hurry: a later open, the table quick again, chooses the picks.
        s.store.delay_ms.store(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let card = s.handle(&get(&slots[0].image, CHROME), "r").await;
        assert_eq!(card.header("cache-control"), Some(FROZEN), "{what}");
        assert_ne!(
            card.body,
            Static::Fallback(Language::En).image().bytes,
            "{what}"
        );
    }
}

/// The static images by name: English's without a suffix (the names in sent emails' badge
/// redirects), the others' with their language; nothing else.
#[test]
fn static_images_by_name_in_each_language() {
    assert_eq!(Static::named("hot.png"), Some(Static::Hot(Language::En)));
    assert_eq!(
        Static::named("popular-fr.png"),
        Some(Static::Popular(Language::Fr))
    );
    assert_eq!(
        Static::named("fallback-de.png"),
        Some(Static::Fallback(Language::De))
    );
    assert_eq!(Static::named("none.png"), Some(Static::None));
    for junk in [
        "hot-en.png",
        "hot-xx.png",
        "none-fr.png",
        "hot",
        "x.png",
        "-fr.png",
    ] {
        assert_eq!(Static::named(junk), None, "{junk}");
    }
    assert_ne!(
        Static::Hot(Language::Fr).image(),
        Static::Hot(Language::En).image()
    );
    assert_eq!(
        Route::of("/static/hot-de.png"),
        Route::Static(Static::Hot(Language::De))
    );
    assert_eq!(Route::of("/static/hot-xx.png"), Route::Other);
    assert_eq!(
        Route::of("/base/static/none.png"),
        Route::Static(Static::None)
    );
}
