//! Open-time content against the local stack: a real campaign's emails, their pick slots
//! fetched over HTTP from the OpenContent function (first open decides, once, for every
//! slot at once; reopens and other clients see the same), clicks that move a pick to "hot"
//! and "popular" and back as the controlled clock moves (people, not requests: one reader
//! alone makes nothing hot), refusals, and the counts in `status`, with consent to
//! per-recipient tracking; then a real browser (headless Chromium) opening a sent email
//! without it (nothing per recipient written); then the release binary starting and serving
//! against a MongoDB that never answers.
//!
//! The recipient's data is not the seed's happy path: an ObjectId id, a follower who
//! followed twice, a follower whose user document is gone, one whose name is a number, one
//! followed back, a follow with a numeric followerId, a self-follow, a CJK name.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::ledger::Engagement;
use mailflow::domain::open_content::{OpenCounters, Picks};
use mailflow::ports::Clock;
use mailflow_local::function_url::FunctionUrl;
use mailflow_local::http;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env, TestEnv};
use mongodb::bson::{doc, oid::ObjectId, DateTime, Document};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const W47: &str = "weekly-2026-W47";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
const MINUTE: i64 = 60_000;

/// A clock the test moves (the OpenContent stage reads it for leases, minutes and the grace).
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A page for every profile the picks link to: where a click lands.
async fn profiles() -> FunctionUrl {
    FunctionUrl::serve(
        0,
        Arc::new(|event: Value| {
            Box::pin(async move {
                let path = event["rawPath"].as_str().unwrap_or_default().to_owned();
                json!({
                    "statusCode": 200,
                    "headers": {"content-type": "text/html; charset=utf-8"},
                    "body": format!("<!doctype html><title>profile</title><h1>Profile {path}</h1>"),
                    "isBase64Encoded": false,
                })
            })
        }),
    )
    .await
    .unwrap()
}

struct World {
    env: TestEnv,
    _profiles: FunctionUrl,
    profiles_url: String,
    open_content: FunctionUrl,
    reader: ObjectId,
    /// The reader's email, as SES recorded it.
    html: String,
    text: String,
}

/// A stack whose picks link to a local profile server and whose OpenContent function runs
/// on `clock`, a recipient with awkward followers, and W47 sent through the pipeline;
/// `tracking`: the TrackOpensAndClicks parameter (consent to per-recipient tracking).
async fn world(test: &str, clock: Arc<dyn Clock>, tracking: bool) -> World {
    let profiles = profiles().await;
    let profiles_url = profiles.url().to_owned();
    let mut env = test_env(test, |o| {
        o.parameters
            .insert("TrackOpensAndClicks".into(), tracking.to_string());
        o.parameters.insert(
            "ProfileUrlTemplate".into(),
            format!("{profiles_url}u/{{id}}"),
        );
        o.parameters.insert(
            "PicksFallbackUrl".into(),
            format!("{profiles_url}followers"),
        );
        o.parameters.insert("ClickGraceSeconds".into(), "1".into());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id(W47, None).unwrap();
    env.seed(20, &campaign).await.unwrap();
    let reader = ObjectId::new();
    let ada = ObjectId::new();
    let at = |hours: i64| {
        DateTime::from_millis((campaign.window.since.unix_timestamp() + hours * 3600) * 1000)
    };
    let users = env.db.collection::<Document>("users");
    users
        .insert_many([
            doc! {"_id": reader, "email": format!("reader@{}", env.domain), "name": "Zoë", "subscribed": true, "locale": "fr-CA"},
            doc! {"_id": ada, "email": "ada@elsewhere.example", "name": "Ada Lovelace", "subscribed": true},
            doc! {"_id": "numbered", "email": "n@elsewhere.example", "name": 42, "subscribed": true},
            doc! {"_id": "bruce", "email": "b@elsewhere.example", "name": "李小龍", "subscribed": false},
            doc! {"_id": "back", "email": "k@elsewhere.example", "name": "Followed Back", "subscribed": true},
        ])
        .await
        .unwrap();
    let follow = |from: mongodb::bson::Bson, to: mongodb::bson::Bson, t| {
        doc! {"followerId": from, "followeeId": to, "createdAt": t}
    };
    env.db
        .collection::<Document>("follows")
        .insert_many([
            follow(ada.into(), reader.into(), at(100)),
            follow(ada.into(), reader.into(), at(10)), // followed twice
            follow("ghost".into(), reader.into(), at(90)), // no such user
            follow("numbered".into(), reader.into(), at(80)),
            follow("back".into(), reader.into(), at(70)),
            follow(reader.into(), "back".into(), at(5)), // followed back
            follow(7.into(), reader.into(), at(60)),     // no user can have that id
            follow(reader.into(), reader.into(), at(50)), // oneself
            follow("bruce".into(), reader.into(), at(40)),
        ])
        .await
        .unwrap();
    let open_content = mailflow_local::pipeline::serve_open_content(&env.stack, 0, clock)
        .await
        .unwrap();
    env.stack
        .set_function_url(names::OPEN_CONTENT, open_content.url());
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    pipeline
        .run(json!({"campaignId": W47}), Duration::from_secs(600))
        .await
        .unwrap();
    let sent = env.sent().await.unwrap();
    let email = &sent[&format!("reader@{}", env.domain)][0];
    World {
        html: email.html.clone().unwrap(),
        text: email.text.clone().unwrap(),
        env,
        profiles_url,
        _profiles: profiles,
        open_content,
        reader,
    }
}

/// The URLs in the email's HTML that start with `prefix`, in order.
fn urls(html: &str, prefix: &str) -> Vec<String> {
    html.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &html[i..];
            rest[..rest.find('"').unwrap()].replace("&amp;", "&")
        })
        .collect()
}

