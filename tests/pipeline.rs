//! Pipeline core against the local stack: a 1,000-user campaign end to end, each stage's
//! handling of bad input, and SendEmail's second look at whom an email that waited goes to.
//! The audience's indexes are in `mongo_indexes`, GetUsers' checkpoints in `checkpoints`.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::ledger::SendStatus;
use mailflow::runtime::Invocation;
use mailflow_local::ledger_scan;
use mailflow_local::names;
use mailflow_local::pipeline::PipelineOptions;
use mailflow_tests::{ses, test_env};
use mongodb::bson::{doc, Document};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W46", None).unwrap()
}

fn record(id: &str, body: &str) -> SqsMessage {
    let mut r = SqsMessage::default();
    r.message_id = Some(id.into());
    r.body = Some(body.into());
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn end_to_end_every_eligible_user_gets_exactly_one_correct_email() {
    let env = test_env("e2e", |_| {}).await.unwrap();
    let seeded = env.seed(200, &campaign()).await.unwrap();
    assert!(seeded.unsubscribed > 0 && !seeded.invalid_addresses.is_empty());
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();

    let report = pipeline
        .run(
            serde_json::json!({"campaignId": "weekly-2026-W46"}),
            Duration::from_secs(1200),
        )
        .await
        .unwrap();
    assert_eq!(report.get_users["usersEnqueued"], seeded.audience.len());

    let sent = env.sent().await.unwrap();
    let users = env.db.collection::<Document>("users");
    for (user, count) in seeded.deliverable() {
        let address = &seeded.addresses[user];
        let emails = sent
            .get(address)
            .unwrap_or_else(|| panic!("{user} got no email"));
        assert_eq!(emails.len(), 1, "{user} got {} emails", emails.len());
        let email = &emails[0];
        let subject = email.subject.as_deref().unwrap_or_default();
        // Each user's own language (pt-BR has no templates: the default, English).
        let (greeting, expected_subject) = match seeded.locales[user].as_str() {
            "fr-FR" if *count == 1 => ("Bonjour", "Un nouvel abonné cette semaine".to_owned()),
            "fr-FR" => ("Bonjour", format!("{count} nouveaux abonnés cette semaine")),
            "de" if *count == 1 => ("Hallo", "Diese Woche folgt dir eine neue Person".to_owned()),
            "de" => (
                "Hallo",
                format!("Diese Woche folgen dir {count} neue Personen"),
            ),
            _ if *count == 1 => ("Hi", "You have a new follower this week".to_owned()),
            _ => ("Hi", format!("You have {count} new followers this week")),
        };
        assert_eq!(subject, expected_subject, "{user}");
        let name = users.find_one(doc! {"_id": user}).await.unwrap().unwrap();
        let name = name.get_str("name").unwrap();
        let html = email.html.as_deref().unwrap_or_default();
        let text = email.text.as_deref().unwrap_or_default();
        if name.contains('<') {
            assert!(!html.contains(name), "unescaped name in {user}'s email");
        } else {
            assert!(
                html.contains(&format!("{greeting} {name},")),
                "{user}'s email does not greet them"
            );
        }
        assert!(
            text.contains(&format!("{greeting} {name},")),
            "{user}: {text}"
        );
        // One-click unsubscribe (RFC 8058): the header, and the same link in both parts.
        let link = email
            .header("List-Unsubscribe")
            .and_then(|h| h.strip_prefix('<')?.strip_suffix('>'))
            .unwrap_or_else(|| panic!("{user}'s email has no List-Unsubscribe header"));
        assert_eq!(
            email.header("List-Unsubscribe-Post"),
            Some("List-Unsubscribe=One-Click")
        );
        assert!(
            html.contains(&format!("href=\"{link}\"")),
            "{user}: no link in the HTML"
        );
        assert!(text.contains(link), "{user}: no link in the text");
    }
    // Nobody else got anything: unsubscribed users, users without new followers, bad addresses.
    let deliverable: BTreeSet<&String> = seeded
        .deliverable()
        .map(|(u, _)| &seeded.addresses[u])
        .collect();
    for to in sent.keys() {
        assert!(
            deliverable.contains(to),
            "{to} got an email but is not eligible"
        );
    }
    assert_eq!(sent.len(), deliverable.len());

    // Invalid addresses end FAILED with the reason, acknowledged (nothing in the DLQ).
    let records = ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        "weekly-2026-W46",
    )
    .await
    .unwrap();
    let failed: BTreeMap<&str, &str> = records
        .iter()
        .filter(|r| r.status == Some(SendStatus::Failed))
        .map(|r| {
            (
                r.user_id.as_str(),
                r.last_error.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        failed.keys().copied().collect::<BTreeSet<_>>(),
        seeded
            .invalid_addresses
            .iter()
            .map(String::as_str)
            .collect()
    );
    assert!(failed
        .values()
        .all(|reason| reason.contains("not one RFC 5322 mailbox")));
    for dlq in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq} is not empty");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn create_emails_fails_bad_records_alone_and_skips_unsubscribed_or_vanished_users() {
    let env = test_env("create-bad", |_| {}).await.unwrap();
    let seeded = env.seed(60, &campaign()).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let mut audience = seeded.audience.keys();
    let (good, gone, unsubscribed) = (
        audience.next().unwrap(),
        audience.next().unwrap(),
        audience.next().unwrap(),
    );
    let users = env.db.collection::<Document>("users");
    users.delete_one(doc! {"_id": gone}).await.unwrap();
    users
        .update_one(
            doc! {"_id": unsubscribed},
            doc! {"$set": {"subscribed": false}},
        )
        .await
        .unwrap();

    let body = |user: &str| {
        format!(
            r#"{{"campaignId":"weekly-2026-W46","userId":"{user}","since":"2026-11-09T00:00:00Z","until":"2026-11-16T00:00:00Z"}}"#
        )
    };
    let mut event = SqsEvent::default();
    event.records = vec![
        record("m-good", &body(good)),
        record("m-garbage", "{not json"),
        record("m-gone", &body(gone)),
        record("m-unsubscribed", &body(unsubscribed)),
        record(
            "m-bad-campaign",
            &body(good).replace("weekly-2026-W46", "no spaces allowed"),
        ),
    ];
    let (response, summary) = pipeline.create_emails.handle(event).await;
    let failed: BTreeSet<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, BTreeSet::from(["m-garbage", "m-bad-campaign"]));
    assert_eq!(summary.enqueued, 1);
    assert_eq!(summary.skipped.get("vanished"), Some(&1));
    assert_eq!(summary.skipped.get("unsubscribed"), Some(&1));
    assert_eq!(env.depth(names::EMAILS_QUEUE).await.unwrap(), 1);
}

