//! Pipeline core against the local stack: the audience index, each stage's handling of bad
//! input, GetUsers checkpoints, and a 1,000-user campaign end to end.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use mailflow::adapters::directory::IdType;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::ledger::SendStatus;
use mailflow::domain::user_id::UserId;
use mailflow::runtime::Invocation;
use mailflow::stages::get_users::{Checkpoint, Run};
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
async fn audience_query_is_an_index_scan() {
    let env = test_env("explain", |_| {}).await.unwrap();
    env.seed(50, &campaign()).await.unwrap();
    mailflow::adapters::mongo::create_indexes(&env.db)
        .await
        .unwrap();
    // The bundled digest's audience query, as GetUsers runs it for a weekly campaign.
    let digest = mailflow::ports::LoadedDefinition::bundled().unwrap();
    let topic = mailflow::domain::topics::Topics::builtin()
        .get("digest")
        .unwrap()
        .clone();
    let run = mailflow::adapters::definition::DefinitionRun::new(
        env.db.clone(),
        digest.definition.clone(),
        topic,
        &campaign().window,
        campaign().id.as_str(),
    )
    .unwrap();
    let text = UserId::Text("u0000010".into());
    let object_id = UserId::ObjectId([0x65; 12]);
    for (kind, after) in [
        (IdType::Text, None),
        (IdType::Text, Some(&text)),
        (IdType::ObjectId, None),
        (IdType::ObjectId, Some(&object_id)),
    ] {
        let explain = env
            .db
            .run_command(doc! {
                "explain": {
                    "aggregate": "follows",
                    "pipeline": run.audience_pipeline(kind, after),
                    "cursor": {},
                    "let": run.variables().clone(),
                },
                "verbosity": "queryPlanner",
            })
            .await
            .unwrap()
            .to_string();
        assert!(
            explain.contains("IXSCAN") && !explain.contains("COLLSCAN"),
            "plan: {explain}"
        );
        assert!(
            explain.contains(mailflow::adapters::mongo::FOLLOWS_INDEX),
            "plan: {explain}"
        );
        // The users side of the join: an `_id` range whatever the topic (the audience rule
        // reads the projected fields), so topics add no scan.
        let topic = mailflow::domain::topics::TopicId::parse("product-news").unwrap();
        let plan = env
            .winning_plan(doc! {
                "find": "users",
                "filter": {"_id": kind.range(after)},
                "sort": {"_id": 1},
                "projection": mailflow::adapters::preferences::standing_projection(&topic),
                "hint": {"_id": 1},
            })
            .await
            .unwrap();
        eprintln!("users scan ({kind:?}, after {after:?}): {plan}");
        assert!(
            plan.contains("IXSCAN") && !plan.contains("COLLSCAN"),
            "plan: {plan}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn get_users_continues_from_checkpoints_without_losing_or_repeating_users() {
    let env = test_env("checkpoint", |_| {}).await.unwrap();
    let seeded = env.seed(200, &campaign()).await.unwrap();
    let options = PipelineOptions {
        env: BTreeMap::from([(
            mailflow_local::pipeline::GET_USERS,
            // One batch in flight at a time, so that the audience's batches take several short deadlines
            // even when the local SQS answers in milliseconds.
            BTreeMap::from([
                ("DEADLINE_MARGIN_SECONDS".to_string(), "0".to_string()),
                ("ENQUEUE_CONCURRENCY".to_string(), "1".to_string()),
            ]),
        )]),
        ..Default::default()
    };
    let pipeline = env.pipeline(options, ses).await.unwrap();
    let sqs = env.sqs();
    let continuation = env
        .stack
        .queue_url(names::CONTINUATION_QUEUE)
        .unwrap()
        .to_owned();

    // Each invocation gets a deadline so short that it must stop and leave a checkpoint.
    let short = || Invocation::with_timeout("short", Duration::from_millis(80));
    let mut run = Run {
        campaign: campaign(),
        topic_named: false,
        include_failed: false,
        include_cancelled: false,
        after: None,
        segment: 0,
        delivery: None,
        guardrails: Default::default(),
        started_at_ms: 0,
        experiment: None,
        definition: None,
        repin: false,
        pinned: None,
    };
    let mut segments = 0;
    loop {
        let summary = pipeline.get_users.run(run.clone(), &short()).await.unwrap();
        segments += 1;
        if summary.complete {
            break;
        }
        assert!(segments < 500, "no progress");
        let out = sqs
            .receive_message()
            .queue_url(&continuation)
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        let message = out
            .messages
            .unwrap_or_default()
            .pop()
            .expect("a checkpoint on the continuation queue");
        let checkpoint: Checkpoint = serde_json::from_str(message.body().unwrap()).unwrap();
        assert_eq!(checkpoint.after, summary.continued_after);
        sqs.delete_message()
            .queue_url(&continuation)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
        run = checkpoint.into();
    }
    assert!(
        segments > 2,
        "the audience should have needed several invocations, took {segments}"
    );

    let users = env.stack.queue_url(names::USERS_QUEUE).unwrap().to_owned();
    let mut enqueued = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&users)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        let mut deletes = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap()).unwrap();
            enqueued.push(body["userId"].as_str().unwrap().to_owned());
            deletes.push(
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap())
                    .build()
                    .unwrap(),
            );
        }
        sqs.delete_message_batch()
            .queue_url(&users)
            .set_entries(Some(deletes))
            .send()
            .await
            .unwrap();
    }
    let distinct: BTreeSet<String> = enqueued.iter().cloned().collect();
    assert_eq!(
        distinct.len(),
        enqueued.len(),
        "a user was enqueued twice across checkpoints"
    );
    assert_eq!(distinct, seeded.audience.keys().cloned().collect());

    // The exclusions the segments recorded add up to what one invocation counts: a segment
    // that read the audience ahead of its checkpoint counted none of what it did not take.
    let whole = Run {
        campaign: Campaign::from_id("again-2026-W46", Some(campaign().window)).unwrap(),
        topic_named: false,
        include_failed: false,
        include_cancelled: false,
        after: None,
        segment: 0,
        delivery: None,
        guardrails: Default::default(),
        started_at_ms: 0,
        experiment: None,
        definition: None,
        repin: false,
        pinned: None,
    };
    let at_once = Invocation::with_timeout("whole", Duration::from_secs(120));
    assert!(
        pipeline
            .get_users
            .run(whole, &at_once)
            .await
            .unwrap()
            .complete
    );
    let campaigns = mailflow::adapters::campaigns::CampaignsTable::new(
        env.dynamo(),
        env.stack.table_name(names::CAMPAIGNS_TABLE).unwrap(),
    );
    let mut excluded = Vec::new();
    for id in ["weekly-2026-W46", "again-2026-W46"] {
        excluded.push(campaigns.record(id).await.unwrap().unwrap().excluded);
    }
    assert!(excluded[0].unsubscribed > 0, "{excluded:?}");
    assert_eq!(excluded[0], excluded[1], "segmented, then at once");
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