async fn get(url: &str, ua: &str) -> http::Response {
    http::request(url, "GET", &[("User-Agent", ua)], b"")
        .await
        .unwrap()
}

async fn counters(env: &TestEnv) -> OpenCounters {
    use mailflow::ports::OpenContentStore;
    let table = env.stack.table_name(names::OPEN_CONTENT_TABLE).unwrap();
    mailflow::adapters::open_content::OpenContentTable::new(env.dynamo(), table)
        .counters(&mailflow::domain::campaign::CampaignId::parse(W47).unwrap())
        .await
        .unwrap()
}

async fn frozen(env: &TestEnv, user: &str) -> Picks {
    env.frozen_picks(W47, user).await.unwrap().expect("frozen")
}

#[tokio::test(flavor = "multi_thread")]
async fn first_open_decides_once_and_badges_follow_the_clicks() {
    let now = mailflow::ports::SystemClock.now_ms();
    let clock = Arc::new(TestClock(AtomicI64::new(now)));
    let w = world("open-content", clock.clone(), true).await;
    let base = w.open_content.url();
    let images = urls(&w.html, &format!("{base}pick?t="));
    let badges = urls(&w.html, &format!("{base}badge?t="));
    let links = urls(&w.html, &format!("{base}go?t="));
    assert_eq!(
        (images.len(), badges.len(), links.len()),
        (3, 3, 3),
        "{}",
        w.html
    );
    // The text part carries the links too (a reader without HTML can still follow them).
    assert!(links.iter().all(|l| w.text.contains(l.as_str())));
    // No user id or address in any URL.
    let reader = format!("oid:{}", w.reader.to_hex());
    for u in images.iter().chain(&badges).chain(&links) {
        assert!(
            !u.contains(&w.reader.to_hex()) && !u.contains("reader"),
            "{u}"
        );
    }

    // Every slot's image and badge at once, many times over, as clients fetch them.
    let requests: Vec<String> = (0..4)
        .flat_map(|_| images.iter().chain(&badges).cloned())
        .collect();
    let answers = futures::future::join_all(requests.iter().map(|u| get(u, CHROME))).await;
    // A request that cannot wait for the first open's choice within its own deadline (a
    // loaded machine) gets the fallback card, never cached; every other answer of a slot is
    // the one card frozen for it. After the burst, one more look at each slot is frozen.
    let mut cards: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); 3];
    let mut fallbacks: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut see = |slot: usize, a: &http::Response| {
        assert_eq!(
            (a.status, a.header("content-type")),
            (200, Some("image/png"))
        );
        match a.header("cache-control") {
            Some("private, max-age=31536000, immutable") => cards[slot].insert(a.body.clone()),
            Some("no-store") => fallbacks.insert(a.body.clone()),
            other => panic!("a card answered with cache-control {other:?}"),
        };
    };
    for (u, a) in requests.iter().zip(&answers) {
        if let Some(slot) = images.iter().position(|i| i == u) {
            see(slot, a);
        } else {
            assert_eq!(a.status, 307);
            assert_eq!(a.header("cache-control"), Some("no-store"));
        }
    }
    // The first open froze, and said so: each slot had a frozen answer within the burst.
    for image in &images {
        assert!(
            requests.iter().zip(&answers).any(|(u, a)| u == image
                && a.header("cache-control") == Some("private, max-age=31536000, immutable")),
            "a frozen answer per slot in the burst"
        );
    }
    for (slot, u) in images.iter().enumerate() {
        let again = get(u, CHROME).await;
        assert_eq!(
            again.header("cache-control"),
            Some("private, max-age=31536000, immutable")
        );
        see(slot, &again);
    }
    assert!(
        cards.iter().all(|c| c.len() == 1),
        "every frozen answer of a slot is one card: {:?}",
        cards.iter().map(BTreeSet::len).collect::<Vec<_>>()
    );
    let fallback_card = get(&format!("{base}static/fallback-fr.png"), CHROME)
        .await
        .body;
    assert!(
        fallbacks.iter().all(|f| *f == fallback_card),
        "an answer not frozen is the fallback card"
    );
    assert_eq!(
        cards
            .iter()
            .map(|c| c.first().unwrap().clone())
            .collect::<BTreeSet<_>>()
            .len(),
        3,
        "no pick twice"
    );
    let picks = frozen(&w.env, &reader).await;
    let ids: Vec<&str> = picks.items.iter().map(|p| p.id.as_str()).collect();
    // Newest first; once each; not the one followed back, the ghost, the odd id or oneself.
    assert_eq!(
        ids,
        [
            format!("oid:{}", w_ada(&w).await).as_str(),
            "numbered",
            "bruce"
        ]
    );
    assert_eq!(
        picks.items[1].name, None,
        "a name that is a number is no name"
    );
    // One computation froze. (Counting is bounded by COUNT_TIMEOUT_MS and gives up when
    // DynamoDB is slower: beside three other tests on one moto, a CI runner dropped this very
    // count; so this test has its shard to itself, .config/nextest.toml.)
    let after_first = counters(&w.env).await;
    assert_eq!(after_first.picks_frozen, 1, "{after_first:?}");

    // A reopen from another client (Gmail's proxy) on a new day: the same cards.
    clock.0.fetch_add(24 * 60 * MINUTE, Ordering::SeqCst);
    for (slot, u) in images.iter().enumerate() {
        let again = get(u, "Mozilla/5.0 (via ggpht.com GoogleImageProxy)").await;
        assert!(cards[slot].contains(&again.body));
        assert_eq!(
            again.header("cache-control"),
            Some("private, max-age=31536000, immutable")
        );
    }

    // Clicks: past the grace, each lands on the pick's page and counts. The badges speak the
    // reader's French.
    let click = |slot: usize| get(&links[slot], CHROME);
    // A badge whose activity read outlasts READ_TIMEOUT (a loaded machine) answers "none", by
    // design: a read, so looking again changes nothing; a few looks while it differs. (So a
    // "none" expected cannot tell a timed-out read from none: the "popular" and "hot" ones,
    // which a timeout cannot fake, carry the proof that the top moved.)
    let badge = |slot: usize, expected: &'static str| {
        let url = badges[slot].clone();
        async move {
            let mut seen = None;
            for _ in 0..5 {
                seen = get(&url, CHROME)
                    .await
                    .header("location")
                    .map(str::to_owned);
                if seen.as_deref() == Some(expected) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            seen
        }
    };
    assert_eq!(
        badge(0, "static/none.png").await.as_deref(),
        Some("static/none.png")
    );
    let went = click(2).await;
    assert_eq!(went.status, 307);
    assert_eq!(
        went.header("location"),
        Some(format!("{}u/bruce", w.profiles_url).as_str())
    );
    assert_eq!(
        badge(2, "static/popular-fr.png").await.as_deref(),
        Some("static/popular-fr.png"),
        "the campaign's most clicked"
    );
    // The reader alone on slot 0, in three distinct minutes: one person, not hot.
    for _ in 0..3 {
        click(0).await;
        clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    }
    assert_eq!(
        badge(0, "static/popular-fr.png").await.as_deref(),
        Some("static/popular-fr.png"),
        "one person in three minutes is one person: tied at the top, not hot"
    );
    // Two more people, whose emails pick the same follower first: each opens, then clicks
    // in a minute of their own. Three people in distinct minutes of the last ten: hot.
    let friends = friends_of_first_pick(&w, &picks.items[0].id).await;
    // Each opens: a first open that cannot have its choice within its deadline (a loaded
    // machine) is shown the fallback, not frozen, and a reopen freezes, as a reader's would.
    for friend in &friends {
        let mut opened = get(&friend.image, CHROME).await;
        for _ in 0..4 {
            if opened.header("cache-control") != Some("no-store") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            opened = get(&friend.image, CHROME).await;
        }
        assert_eq!(
            (opened.status, opened.header("cache-control")),
            (200, Some("private, max-age=31536000, immutable"))
        );
    }
    let first_page = mailflow::stages::open_content::profile_url(
        &format!("{}u/{{id}}", w.profiles_url),
        &picks.items[0].id,
    );
    for friend in &friends {
        clock.0.fetch_add(MINUTE, Ordering::SeqCst);
        let went = get(&friend.link, CHROME).await;
        assert_eq!(went.header("location"), Some(first_page.as_str()));
    }
    assert_eq!(
        badge(0, "static/hot-fr.png").await.as_deref(),
        Some("static/hot-fr.png"),
        "three people in distinct minutes of the last ten"
    );
    assert_eq!(
        badge(2, "static/none.png").await.as_deref(),
        Some("static/none.png")
    );
    // Activity stops: ten minutes on, slot 0 is not hot any more, but the most clicked.
    clock.0.fetch_add(10 * MINUTE, Ordering::SeqCst);
    assert_eq!(
        badge(0, "static/popular-fr.png").await.as_deref(),
        Some("static/popular-fr.png")
    );
    let badge_image = get(&format!("{base}static/hot-fr.png"), CHROME).await;
    assert_eq!(
        (badge_image.status, badge_image.header("content-type")),
        (200, Some("image/png"))
    );

    // Refusals: a tampered token, a destination smuggled in, HEAD.
    let mut tampered = links[0].clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(get(&tampered, CHROME).await.status, 404);
    let mut tampered_image = images[0].clone();
    tampered_image.insert(tampered_image.len() - 3, 'x');
    let refused = get(&tampered_image, CHROME).await;
    assert_eq!(
        (refused.status, refused.header("content-type")),
        (404, Some("image/png"))
    );
    let smuggled = get(
        &format!(
            "{}&url=https://elsewhere.example/&location=https://elsewhere.example/",
            links[1]
        ),
        CHROME,
    )
    .await;
    assert_eq!(
        smuggled.header("location"),
        Some(format!("{}u/numbered", w.profiles_url).as_str())
    );
    let head = http::request(&links[1], "HEAD", &[("User-Agent", CHROME)], b"")
        .await
        .unwrap();
    assert_eq!(head.status, 307);

    let counts = counters(&w.env).await;
    assert_eq!(counts.picks_frozen, 3, "the reader's and the two friends'");
    // Clicks: the reader's 1 + 3 + 1 (the smuggled one), the friends' 2. Unique: people per
    // pick, added over the picks: the reader on three picks, the friends on one.
    assert_eq!((counts.clicks, counts.unique_clicks), (7, 5), "{counts:?}");
    assert_eq!(counts.ignored_clicks, 1, "the HEAD");
    assert!(counts.opens >= 1 && counts.proxy_opens >= 1, "{counts:?}");
    // In `status`, with the campaign analytics.
    let target = mailctl::ops::Target::from_prefix(&w.env.stack.sdk, &w.env.stack.prefix)
        .await
        .unwrap();
    let status = mailctl::ops::status(&w.env.stack.sdk, &target, W47)
        .await
        .unwrap();
    assert_eq!(status.open_content, counts);
    // With consent, the reader's open and click are noted on their send record.
    assert_eq!(status.engagement["clicked"], 1);
    assert_eq!(status.engagement["opened"], 1);
}

