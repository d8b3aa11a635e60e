//! Being a good sender, against the local stack: one-click unsubscribe over real HTTP
//! leaving the campaign's topic (good, forged, altered and other users' tokens), campaigns
//! of each topic reaching exactly their audience, SES events (bounces, complaints,
//! deliveries, opens, clicks; twice, out of order, malformed) through the SesEvents queue,
//! and the next campaign leaving out whoever unsubscribed or was suppressed.

use mailflow::adapters::sends::SendsLedger;
use mailflow::adapters::ses::SesMailer;
use mailflow::domain::campaign::{Campaign, CampaignId};
use mailflow::domain::ledger::{epoch_ms, Claim, Engagement, SendKey, SendStatus};
use mailflow::ports::SendLedger;
use mailflow_local::http;
use mailflow_local::names;
use mailflow_local::pipeline::{LocalPipeline, PipelineOptions};
use mailflow_local::seed::SeedReport;
use mailflow_tests::{ses, test_env, TestEnv};
use mongodb::bson::{bson, doc, Bson, Document};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const W46: &str = "weekly-2026-W46";

fn campaign() -> Campaign {
    Campaign::from_id(W46, None).unwrap()
}

/// The same window again under another id: the campaign after the changes.
fn next_campaign(id: &str) -> Value {
    let window = campaign().window;
    let rfc = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    json!({"campaignId": id, "since": rfc(window.since), "until": rfc(window.until)})
}

async fn user(env: &TestEnv, id: &str) -> Document {
    env.db
        .collection::<Document>("users")
        .find_one(doc! {"_id": id})
        .await
        .unwrap()
        .unwrap()
}

/// Seeds 60 users and sends them campaign W46 through the local pipeline.
async fn first_campaign(env: &TestEnv) -> (SeedReport, LocalPipeline<SesMailer>) {
    let seeded = env.seed(60, &campaign()).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    pipeline
        .run(json!({"campaignId": W46}), Duration::from_secs(600))
        .await
        .unwrap();
    (seeded, pipeline)
}

/// Emails each address got so far, from the SES emulator's record.
async fn emails(env: &TestEnv) -> BTreeMap<String, usize> {
    env.sent()
        .await
        .unwrap()
        .into_iter()
        .map(|(to, m)| (to, m.len()))
        .collect()
}