/// An email that waited an hour since it was rendered goes only to whom still wants it:
/// SendEmail reads the person's standing again, MongoDB's document and the pending one-click
/// leave in the sends table, and records the others SKIPPED with the reason.
#[tokio::test(flavor = "multi_thread")]
async fn send_email_reads_again_the_standing_of_an_email_that_waited() {
    use mailflow::ports::PendingLeaves;
    let env = test_env("standing", |_| {}).await.unwrap();
    let seeded = env.seed(60, &campaign()).await.unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let mut audience = seeded
        .audience
        .keys()
        .filter(|u| !seeded.invalid_addresses.contains(*u));
    let mut next = || audience.next().unwrap().clone();
    let (stays, unsubscribed, left, gone) = (next(), next(), next(), next());
    let users = env.db.collection::<Document>("users");
    users
        .update_one(
            doc! {"_id": &unsubscribed},
            doc! {"$set": {"subscribed": false}},
        )
        .await
        .unwrap();
    users.delete_one(doc! {"_id": &gone}).await.unwrap();
    let sends = env.stack.table_name(names::SENDS_TABLE).unwrap();
    let records = mailflow::adapters::sends::SendRecords::new(env.dynamo(), sends);
    let campaign_id = mailflow::domain::campaign::CampaignId::parse("weekly-2026-W46").unwrap();
    let key = mailflow::domain::ledger::SendKey::new(left.clone(), campaign_id);
    let topic = mailflow::domain::messages::weekly_topic();
    records.record_leave(&key, &topic, 1).await.unwrap();

    let an_hour_ago = time::OffsetDateTime::now_utc().unix_timestamp() * 1000 - 3_600_000;
    let mut event = SqsEvent::default();
    for user in [&stays, &unsubscribed, &left, &gone] {
        let job = serde_json::json!({
            "campaignId": "weekly-2026-W46", "userId": user, "to": seeded.addresses[user],
            "subject": "s", "html": "<p>h</p>", "text": "t", "renderedAt": an_hour_ago,
        });
        event
            .records
            .push(record(&format!("m-{user}"), &job.to_string()));
    }
    let (response, summary) = pipeline.send_email[0]
        .handle(
            event,
            &Invocation::with_timeout("r1", Duration::from_secs(30)),
        )
        .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(summary.sent, 1, "{summary:?}");
    assert_eq!(
        summary.skipped,
        BTreeMap::from([("left_topic", 1), ("unsubscribed", 1), ("vanished", 1)])
    );
    let statuses: BTreeMap<String, Option<SendStatus>> = ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        "weekly-2026-W46",
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.user_id, r.status))
    .collect();
    assert_eq!(statuses[&stays], Some(SendStatus::Sent));
    assert_eq!(statuses[&left], Some(SendStatus::Skipped));
}