/// Two users whose newest follower is `pick` (their emails' first pick), with the slot URLs
/// of their emails on the stack's OpenContent function, as CreateEmails would seal them.
/// Chosen so that the three people's marks on the pick fall on three registers: the sketch
/// then counts them exactly (two sharing one, about 2 % of stacks' keys, may count as one).
async fn friends_of_first_pick(
    w: &World,
    pick: &str,
) -> Vec<mailflow::domain::open_content::SlotUrls> {
    let function_env = w.env.stack.env(names::OPEN_CONTENT).unwrap();
    let sealer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &w.env.stack.sdk,
    )
    .await
    .unwrap()
    .slot_sealer();
    let follower = pick
        .strip_prefix("oid:")
        .map(|hex| mongodb::bson::Bson::ObjectId(ObjectId::parse_str(hex).unwrap()))
        .unwrap_or_else(|| pick.into());
    let campaign = Campaign::from_id(W47, None).unwrap().id;
    let reader = format!("oid:{}", w.reader.to_hex());
    let mut registers = vec![sealer.mark(&campaign, pick, &reader).register];
    let names: Vec<String> = (0..)
        .map(|i| format!("friend-{i}"))
        .filter(|name| {
            let register = sealer.mark(&campaign, pick, name).register;
            let new = !registers.contains(&register);
            if new {
                registers.push(register);
            }
            new
        })
        .take(2)
        .collect();
    let mut friends = Vec::new();
    for name in &names {
        w.env
            .db
            .collection::<Document>("users")
            .insert_one(doc! {"_id": name.as_str(), "email": format!("{name}@elsewhere.example"), "subscribed": true})
            .await
            .unwrap();
        w.env
            .db
            .collection::<Document>("follows")
            .insert_one(doc! {"followerId": follower.clone(), "followeeId": name.as_str(), "createdAt": DateTime::now()})
            .await
            .unwrap();
        let urls = mailflow::domain::open_content::SlotUrls::for_email(
            &sealer,
            w.open_content.url(),
            &campaign,
            name,
            mailflow::domain::open_content::Language::En,
            3,
        );
        friends.push(urls.into_iter().next().unwrap());
    }
    friends
}

