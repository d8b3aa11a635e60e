//! The preference centre in a real browser (headless Chromium, tests/browser/preferences.mjs,
//! playwright-core; installed by infra/browser.sh, which infra/test.sh runs), against the
//! local stack: a campaign is sent through the pipeline, the browser opens the recipient's
//! email, follows its "manage all emails" link to the Unsubscribe function, reads the topics,
//! changes one with the keyboard alone (JavaScript off), saves and reads the confirmation;
//! the test then reads MongoDB. The same link with a tampered token, and a phone's screen.
//! Screenshots go to MAILFLOW_SCREENSHOT_DIR (default .local/browser/shots; `docs` refreshes
//! docs/topics.md's).

use mailflow::domain::campaign::Campaign;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use mongodb::bson::{doc, oid::ObjectId, DateTime, Document};
use serde_json::json;
use std::time::Duration;

const W47: &str = "weekly-2026-W47";

#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_changes_a_topic_with_the_keyboard_from_a_sent_emails_link() {
    mailflow_tests::browser_dir();
    let mut env = test_env("preferences-browser", |_| {}).await.unwrap();
    let _unsubscribe = env.serve_unsubscribe().await.unwrap();
    let campaign = Campaign::from_id(W47, None).unwrap();
    // A reader keyed by an ObjectId, from before topics (no `topics` field), with an
    // address RFC 5322 allows but few senders expect.
    let reader = ObjectId::new();
    let address = format!("\"mary.o'neil+news\"@{}", env.domain);
    let at = DateTime::from_millis((campaign.window.since.unix_timestamp() + 3600) * 1000);
    env.db
        .collection::<Document>("users")
        .insert_many([
            doc! {"_id": reader, "email": &address, "name": "Mary O'Neil", "subscribed": true, "locale": "en-IE"},
            doc! {"_id": "fan", "email": "fan@elsewhere.example", "name": "A Fan", "subscribed": true},
        ])
        .await
        .unwrap();
    env.db
        .collection::<Document>("follows")
        .insert_one(doc! {"followerId": "fan", "followeeId": reader, "createdAt": at})
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    pipeline
        .run(json!({"campaignId": W47}), Duration::from_secs(600))
        .await
        .unwrap();
    let sent = env.sent().await.unwrap();
    let email = &sent
        .iter()
        .find(|(to, _)| to.contains("mary.o'neil+news"))
        .unwrap_or_else(|| panic!("no email to the reader: {:?}", sent.keys()))
        .1[0];

    let seen = mailflow_tests::browse(
        "preferences.mjs",
        &env.name,
        email.html.as_deref().unwrap(),
        &["--manage-text", "Manage all emails", "--toggle", "tips"],
    )
    .await;

    // The centre: every topic with its state (digest and product news "in" by default,
    // tips "out"), in the reader's language, without a script.
    let centre = &seen["centre"];
    assert_eq!(centre["lang"], "en", "{seen}");
    assert_eq!(centre["h1"], "Email preferences");
    assert_eq!(
        centre["topics"],
        json!([
            {"id": "digest", "checked": true, "label": "Weekly digest of your new followers"},
            {"id": "product-news", "checked": true, "label": "Product news"},
            {"id": "tips", "checked": false, "label": "Tips and tutorials"},
        ])
    );
    assert_eq!(centre["scripts"], 0);
    // The keyboard reaches everything, in reading order.
    assert_eq!(
        seen["focusOrder"],
        json!([
            "checkbox:digest",
            "checkbox:product-news",
            "checkbox:tips",
            "button:Save preferences",
            "button:Unsubscribe from all emails",
        ])
    );
    assert_eq!(seen["toggledFocused"], true);
    assert_eq!(seen["saveFocused"], "button:Save preferences");
    // The confirmation says what changed; the centre shows it.
    let saved = &seen["saved"];
    assert_eq!(saved["h1"], "Your preferences are saved");
    assert!(
        saved["text"]
            .as_str()
            .unwrap()
            .contains("You will now receive: Tips and tutorials"),
        "{saved}"
    );
    assert_eq!(seen["after"]["topics"][2]["checked"], true, "{seen}");

    // MongoDB: tips is in, from the page, from this campaign's email; nothing else changed.
    let user = env
        .db
        .collection::<Document>("users")
        .find_one(doc! {"_id": reader})
        .await
        .unwrap()
        .unwrap();
    let topics = user.get_document("topics").unwrap();
    let tips = topics.get_document("tips").unwrap();
    assert_eq!(tips.get_bool("subscribed").ok(), Some(true), "{user}");
    assert_eq!(tips.get_str("via").ok(), Some("page"));
    assert_eq!(tips.get_str("campaignId").ok(), Some(W47));
    assert!(tips.get_datetime("at").is_ok());
    assert_eq!(topics.keys().collect::<Vec<_>>(), ["tips"], "{user}");
    assert_eq!(user.get_bool("subscribed").ok(), Some(true));

    // A tampered token: a page that says so and what to do, nothing to change.
    let tampered = &seen["tampered"];
    assert_eq!(tampered["status"], 403);
    assert_eq!(tampered["h1"], "This link does not work");
    assert!(tampered["text"]
        .as_str()
        .unwrap()
        .contains("Use the link in the most recent email"));
    assert_eq!(tampered["topics"], json!([]));

    // Readable: text and buttons at least 4.5:1 (WCAG AA) on the desktop and the phone; on
    // the phone nothing is wider than the screen and every tap target is 44 px or more.
    for (name, page) in [("centre", centre), ("phone", &seen["phone"])] {
        let contrast = page["minContrast"].as_f64().unwrap();
        assert!(contrast >= 4.5, "{name}: contrast {contrast}");
    }
    let phone = &seen["phone"];
    assert!(phone["overflow"].as_f64().unwrap() <= 0.0, "{phone}");
    assert!(
        phone["tapHeights"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h.as_f64().unwrap() >= 44.0),
        "{phone}"
    );
    for shot in [
        "preference-centre",
        "preference-centre-saved",
        "preference-centre-tampered",
        "preference-centre-phone",
    ] {
        assert!(
            mailflow_tests::screenshot_dir()
                .join(format!("{shot}.png"))
                .exists(),
            "{shot}"
        );
    }
}