/// `mailctl <args> --prefix <env's> --json`'s JSON (its last line).
fn mailctl_json(env: &TestEnv, args: &[&str]) -> Value {
    let out = std::process::Command::new(mailflow_tests::binary("mailctl"))
        .args(args)
        .args(["--prefix", &env.stack.prefix, "--json"])
        .env("MONGODB_DATABASE", env.db.name())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// A topic choice in a user's document: (in, via, campaign).
fn choice(user: &Document, topic: &str) -> Option<(bool, String, String)> {
    let c = user.get_document("topics").ok()?.get_document(topic).ok()?;
    Some((
        c.get_bool("subscribed").ok()?,
        c.get_str("via").ok()?.to_owned(),
        c.get_str("campaignId").ok()?.to_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_click_leaves_the_campaigns_topic_and_only_that_topics_campaigns_skip_them() {
    let mut env = test_env("unsubscribe", |_| {}).await.unwrap();
    let server = env.serve_unsubscribe().await.unwrap();
    let (seeded, pipeline) = first_campaign(&env).await;
    let sent = env.sent().await.unwrap();
    let deliverable: Vec<&String> = seeded.deliverable().map(|(u, _)| u).collect();
    let (a, b) = (deliverable[0].as_str(), deliverable[1].as_str());
    let link = |user: &str| {
        let email = &sent[&seeded.addresses[user]][0];
        let header = email.header("List-Unsubscribe").unwrap();
        header[1..header.len() - 1].to_owned()
    };
    let (link_a, link_b) = (link(a), link(b));
    assert!(link_a.starts_with(server.url()), "{link_a}");
    let unchanged =
        |u: &Document| u.get_bool("subscribed").ok() == Some(true) && !u.contains_key("topics");

    // The links in the body (GETs) show the preference centre: scanners change nothing.
    let leave_page = http::request(&format!("{link_b}&leave=1"), "GET", &[], b"")
        .await
        .unwrap();
    assert_eq!(leave_page.status, 200);
    let html = leave_page.text();
    assert!(
        html.contains("Stop “Weekly digest of your new followers”?")
            && html.contains("name=\"topic\" value=\"product-news\" checked"),
        "{html}"
    );
    assert_eq!(leave_page.header("cache-control"), Some("no-store"));
    assert!(unchanged(&user(&env, b).await));

    // The mail client's one-click POST (RFC 8058) leaves the digest, and only it, once.
    let one_click = |url: String| async move {
        http::request(
            &url,
            "POST",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            b"List-Unsubscribe=One-Click",
        )
        .await
        .unwrap()
    };
    let done = one_click(link_a.clone()).await;
    assert_eq!(done.status, 200);
    assert!(done
        .text()
        .contains("You are unsubscribed from “Weekly digest of your new followers”"));
    let after = user(&env, a).await;
    assert_eq!(
        after.get_bool("subscribed").ok(),
        Some(true),
        "still subscribed"
    );
    assert_eq!(
        choice(&after, "digest"),
        Some((false, "one-click".into(), W46.into()))
    );
    assert_eq!(choice(&after, "product-news"), None);
    let at = after
        .get_document("topics")
        .unwrap()
        .get_document("digest")
        .unwrap()
        .get_datetime("at")
        .unwrap()
        .to_owned();
    assert_eq!(one_click(link_a.clone()).await.status, 200, "idempotent");
    let again = user(&env, a).await;
    assert_eq!(
        again
            .get_document("topics")
            .unwrap()
            .get_document("digest")
            .unwrap()
            .get_datetime("at")
            .unwrap(),
        &at,
        "the first time is kept"
    );
    assert!(env.records(W46).await.unwrap()[a]
        .engagement
        .contains_key(&Engagement::Unsubscribed));

    // Tokens that are not b's own, signed by this stack: refused, and b stays as they were.
    let token = |l: &str| l.split_once("token=").unwrap().1.to_owned();
    let (token_a, token_b) = (token(&link_a), token(&link_b));
    let (payload_b, signature_b) = token_b.split_once('.').unwrap();
    let signature_a = token_a.split_once('.').unwrap().1;
    let mut altered = signature_b.to_owned();
    altered.replace_range(0..1, if altered.starts_with('A') { "B" } else { "A" });
    let forged = mailflow::domain::unsubscribe_link::Signer::new(&"f".repeat(40), "weekly-digest")
        .unwrap()
        .token(&campaign().id, &campaign().topic, b);
    let base = server.url();
    for (case, token, status) in [
        (
            "b's payload, a's signature",
            format!("{payload_b}.{signature_a}"),
            403,
        ),
        ("b's token, altered", format!("{payload_b}.{altered}"), 403),
        ("signed with another key", forged, 403),
        ("not a token", "garbage".to_owned(), 400),
        ("no token", String::new(), 400),
    ] {
        let response = one_click(format!("{base}?token={token}")).await;
        assert_eq!(response.status, status, "{case}: {}", response.text());
        assert!(
            response.text().contains("This link does not work"),
            "{case}"
        );
        assert!(unchanged(&user(&env, b).await), "{case}");
    }
    let put = http::request(&link_b, "PUT", &[], b"").await.unwrap();
    assert_eq!(put.status, 405);
    assert!(unchanged(&user(&env, b).await));
    // A form with a field that is not a topic (here: someone else's id) changes nothing.
    let form = |body: String| {
        let link = link_b.clone();
        async move {
            http::request(
                &link,
                "POST",
                &[("Content-Type", "application/x-www-form-urlencoded")],
                body.as_bytes(),
            )
            .await
            .unwrap()
        }
    };
    let smuggled = form(format!("action=save&topic=tips&user={a}")).await;
    assert_eq!(smuggled.status, 400, "{}", smuggled.text());
    assert!(smuggled.text().contains("Nothing was changed"));
    let unknown = form("action=save&topic=newsletter".into()).await;
    assert_eq!(unknown.status, 400);
    assert!(unchanged(&user(&env, b).await));
    assert_eq!(choice(&user(&env, a).await, "tips"), None);
    // The token of a user deleted since: one page saying so, nothing written for them.
    let gone = deliverable[2].as_str();
    let link_gone = link(gone);
    env.db
        .collection::<Document>("users")
        .delete_one(doc! {"_id": gone})
        .await
        .unwrap();
    for (method, body) in [
        ("GET", &b""[..]),
        ("POST", &b"List-Unsubscribe=One-Click"[..]),
    ] {
        let page = http::request(&link_gone, method, &[], body).await.unwrap();
        assert_eq!(page.status, 404, "{method}: {}", page.text());
        assert!(page.text().contains("We could not find your subscription"));
    }
    let users = env.db.collection::<Document>("users");
    assert_eq!(users.count_documents(doc! {"_id": gone}).await.unwrap(), 0);

    // What the next digest would do, then does: a is left out as having left the topic.
    let next = next_campaign("after-unsubscribe");
    let window = |k: &str| next[k].as_str().unwrap().to_owned();
    let (since, until) = (window("since"), window("until"));
    let plan = mailctl_json(
        &env,
        &[
            "plan",
            "--campaign",
            "after-unsubscribe",
            "--since",
            &since,
            "--until",
            &until,
        ],
    );
    assert_eq!(plan["topic"], "digest", "{plan}");
    assert_eq!(plan["excluded"]["leftTopic"], 1, "{plan}");
    let unsubscribed_with_followers = plan["excluded"]["unsubscribed"].as_u64().unwrap();
    assert!(
        unsubscribed_with_followers > 0,
        "the seed unsubscribes some: {plan}"
    );
    pipeline
        .run(next.clone(), Duration::from_secs(600))
        .await
        .unwrap();
    let counts = emails(&env).await;
    assert_eq!(counts[&seeded.addresses[a]], 1, "a left the digest");
    assert_eq!(counts[&seeded.addresses[b]], 2);
    let status = mailctl_json(&env, &["status", "--campaign", "after-unsubscribe"]);
    assert_eq!(status["topic"], "digest", "{status}");
    assert_eq!(status["excluded"], plan["excluded"], "{status}");

    // Product news is another topic: a still gets it.
    let mut news = next_campaign("news-2026-11");
    news["topic"] = "product-news".into();
    pipeline.run(news, Duration::from_secs(600)).await.unwrap();
    let counts = emails(&env).await;
    assert_eq!(
        counts[&seeded.addresses[a]], 2,
        "a still receives product news"
    );
    assert_eq!(counts[&seeded.addresses[b]], 3);
    // Its footer names product news, in a's language.
    let labels = &mailflow::domain::topics::Topics::builtin()
        .get("product-news")
        .unwrap()
        .label;
    let news_email = env.sent().await.unwrap()[&seeded.addresses[a]]
        .iter()
        .any(|m| {
            m.text
                .as_deref()
                .is_some_and(|t| labels.values().any(|label| t.contains(label.as_str())))
        });
    assert!(news_email, "the product news email names its topic");
    let status = mailctl_json(&env, &["status", "--campaign", "news-2026-11"]);
    assert_eq!(status["topic"], "product-news");
    assert_eq!(status["excluded"]["leftTopic"], 0, "{status}");

    // Every document shape the audience accepts can leave a topic: `topics` null, a
    // string, an array (written by another tool) used to fail the one-click with a 503 and
    // the mail client never retries. The choice is written; an odd value is kept aside.
    // (The two arrays: MongoDB's `$type` query would match them by their elements.)
    let shapes = [
        Bson::Null,
        Bson::String("digest".into()),
        bson!([1, 2]),
        bson!([{"digest": {"subscribed": true}}]),
        bson!([null]),
    ];
    for (n, odd) in shapes.into_iter().enumerate() {
        let who = deliverable[3 + n].as_str();
        users
            .update_one(doc! {"_id": who}, doc! {"$set": {"topics": odd.clone()}})
            .await
            .unwrap();
        let done = one_click(link(who)).await;
        assert_eq!(done.status, 200, "topics {odd:?}: {}", done.text());
        // Like any other reader's: the same answer, the choice with how and when, the
        // engagement on the send record, and a second click that changes nothing.
        assert!(
            done.text()
                .contains("You are unsubscribed from “Weekly digest of your new followers”"),
            "topics {odd:?}: {}",
            done.text()
        );
        let after = user(&env, who).await;
        assert_eq!(
            choice(&after, "digest"),
            Some((false, "one-click".into(), W46.into())),
            "topics {odd:?}: {after:?}"
        );
        assert_eq!(choice(&after, "product-news"), None, "{after:?}");
        assert_eq!(after.get_bool("subscribed").ok(), Some(true), "{after:?}");
        let aside = (odd != Bson::Null).then_some(&odd);
        assert_eq!(after.get("topicsUnreadable"), aside, "{after:?}");
        assert!(
            env.records(W46).await.unwrap()[who]
                .engagement
                .contains_key(&Engagement::Unsubscribed),
            "topics {odd:?}"
        );
        assert_eq!(one_click(link(who)).await.status, 200, "topics {odd:?}");
        assert_eq!(user(&env, who).await, after, "topics {odd:?}: idempotent");
    }
    // And the page's save, over a `topics` that is a number: what was ticked is written, the
    // topics left as they were stay unreadable (not sent), not their defaults.
    let who = deliverable[8].as_str();
    users
        .update_one(doc! {"_id": who}, doc! {"$set": {"topics": 7}})
        .await
        .unwrap();
    let saved = http::request(
        &link(who),
        "POST",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"action=save&topic=product-news",
    )
    .await
    .unwrap();
    assert_eq!(saved.status, 200, "{}", saved.text());
    let after = user(&env, who).await;
    assert_eq!(
        choice(&after, "product-news").map(|c| c.0),
        Some(true),
        "{after:?}"
    );
    assert_eq!(after.get("topicsUnreadable"), Some(&Bson::Int32(7)));

    // An unknown topic: GetUsers refuses the run, naming the topics there are.
    let mut unknown = next_campaign("newsletter-1");
    unknown["topic"] = "newsletter".into();
    let err = pipeline
        .run(unknown, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains(
            "there is no topic \"newsletter\": the topics are digest, product-news, tips"
        ),
        "{err:#}"
    );
}

/// An SES event as EventBridge puts it on the SesEvents queue, about `user`'s W46 email.
fn ses_event(kind: &str, user: Option<&str>, extra: Value, message_id: &str) -> String {
    mailflow_local::ses_event_source::event(kind, user.map(|u| (W46, u)), message_id, extra)
}

#[tokio::test(flavor = "multi_thread")]
async fn ses_events_suppress_reconcile_and_count_even_twice_and_out_of_order() {
    let env = test_env("ses-events", |_| {}).await.unwrap();
    let (seeded, pipeline) = first_campaign(&env).await;
    let deliverable: Vec<&str> = seeded.deliverable().map(|(u, _)| u.as_str()).collect();
    let (hard, complaint, soft, engaged) = (
        deliverable[0],
        deliverable[1],
        deliverable[2],
        deliverable[3],
    );

    // Two sends whose attempts died after SES accepted, before SENT (the crash window).
    let ledger = SendsLedger::new(
        env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        90,
    );
    let now = SystemTime::now();
    for crashed in ["u-crashed-1", "u-crashed-2"] {
        let claim = Claim {
            key: SendKey::new(crashed, CampaignId::parse(W46).unwrap()),
            token: "a-dead-attempt".into(),
            started_at_ms: epoch_ms(now),
            lease_until_ms: epoch_ms(now + Duration::from_secs(300)),
            due: None,
            deadline_ms: None,
            variant: None,
            zone: None,
        };
        ledger.claim(&claim, Default::default()).await.unwrap();
    }

    let permanent = json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}});
    let events = [
        ses_event("Bounce", Some(hard), permanent.clone(), "m-hard"),
        ses_event("Bounce", Some(hard), permanent, "m-hard"), // SES repeats itself
        ses_event(
            "Complaint",
            Some(complaint),
            json!({"complaint": {"complaintFeedbackType": "abuse"}}),
            "m-complaint",
        ),
        ses_event(
            "Bounce",
            Some(soft),
            json!({"bounce": {"bounceType": "Transient", "bounceSubType": "MailboxFull"}}),
            "m-soft",
        ),
        // Out of order: opened and clicked before it is delivered, delivered twice.
        ses_event(
            "Open",
            Some(engaged),
            json!({"open": {"timestamp": "2026-11-16T10:00:00Z"}}),
            "m-engaged",
        ),
        ses_event(
            "Click",
            Some(engaged),
            json!({"click": {"link": "https://example.com"}}),
            "m-engaged",
        ),
        ses_event(
            "Delivery",
            Some(engaged),
            json!({"delivery": {}}),
            "m-engaged",
        ),
        ses_event(
            "Delivery",
            Some(engaged),
            json!({"delivery": {}}),
            "m-engaged",
        ),
        ses_event("DeliveryDelay", Some(engaged), json!({}), "m-engaged"),
        // SES took what the ledger never recorded: REJECT (twice) and DELIVERY reconcile.
        ses_event(
            "Reject",
            Some("u-crashed-1"),
            json!({"reject": {}}),
            "ses-id-1",
        ),
        ses_event(
            "Reject",
            Some("u-crashed-1"),
            json!({"reject": {}}),
            "ses-id-1",
        ),
        ses_event(
            "Delivery",
            Some("u-crashed-2"),
            json!({"delivery": {}}),
            "ses-id-2",
        ),
        // Not a mailflow email.
        ses_event("Send", None, json!({"send": {}}), "m-other"),
    ];
    env.deliver_ses_events(&pipeline, &events).await.unwrap();
    assert_eq!(env.depth(names::SES_EVENTS_DLQ).await.unwrap(), 0);

    // Not an event at all: it fails alone and reaches the DLQ. A one-second visibility for
    // it only, so it gets there in seconds: under load a batch of the events above can take
    // longer than that, and would come back and be counted as received again.
    env.sqs()
        .set_queue_attributes()
        .queue_url(env.stack.queue_url(names::SES_EVENTS_QUEUE).unwrap())
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "1",
        )
        .send()
        .await
        .unwrap();
    let malformed = ["{\"detail\": {\"eventType\": \"Bounce\"".to_owned()];
    env.deliver_ses_events(&pipeline, &malformed).await.unwrap();
    assert_eq!(env.depth(names::SES_EVENTS_DLQ).await.unwrap(), 1);
    let totals = pipeline.totals.lock().unwrap().ses_events.clone();
    assert_eq!(totals.suppressed, 2, "{totals:?}");
    assert_eq!(totals.reconciled, 2, "{totals:?}");

    let suppression = |u: Document| {
        u.get_document("suppression").ok().map(|s| {
            (
                s.get_str("reason").unwrap().to_owned(),
                s.get_str("detail").unwrap().to_owned(),
            )
        })
    };
    assert_eq!(
        suppression(user(&env, hard).await),
        Some(("bounce".into(), "Permanent/General".into()))
    );
    assert_eq!(
        suppression(user(&env, complaint).await),
        Some(("complaint".into(), "abuse".into()))
    );
    assert_eq!(
        suppression(user(&env, soft).await),
        None,
        "transient: counted only"
    );
    assert_eq!(suppression(user(&env, engaged).await), None);

    let records = env.records(W46).await.unwrap();
    let has = |u: &str, e: Engagement| records[u].engagement.contains_key(&e);
    assert!(has(hard, Engagement::Bounced) && has(complaint, Engagement::Complained));
    assert!(has(soft, Engagement::SoftBounced) && !has(soft, Engagement::Bounced));
    for e in [
        Engagement::Delivered,
        Engagement::Opened,
        Engagement::Clicked,
    ] {
        assert!(has(engaged, e), "{e:?}");
    }
    for (crashed, id) in [("u-crashed-1", "ses-id-1"), ("u-crashed-2", "ses-id-2")] {
        let r = &records[crashed];
        assert_eq!(r.status, Some(SendStatus::Sent), "{crashed}");
        assert_eq!(r.ses_message_id.as_deref(), Some(id));
        assert!(r.reconciled_at_ms.is_some());
    }

    // What the operator sees: each user counted once, however often SES repeated itself.
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    let status = mailctl::ops::status(&env.stack.sdk, &target, W46)
        .await
        .unwrap();
    let expected = [
        ("delivered", 2),
        ("bounced", 1),
        ("softBounced", 1),
        ("complained", 1),
        ("opened", 1),
        ("clicked", 1),
        ("unsubscribed", 0),
        // The events name no user agent: nobody is known to be a person.
        ("humanOpened", 0),
        ("humanClicked", 0),
    ];
    assert_eq!(status.engagement, BTreeMap::from(expected));
    assert_eq!(status.reconciled, 2);

    // The next campaign leaves out the suppressed addresses, and only them.
    pipeline
        .run(next_campaign("after-events"), Duration::from_secs(600))
        .await
        .unwrap();
    let counts = emails(&env).await;
    let got = |u: &str| counts[&seeded.addresses[u]];
    assert_eq!((got(hard), got(complaint)), (1, 1), "suppressed");
    assert_eq!((got(soft), got(engaged)), (2, 2));
}