async fn w_ada(w: &World) -> String {
    let ada = w
        .env
        .db
        .collection::<Document>("users")
        .find_one(doc! {"name": "Ada Lovelace"})
        .await
        .unwrap()
        .unwrap();
    ada.get_object_id("_id").unwrap().to_hex()
}

/// A sent email in headless Chromium (tests/browser/open-email.mjs, playwright-core; installed
/// by infra/browser.sh, which infra/test.sh runs): with images on, every card and badge
/// loads and a click on the first pick lands on its page and is counted; with images off,
/// the email still reads. Screenshots go to MAILFLOW_SCREENSHOT_DIR (default
/// .local/browser/shots; `docs` refreshes docs/open-time-content.md's).
#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_opens_a_sent_email_with_images_on_and_off() {
    mailflow_tests::browser_dir();
    let w = world(
        "open-content-browser",
        Arc::new(mailflow::ports::SystemClock),
        false,
    )
    .await;
    let seen = mailflow_tests::browse(
        "open-email.mjs",
        &w.env.name,
        &w.html,
        &["--grace-ms", "1000"],
    )
    .await;

    // Images on: three cards and three badges, every one with alt text.
    let images = seen["images"].as_array().unwrap();
    let size = |i: &Value| (i["width"].as_u64().unwrap(), i["height"].as_u64().unwrap());
    let cards: Vec<&Value> = images
        .iter()
        .filter(|i| i["src"].as_str().unwrap().contains("/pick?t="))
        .collect();
    let badges: Vec<&Value> = images
        .iter()
        .filter(|i| i["src"].as_str().unwrap().contains("/badge?t="))
        .collect();
    assert_eq!((cards.len(), badges.len()), (3, 3), "{seen}");
    // Drawn at twice the size the email shows them (180x120, 96x24), for dense screens.
    assert!(cards.iter().all(|c| size(c) == (360, 240)), "{seen}");
    assert!(badges.iter().all(|b| size(b) == (192, 48)), "{seen}");
    assert!(
        images
            .iter()
            .all(|i| !i["alt"].as_str().unwrap_or_default().trim().is_empty()),
        "{seen}"
    );
    // The click went through the counter to the first pick's page.
    let picks = frozen(&w.env, &format!("oid:{}", w.reader.to_hex())).await;
    let first = mailflow::stages::open_content::profile_url("{id}", &picks.items[0].id);
    assert_eq!(
        seen["landed"].as_str().unwrap(),
        format!("{}u/{first}", w.profiles_url)
    );
    assert!(seen["landedText"].as_str().unwrap().starts_with("Profile"));
    assert!(seen["redirects"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_str().unwrap().contains("/go?t=")));
    // Reopened, the clicked pick's badge says it is the campaign's most clicked.
    assert_eq!(
        seen["badgesAfterClick"],
        json!([
            "static/popular-fr.png",
            "static/none.png",
            "static/none.png"
        ])
    );
    let counts = counters(&w.env).await;
    assert_eq!((counts.clicks, counts.ignored_clicks), (1, 0), "{counts:?}");
    // The reopen's cards came from the browser's cache (a frozen card is cached for a year):
    // one open, as a mail client that keeps its images reports one.
    assert_eq!((counts.opens, counts.picks_frozen), (1, 1), "{counts:?}");
    // Without consent (TrackOpensAndClicks off, the default), the open and the click are in
    // the campaign's counts only: nothing on the reader's send record, and the one item of
    // the open-content table that names the reader holds the frozen picks, nothing else.
    let reader = format!("oid:{}", w.reader.to_hex());
    let record = &w.env.records(W47).await.unwrap()[&reader];
    assert!(
        !record.engagement.contains_key(&Engagement::Opened)
            && !record.engagement.contains_key(&Engagement::Clicked),
        "{:?}",
        record.engagement
    );
    let naming = items_naming(&w.env, &reader).await;
    assert_eq!(naming.len(), 1, "{naming:?}");
    let attributes: BTreeSet<&str> = naming[0].keys().map(String::as_str).collect();
    assert_eq!(
        attributes,
        BTreeSet::from(["pk", "sk", "picks", "expiresAt"]),
        "{naming:?}"
    );

    // Images off: nothing loads, and the email reads (the French reader's greeting, the
    // picks' heading, every image's alt text).
    let off = &seen["imagesOff"];
    assert_eq!(off["loaded"], 0);
    let text = off["text"].as_str().unwrap();
    assert!(
        text.contains("Bonjour Zoë") && text.contains("Des personnes à suivre en retour"),
        "{text}"
    );
    assert!(off["alts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| !a.as_str().unwrap_or_default().is_empty()));
    for shot in [
        "open-time-email",
        "open-time-email-after-click",
        "open-time-email-images-off",
    ] {
        assert!(
            mailflow_tests::screenshot_dir()
                .join(format!("{shot}.png"))
                .exists(),
            "{shot}"
        );
    }
}

/// Followers named in six scripts, newest first: Latin (stored decomposed, NFD), Cyrillic,
/// Hebrew, Greek drawn; Chinese and Arabic (which the cards' font and rasteriser cannot draw
/// or join) shown as "a new follower", never as boxes.
const SCRIPT_NAMES: [&str; 6] = [
    "Antonin Dvor\u{30C}a\u{301}k",
    "Олена Шевченко",
    "דנה כהן",
    "Ἀλέξανδρος",
    "王芳",
    "أحمد",
];

/// A German reader whose six picks carry names in six scripts, opened in headless Chromium
/// at a high-density screen's pixel ratio (tests/browser/open-cards.mjs): every card is
/// drawn at twice its shown size, speaks German, and is the card drawn for that name; the
/// screenshot is docs/open-time-email-scripts.png's (MAILFLOW_SCREENSHOT_DIR=docs).
#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_shows_cards_in_every_script_in_the_readers_language() {
    use mailflow::domain::open_content::{card, Language};
    mailflow_tests::browser_dir();
    let mut env = test_env("open-content-scripts", |o| {
        o.parameters.insert("PickSlots".into(), "6".into());
    })
    .await
    .unwrap();
    let campaign = Campaign::from_id(W47, None).unwrap();
    env.seed(5, &campaign).await.unwrap();
    let reader = ObjectId::new();
    let users = env.db.collection::<Document>("users");
    users
        .insert_one(doc! {"_id": reader, "email": format!("leser@{}", env.domain), "name": "Jürgen", "subscribed": true, "locale": "de-DE"})
        .await
        .unwrap();
    let since = campaign.window.since.unix_timestamp();
    for (i, name) in SCRIPT_NAMES.iter().enumerate() {
        let id = format!("script-{i}");
        users
            .insert_one(doc! {"_id": &id, "email": format!("{id}@elsewhere.example"), "name": *name, "subscribed": true})
            .await
            .unwrap();
        // Newest first: the first name is the first pick.
        let at = DateTime::from_millis((since + (100 - i as i64) * 3600) * 1000);
        env.db
            .collection::<Document>("follows")
            .insert_one(doc! {"followerId": &id, "followeeId": reader, "createdAt": at})
            .await
            .unwrap();
    }
    let open_content = mailflow_local::pipeline::serve_open_content(
        &env.stack,
        0,
        Arc::new(mailflow::ports::SystemClock),
    )
    .await
    .unwrap();
    env.stack
        .set_function_url(names::OPEN_CONTENT, open_content.url());
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    pipeline
        .run(json!({"campaignId": W47}), Duration::from_secs(600))
        .await
        .unwrap();
    let sent = env.sent().await.unwrap();
    let html = sent[&format!("leser@{}", env.domain)][0]
        .html
        .clone()
        .unwrap();
    assert!(html.contains("Menschen, denen du zurückfolgen könntest"));

    let seen = mailflow_tests::browse(
        "open-cards.mjs",
        &env.name,
        &html,
        &["--shot", "open-time-email-scripts"],
    )
    .await;
    let cards: Vec<&Value> = seen["images"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["src"].as_str().unwrap().contains("/pick?t="))
        .collect();
    assert_eq!(cards.len(), 6, "{seen}");
    let alts: Vec<&str> = cards.iter().map(|c| c["alt"].as_str().unwrap()).collect();
    assert_eq!(
        alts.last(),
        Some(&"Vorschlag zum Zurückfolgen 6"),
        "{alts:?}"
    );
    for c in &cards {
        // Drawn at twice the size the email shows.
        assert_eq!(
            (c["width"].as_u64(), c["height"].as_u64()),
            (Some(360), Some(240)),
            "{c}"
        );
        // Shown 120 high and, in rows of three, near its width (the column's width caps it
        // a little below 180 in a 600 px email); six in one row were 75 wide.
        assert_eq!(c["shownHeight"].as_u64(), Some(120), "{c}");
        let shown = c["shownWidth"].as_u64().unwrap();
        assert!((160..=180).contains(&shown), "{c}");
    }
    // Each card is the one drawn for its pick's name, in German; the names the font cannot
    // draw get German's "a new follower" card.
    let picks = frozen(&env, &format!("oid:{}", reader.to_hex())).await;
    let names: Vec<Option<&str>> = picks.items.iter().map(|p| p.name.as_deref()).collect();
    assert_eq!(names, SCRIPT_NAMES.map(Some), "{picks:?}");
    for (c, pick) in cards.iter().zip(&picks.items) {
        let got = get(c["src"].as_str().unwrap(), CHROME).await;
        assert_eq!(got.status, 200);
        let drawn = card::pick_card(&pick.id, pick.name.as_deref(), Language::De);
        assert!(got.body == drawn.bytes, "{:?}", pick.name);
        let english = card::pick_card(&pick.id, pick.name.as_deref(), Language::En);
        assert!(got.body != english.bytes, "{:?}", pick.name);
    }
    for (i, undrawn) in [(4, "王芳"), (5, "أحمد")] {
        let neutral = card::pick_card(&picks.items[i].id, None, Language::De);
        let named = card::pick_card(&picks.items[i].id, Some(undrawn), Language::De);
        assert!(named == neutral, "{undrawn}");
    }
    assert!(mailflow_tests::screenshot_dir()
        .join("open-time-email-scripts.png")
        .exists());
}