#[tokio::test(flavor = "multi_thread")]
async fn get_users_resumes_after_a_string_or_an_object_id_checkpoint() {
    let env = test_env("mixed-ids", |_| {}).await.unwrap();
    let window = campaign().window;
    let at = mongodb::bson::DateTime::from_millis(
        (window.since.unix_timestamp_nanos() / 1_000_000) as i64 + 1000,
    );
    let oid = |n: u8| mongodb::bson::oid::ObjectId::from_bytes([n; 12]);
    let ids: [mongodb::bson::Bson; 4] = ["a".into(), "b".into(), oid(1).into(), oid(2).into()];
    let users: Vec<Document> = ids
        .iter()
        .map(|id| doc! { "_id": id.clone(), "subscribed": true, "email": "x@example.com" })
        .collect();
    let follows: Vec<Document> = ids
        .iter()
        .map(|id| doc! { "followerId": "f", "followeeId": id.clone(), "createdAt": at })
        .collect();
    env.db.collection("users").insert_many(users).await.unwrap();
    env.db
        .collection("follows")
        .insert_many(follows)
        .await
        .unwrap();
    let pipeline = env.pipeline(PipelineOptions::default(), ses).await.unwrap();
    let first = format!("oid:{}", "01".repeat(12));
    for (after, expected) in [
        (None, 4),
        (Some("a"), 3),
        (Some("b"), 2),
        (Some(first.as_str()), 1),
    ] {
        let run = Run {
            campaign: campaign(),
            topic_named: false,
            include_failed: false,
            include_cancelled: false,
            after: after.map(str::to_owned),
            segment: 1,
            delivery: None,
            guardrails: Default::default(),
            started_at_ms: 0,
            experiment: None,
            definition: None,
            repin: false,
            pinned: None,
        };
        let invocation = Invocation::with_timeout("mixed", Duration::from_secs(60));
        let summary = pipeline.get_users.run(run, &invocation).await.unwrap();
        assert_eq!(summary.users_enqueued, expected, "after {after:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_without_its_index_refuses_to_start_and_says_what_to_run() {
    let env = test_env("no-index", |_| {}).await.unwrap();
    // provision() created the index, as a deployment does; a team that skipped it:
    env.db
        .collection::<mongodb::bson::Document>(mailflow::adapters::mongo::FOLLOWS)
        .drop_indexes()
        .await
        .unwrap();
    let vars = env.stack.env(mailflow_local::names::GET_USERS).unwrap();
    let config =
        mailflow::config::GetUsersConfig::from_source(&|k: &str| vars.get(k).cloned()).unwrap();
    let err = match mailflow::assemble::get_users(config, &env.stack.sdk).await {
        Ok(_) => panic!("started without its index"),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("is missing") && err.contains("mailctl create-indexes"),
        "{err}"
    );
    // Created as docs/deploying.md says, it starts.
    mailflow::adapters::mongo::create_indexes(&env.db)
        .await
        .unwrap();
    let config =
        mailflow::config::GetUsersConfig::from_source(&|k: &str| vars.get(k).cloned()).unwrap();
    assert!(mailflow::assemble::get_users(config, &env.stack.sdk)
        .await
        .is_ok());
}