/// The orders example's campaign: its customers are in `customers`, ObjectId ids, their
/// standing at nested paths (`TestEnv::pin_customers_definition`).
const ORDERS: &str = "orders-2026-W46";

/// A campaign that runs a definition keeps its people where the definition's `[recipients]`
/// says: the one-click, the preference centre (shown in the customer's `prefs.lang`) and a
/// permanent bounce change the customer's document at those paths and nothing in `users`,
/// even for a user there with the same id. A campaign recorded without a definition still
/// works in `users`.
#[tokio::test(flavor = "multi_thread")]
async fn a_definitions_campaign_changes_its_customers_where_its_recipients_say() {
    use mailflow::domain::topics::TopicId;
    use mongodb::bson::oid::ObjectId;
    let mut env = test_env("recipients", |_| {}).await.unwrap();
    let server = env.serve_unsubscribe().await.unwrap();
    let orders = Campaign::from_id(ORDERS, Some(campaign().window))
        .unwrap()
        .with_topic(TopicId::parse("product-news").unwrap());
    env.pin_customers_definition(&orders).await.unwrap();
    // The built-in digest's campaign, recorded as its first run records it: no definition.
    let stack = mailctl::definition_store::Stack::connect(&env.stack.sdk, Some(&env.stack.prefix))
        .await
        .unwrap();
    mailflow::ports::CampaignStates::register(
        &stack.campaigns,
        &campaign(),
        &Default::default(),
        None,
        None,
        1,
    )
    .await
    .unwrap();

    let (ada, bob, carol, dan) = (
        ObjectId::new(),
        ObjectId::new(),
        ObjectId::new(),
        ObjectId::new(),
    );
    let customer = |id: ObjectId, name: &str, prefs: Document| {
        doc! {"_id": id, "contact": {"email": format!("{name}@{}", env.domain), "name": name},
        "signedUpAt": mongodb::bson::DateTime::from_millis(0), "prefs": prefs}
    };
    let customers = env.db.collection::<Document>("customers");
    customers
        .insert_many([
            customer(ada, "ada", doc! {"lang": "fr", "subscribed": true}),
            // `topics` written by another tool as a string: moved aside beside it.
            customer(bob, "bob", doc! {"subscribed": true, "topics": "legacy"}),
            customer(carol, "carol", doc! {"subscribed": true}),
            {
                // A `flags` that is not a document: no suppression can be written under it.
                let mut dan = customer(dan, "dan", doc! {"subscribed": true});
                dan.insert("flags", "vip");
                dan
            },
        ])
        .await
        .unwrap();
    // In `users`, a person with ada's id: nothing of the campaign's may touch them.
    let users = env.db.collection::<Document>("users");
    let twin = doc! {"_id": ada, "email": "twin@elsewhere.example", "subscribed": true};
    users.insert_one(twin.clone()).await.unwrap();
    users
        .insert_one(doc! {"_id": "u-digest", "email": "d@elsewhere.example", "subscribed": true})
        .await
        .unwrap();

    let function_env = env.stack.env(names::UNSUBSCRIBE).unwrap();
    let signer = mailflow::adapters::secrets::unsubscribe_signer(
        &mailflow::config::UnsubscribeConfig::from_source(&|k: &str| function_env.get(k).cloned())
            .unwrap(),
        &env.stack.sdk,
    )
    .await
    .unwrap();
    let oid = |id: ObjectId| format!("oid:{id}");
    let link = |c: &Campaign, user: &str| {
        let token = signer.token(&c.id, &c.topic, user);
        format!("{}?token={token}", server.url())
    };
    let post = |url: String, body: &'static str| async move {
        http::request(
            &url,
            "POST",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        )
        .await
        .unwrap()
    };
    let customer_doc = |id: ObjectId| {
        let customers = customers.clone();
        async move { customers.find_one(doc! {"_id": id}).await.unwrap().unwrap() }
    };
    let choice_at = |d: &Document, topic: &str| {
        let c = d
            .get_document("prefs")
            .ok()?
            .get_document("topics")
            .ok()?
            .get_document(topic)
            .ok()?;
        Some((
            c.get_bool("subscribed").ok()?,
            c.get_str("via").ok()?.to_owned(),
            c.get_str("campaignId").ok()?.to_owned(),
        ))
    };

    // The one-click leaves product news in ada's customer document, once.
    let done = post(link(&orders, &oid(ada)), "List-Unsubscribe=One-Click").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let after = customer_doc(ada).await;
    assert_eq!(
        choice_at(&after, "product-news"),
        Some((false, "one-click".into(), ORDERS.into())),
        "{after}"
    );
    assert!(!after.contains_key("topics"), "{after}");
    assert_eq!(
        post(link(&orders, &oid(ada)), "List-Unsubscribe=One-Click")
            .await
            .status,
        200
    );
    assert_eq!(customer_doc(ada).await, after, "idempotent");

    // The page, in ada's language (prefs.lang), shows it; a save writes there too.
    let page = http::request(&link(&orders, &oid(ada)), "GET", &[], b"")
        .await
        .unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    let html = page.text();
    assert!(html.contains("<html lang=\"fr\">"), "{html}");
    assert!(
        html.contains("name=\"topic\" value=\"digest\" checked")
            && html.contains("name=\"topic\" value=\"product-news\">")
            && !html.contains("value=\"product-news\" checked"),
        "{html}"
    );
    let saved = post(
        link(&orders, &oid(ada)),
        "action=save&topic=digest&topic=tips",
    )
    .await;
    assert_eq!(saved.status, 200, "{}", saved.text());
    let after = customer_doc(ada).await;
    assert_eq!(
        choice_at(&after, "tips"),
        Some((true, "page".into(), ORDERS.into())),
        "{after}"
    );
    assert_eq!(choice_at(&after, "product-news").map(|c| c.0), Some(false));
    // "Unsubscribe from all": `prefs.subscribed`, and when, beside it.
    let all = post(link(&orders, &oid(ada)), "action=unsubscribe-all").await;
    assert_eq!(all.status, 200, "{}", all.text());
    let prefs = customer_doc(ada)
        .await
        .get_document("prefs")
        .unwrap()
        .clone();
    assert_eq!(prefs.get_bool("subscribed").ok(), Some(false), "{prefs}");
    assert!(prefs.get_datetime("unsubscribedAt").is_ok(), "{prefs}");
    assert_eq!(
        prefs
            .get_document("unsubscribedFrom")
            .unwrap()
            .get_str("campaignId")
            .ok(),
        Some(ORDERS)
    );

    // bob's `prefs.topics` was a string: kept aside beside it, the choice written.
    let done = post(link(&orders, &oid(bob)), "List-Unsubscribe=One-Click").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let after = customer_doc(bob).await;
    assert_eq!(
        choice_at(&after, "product-news").map(|c| c.0),
        Some(false),
        "{after}"
    );
    assert_eq!(
        after
            .get_document("prefs")
            .unwrap()
            .get_str("topicsUnreadable")
            .ok(),
        Some("legacy")
    );

    // A permanent bounce suppresses carol at `flags.suppression`. dan's `flags` is a string:
    // the bounce is decided at once (noted, not retried, never in the DLQ).
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let permanent = json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}});
    let bounce = |campaign: &str, user: &str, id: &str| {
        mailflow_local::ses_event_source::event(
            "Bounce",
            Some((campaign, user)),
            id,
            permanent.clone(),
        )
    };
    let events = [
        bounce(ORDERS, &oid(carol), "m-carol"),
        bounce(ORDERS, &oid(dan), "m-dan"),
        bounce(W46, "u-digest", "m-digest"),
    ];
    env.deliver_ses_events(&pipeline, &events).await.unwrap();
    let totals = pipeline.totals.lock().unwrap().ses_events.clone();
    assert_eq!(
        (totals.suppressed, totals.unsuppressible, totals.failed),
        (2, 1, 0),
        "{totals:?}"
    );
    assert_eq!(env.depth(names::SES_EVENTS_DLQ).await.unwrap(), 0);
    let carol_now = customer_doc(carol).await;
    let suppression = carol_now
        .get_document("flags")
        .unwrap()
        .get_document("suppression")
        .unwrap();
    assert_eq!(suppression.get_str("reason").ok(), Some("bounce"));
    assert_eq!(suppression.get_str("campaignId").ok(), Some(ORDERS));
    assert!(!carol_now.contains_key("suppression"), "{carol_now}");
    assert_eq!(customer_doc(dan).await.get_str("flags").ok(), Some("vip"));

    // Nothing of the campaign's reached `users`; the digest's campaign still works there.
    assert_eq!(
        users.find_one(doc! {"_id": ada}).await.unwrap(),
        Some(twin),
        "ada's twin in users is untouched"
    );
    let done = post(link(&campaign(), "u-digest"), "List-Unsubscribe=One-Click").await;
    assert_eq!(done.status, 200, "{}", done.text());
    let digest_user = user(&env, "u-digest").await;
    assert_eq!(
        choice(&digest_user, "digest"),
        Some((false, "one-click".into(), W46.into()))
    );
    assert_eq!(
        digest_user
            .get_document("suppression")
            .unwrap()
            .get_str("reason")
            .ok(),
        Some("bounce")
    );
    assert_eq!(customers.count_documents(doc! {}).await.unwrap(), 4);
    assert_eq!(
        customers
            .count_documents(doc! {"_id": {"$nin": [ada, bob, carol, dan]}})
            .await
            .unwrap(),
        0
    );
}