/// Every item of the stack's open-content table in which `user` appears (in a key or a value).
async fn items_naming(
    env: &TestEnv,
    user: &str,
) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let table = env.stack.table_name(names::OPEN_CONTENT_TABLE).unwrap();
    let mut found = Vec::new();
    let mut start = None;
    loop {
        let page = env
            .dynamo()
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            if format!("{item:?}").contains(user) {
                found.push(item.clone());
            }
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return found;
        }
    }
}

/// A MongoDB that accepts connections and never answers (the driver would wait 30 s to
/// select it, past the function's 10 s timeout): its URI.
async fn hung_mongodb() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("mongodb://127.0.0.1:{port}/")
}

/// The release wiring (`functions/open-content`, under our Runtime API) whose MongoDB hangs:
/// it starts, and serves a static image, the frozen card of an opened email, its badge and
/// its link as usual; a first open gets the fallback. Nothing per recipient is logged.
#[tokio::test(flavor = "multi_thread")]
async fn a_cold_start_without_mongodb_serves_what_needs_none() {
    use mailflow::domain::open_content::{Pick, SlotUrls};
    use mailflow::ports::OpenContentStore;
    use mailflow_local::function_host::{FunctionProcess, Outcome};
    let env = test_env("open-content-no-mongodb", |_| {}).await.unwrap();
    let campaign = Campaign::from_id(W47, None).unwrap();
    let mut function_env = env.stack.env(names::OPEN_CONTENT).unwrap();
    let sealer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap()
    .slot_sealer();
    // "reader-77" opened its email before MongoDB hung: its picks are frozen.
    let table = mailflow::adapters::open_content::OpenContentTable::new(
        env.dynamo(),
        env.stack.table_name(names::OPEN_CONTENT_TABLE).unwrap(),
    );
    let picks = Picks {
        items: vec![Pick {
            id: "picked-1".into(),
            name: Some("Runtime Pick".into()),
        }],
        fallback: false,
        frozen_at_ms: 0,
    };
    let email = mailflow::domain::ledger::SendKey::new("reader-77", campaign.id.clone());
    table.freeze(&email, &picks).await.unwrap();
    let opened = SlotUrls::for_email(
        &sealer,
        "https://o.example/",
        &campaign.id,
        "reader-77",
        mailflow::domain::open_content::Language::En,
        3,
    );
    let unopened = SlotUrls::for_email(
        &sealer,
        "https://o.example/",
        &campaign.id,
        "first-88",
        mailflow::domain::open_content::Language::En,
        3,
    );

    function_env.remove(mailflow::config::var::MONGODB_URI_SECRET_ID);
    function_env.insert("MONGODB_URI".into(), hung_mongodb().await);
    let sample: Value = serde_json::from_str(
        &std::fs::read_to_string(mailctl::repo_root().join("infra/events/open-content-pick.json"))
            .unwrap(),
    )
    .unwrap();
    let event = |url: &str| {
        let rest = url.strip_prefix("https://o.example").unwrap();
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut e = sample.clone();
        e["rawPath"] = path.into();
        e["requestContext"]["http"]["path"] = path.into();
        e["rawQueryString"] = query.into();
        e
    };
    let template =
        mailflow_local::template::Template::load(&mailctl::repo_root().join("template.yaml"))
            .unwrap();
    let spec = template.function(names::OPEN_CONTENT).unwrap();
    let process = FunctionProcess::spawn(
        names::OPEN_CONTENT,
        &mailflow_tests::binary("open-content"),
        &function_env,
        Duration::from_secs(spec.timeout.into()),
        spec.memory_size,
    )
    .await
    .unwrap();
    let mut answers = Vec::new();
    for url in [
        "https://o.example/static/popular.png",
        opened[0].image.as_str(),
        opened[0].badge.as_str(),
        opened[0].link.as_str(),
        unopened[0].image.as_str(),
    ] {
        answers.push(process.invoke(event(url)).await);
    }
    let logs = process.finish().await.lines.join("\n");
    let answers: Vec<&Value> = answers
        .iter()
        .map(|o| match o {
            Outcome::Response(v) => v,
            other => panic!("{other:?}; logs: {logs}"),
        })
        .collect();
    let status = |i: usize| answers[i]["statusCode"].as_u64();
    assert_eq!(status(0), Some(200), "the static image; logs: {logs}");
    assert_eq!(status(1), Some(200), "the frozen card");
    assert_eq!(
        answers[1]["headers"]["cache-control"],
        "private, max-age=31536000, immutable"
    );
    assert_eq!(status(2), Some(307), "the badge");
    assert_eq!(status(3), Some(307), "the link");
    let template = &function_env["PROFILE_URL_TEMPLATE"];
    assert_eq!(
        answers[3]["headers"]["location"],
        template.replace("{id}", "picked-1").as_str()
    );
    assert_eq!(status(4), Some(200), "a first open: the fallback card");
    assert!(
        logs.contains("MongoDB did not answer the index check"),
        "{logs}"
    );
    // TrackOpensAndClicks is off: no recipient in any line.
    for user in ["reader-77", "first-88"] {
        assert!(!logs.contains(user), "{user} in the logs: {logs}");
    }
}