/// The same for a campaign that runs a definition: the standing is read where its
/// `[recipients]` says (customers with ObjectId ids, the fields nested), not in `users`,
/// where a person with the same id is still subscribed.
#[tokio::test(flavor = "multi_thread")]
async fn send_email_reads_again_a_definition_campaigns_standing_where_its_recipients_are() {
    use mailflow::domain::topics::TopicId;
    use mongodb::bson::oid::ObjectId;
    const ORDERS: &str = "orders-2026-W46";
    let env = test_env("standing_defs", |_| {}).await.unwrap();
    let orders = Campaign::from_id(ORDERS, Some(campaign().window))
        .unwrap()
        .with_topic(TopicId::parse("product-news").unwrap());
    env.pin_customers_definition(&orders).await.unwrap();
    let (stays, left, unsubscribed, suppressed) = (
        ObjectId::new(),
        ObjectId::new(),
        ObjectId::new(),
        ObjectId::new(),
    );
    let customer = |id: ObjectId, prefs: Document| {
        doc! {"_id": id, "contact": {"email": format!("{id}@{}", env.domain)}, "prefs": prefs}
    };
    env.db
        .collection::<Document>("customers")
        .insert_many([
            customer(stays, doc! {"subscribed": true}),
            customer(
                left,
                doc! {"subscribed": true, "topics": {"product-news": {"subscribed": false}}},
            ),
            customer(unsubscribed, doc! {"subscribed": false}),
            {
                let mut d = customer(suppressed, doc! {"subscribed": true});
                d.insert("flags", doc! {"suppression": {"reason": "bounce"}});
                d
            },
        ])
        .await
        .unwrap();
    // In `users`, everyone with the same ids is subscribed: not what this campaign reads.
    env.db
        .collection::<Document>("users")
        .insert_many(
            [stays, left, unsubscribed, suppressed]
                .map(|id| doc! {"_id": id, "email": "x@elsewhere.example", "subscribed": true}),
        )
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();

    let an_hour_ago = time::OffsetDateTime::now_utc().unix_timestamp() * 1000 - 3_600_000;
    let mut event = SqsEvent::default();
    for user in [stays, left, unsubscribed, suppressed] {
        let job = serde_json::json!({
            "campaignId": ORDERS, "userId": format!("oid:{user}"), "topic": "product-news",
            "to": format!("{user}@{}", env.domain),
            "subject": "s", "html": "<p>h</p>", "text": "t", "renderedAt": an_hour_ago,
        });
        event
            .records
            .push(record(&format!("m-{user}"), &job.to_string()));
    }
    let (response, summary) = pipeline.send_email[0]
        .handle(
            event,
            &Invocation::with_timeout("r1", Duration::from_secs(30)),
        )
        .await;
    assert!(response.batch_item_failures.is_empty(), "{summary:?}");
    assert_eq!(summary.sent, 1, "{summary:?}");
    assert_eq!(
        summary.skipped,
        BTreeMap::from([("left_topic", 1), ("suppressed", 1), ("unsubscribed", 1)])
    );
    let statuses: BTreeMap<String, Option<SendStatus>> = ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        ORDERS,
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.user_id, r.status))
    .collect();
    assert_eq!(statuses[&format!("oid:{stays}")], Some(SendStatus::Sent));
    assert_eq!(statuses[&format!("oid:{left}")], Some(SendStatus::Skipped));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unverified_sender_fails_permanently_without_retry_loops() {
    let env = test_env("unverified", |o| {
        o.parameters.insert(
            "SenderAddress".into(),
            "nobody@unverified.example.org".into(),
        );
    })
    .await
    .unwrap();
    // provision() verified the configured sender; undo that for this test's sender.
    aws_sdk_sesv2::Client::new(&env.stack.sdk)
        .delete_email_identity()
        .email_identity("nobody@unverified.example.org")
        .send()
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let to = format!("someone@{}", env.domain);
    let job = serde_json::json!({"campaignId": "weekly-2026-W46", "userId": "u1", "to": to, "subject": "s", "html": "<p>h</p>", "text": "t"});
    let mut event = SqsEvent::default();
    event.records = vec![record("m1", &job.to_string())];
    let (response, summary) = pipeline.send_email[0]
        .handle(
            event,
            &Invocation::with_timeout("r1", Duration::from_secs(30)),
        )
        .await;
    assert!(
        response.batch_item_failures.is_empty(),
        "a permanent failure is acknowledged"
    );
    assert_eq!(summary.failed, 1);
    let records = ledger_scan::records(
        &env.dynamo(),
        env.stack.table_name(names::SENDS_TABLE).unwrap(),
        "weekly-2026-W46",
    )
    .await
    .unwrap();
    assert_eq!(records[0].status, Some(SendStatus::Failed));
    assert!(records[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("MessageRejected"));
    assert!(env.sent().await.unwrap().is_empty());
}
