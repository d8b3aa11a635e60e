//! The example definitions of `campaigns/` against the local stack's MongoDB: the orders
//! summary reads nested fields, ObjectIds and decimals; the announcement reaches every user
//! its topic lets in, in id order.

use crate::definition_queries::{campaign, drain, example, fresh_db, oid, orders, run_of};
use mailflow::domain::definition::Prepared;
use mailflow::domain::user_id::UserId;
use mongodb::bson::{doc, Document};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn cents(value: &Value) -> i64 {
    let text = match value {
        Value::Object(o) => o["$numberDecimal"].as_str().unwrap().to_owned(),
        other => other.to_string(),
    };
    let (whole, frac) = text.split_once('.').unwrap_or((&text, "0"));
    let frac = format!("{frac:0<2}");
    whole.parse::<i64>().unwrap() * 100 + frac[..2].parse::<i64>().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_orders_example_reads_nested_fields_object_ids_and_decimals() {
    let db = fresh_db("orders").await;
    let window = campaign().window;
    let report = mailflow_local::seed::seed_orders(
        &db,
        &mailflow_local::seed::OrdersOptions {
            customers: 400,
            seed: 3,
            domain: "example.com".into(),
            window,
        },
    )
    .await
    .unwrap();
    let run = run_of(&db, orders(), &window);
    let (members, excluded) = drain(run.audience(None)).await;
    let ids: Vec<String> = members.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(ids, report.audience.keys().cloned().collect::<Vec<_>>());
    assert_eq!(
        (
            excluded.unsubscribed,
            excluded.suppressed,
            excluded.left_topic
        ),
        (report.unsubscribed, report.suppressed, report.left_topic)
    );
    assert!(members.iter().all(|m| m.zone
        == mailflow::domain::local_time::ZoneField::Text("Europe/Berlin".into())
        || m.zone == mailflow::domain::local_time::ZoneField::Missing));

    let user_ids: Vec<UserId> = members.iter().map(|m| m.id.clone()).collect();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for batch in user_ids.chunks(10) {
        for (id, prepared) in batch.iter().zip(run.prepare(batch).await.unwrap()) {
            let expected = &report.audience[&id.to_string()];
            match prepared {
                Prepared::Skip(reason) => {
                    assert_eq!(
                        Err(reason.as_str()),
                        expected.as_ref().map(|_| ()).map_err(|r| *r),
                        "{id}"
                    );
                    *reasons.entry(reason).or_default() += 1;
                }
                Prepared::Ready(email) => {
                    let orders = email.data["orders"].as_array().unwrap();
                    let totals: Vec<i64> = orders.iter().map(|o| cents(&o["total"])).collect();
                    assert_eq!(Ok(&totals), expected.as_ref(), "{id}");
                    assert!(email.email.ends_with("@example.com"), "{id}");
                    assert!(
                        email.language.is_none()
                            || ["en", "fr-CA", "de", "pt-BR"]
                                .contains(&email.language.as_deref().unwrap())
                    );
                    assert!(!email.name.as_deref().unwrap_or("").contains('\0'));
                    for order in orders {
                        assert!(order["placedAt"]["$date"].is_string(), "{order}");
                        assert!(order["number"]["$oid"].is_string(), "{order}");
                        assert_eq!(
                            order["userId"]["$oid"],
                            json!(id.to_string().trim_start_matches("oid:"))
                        );
                        for item in order["items"].as_array().unwrap() {
                            assert!(item["price"]["$numberDecimal"].is_string(), "{item}");
                            assert!(item["quantity"].is_i64(), "{item}");
                            assert!(
                                !item["name"].as_str().unwrap().contains('\u{7}'),
                                "printable: {item}"
                            );
                        }
                    }
                    *reasons.entry("ready".into()).or_default() += 1;
                }
            }
        }
    }
    for reason in ["ready", "no_orders", "no_address", "invalid_document"] {
        assert!(
            reasons.get(reason).copied().unwrap_or(0) > 0,
            "{reason}: {reasons:?}"
        );
    }
}

/// A definition whose audience or data pipeline is `pipeline`.

#[tokio::test(flavor = "multi_thread")]
async fn the_announcement_reaches_every_user_the_topic_lets_in_in_id_order() {
    let db = fresh_db("announcement").await;
    let users = db.collection::<Document>("users");
    users
        .insert_many([
            doc! { "_id": "u2", "email": "b@example.com", "subscribed": true },
            doc! { "_id": "u1", "email": "a@example.com", "subscribed": true, "topics": { "product-news": { "subscribed": true } } },
            doc! { "_id": "u3", "email": "c@example.com", "subscribed": false },
            doc! { "_id": "u4", "email": "d@example.com", "subscribed": true, "suppression": { "reason": "bounce" } },
            doc! { "_id": "u5", "email": "e@example.com", "subscribed": true, "topics": { "product-news": { "subscribed": false } } },
            doc! { "_id": oid(7), "email": "f@example.com", "subscribed": true },
            doc! { "_id": 42, "email": "g@example.com", "subscribed": true },
        ])
        .await
        .unwrap();
    let window = campaign().window;
    let run = run_of(&db, example("announcement"), &window);
    let (members, excluded) = drain(run.audience(None)).await;
    let ids: Vec<String> = members.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(
        ids,
        ["u1", "u2", &UserId::ObjectId(oid(7).bytes()).to_string()]
    );
    assert_eq!(
        (
            excluded.unsubscribed,
            excluded.suppressed,
            excluded.left_topic
        ),
        (1, 1, 1)
    );
}