/// The picks' two follows queries are index scans, each on its own index, as they run (no
/// hint: the planner picks them).
#[tokio::test(flavor = "multi_thread")]
async fn the_picks_read_through_indexes() {
    use mailflow::adapters::mongo::FOLLOW_BACK_INDEX;
    use mailflow::adapters::picks::{followed_back, newest_follows};
    let env = test_env("picks-explain", |_| {}).await.unwrap();
    env.seed(50, &Campaign::from_id(W47, None).unwrap())
        .await
        .unwrap();
    let me = mongodb::bson::Bson::String("u0000010".into());
    let (filter, sort) = newest_follows(&me);
    let candidates = ["u0000001", "u0000002"].map(|u| mongodb::bson::Bson::String(u.into()));
    for (find, index) in [
        (
            doc! {"find": "follows", "filter": filter, "sort": sort, "limit": 50,
            "hint": mailflow::adapters::mongo::FOLLOWS_INDEX},
            mailflow::adapters::mongo::FOLLOWS_INDEX,
        ),
        (
            doc! {"find": "follows", "filter": followed_back(&me, &candidates)},
            FOLLOW_BACK_INDEX,
        ),
    ] {
        let plan = env.winning_plan(find).await.unwrap();
        assert!(
            plan.contains("IXSCAN") && !plan.contains("COLLSCAN"),
            "plan: {plan}"
        );
        assert!(plan.contains(index), "plan: {plan}");
    }
}
