//! Customers and their orders for the `orders` example definition (campaigns/orders):
//! ObjectId ids, nested fields, Decimal128 prices, and what real data holds besides: no
//! contact, fields of the wrong type, a shared address, duplicate orders, orders of nobody
//! (dangling, a string or an array where the id should be), malformed items, cancelled
//! orders, orders outside the window. Deterministic for a given seed.

use super::{insert, millis, Rng};
use anyhow::Result;
use mailflow::domain::campaign::Window;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, Bson, DateTime, Decimal128};
use mongodb::Database;
use std::collections::BTreeMap;

pub const CUSTOMERS: &str = "customers";
pub const ORDERS: &str = "orders";

#[derive(Clone, Debug)]
pub struct OrdersOptions {
    pub customers: usize,
    pub seed: u64,
    pub domain: String,
    pub window: Window,
}

/// What a correct run of the orders definition must find.
#[derive(Clone, Debug, Default)]
pub struct OrdersReport {
    pub customers: usize,
    pub orders: usize,
    /// The audience (signed up before the window ended, let in by the topic rule), by id's
    /// text form (`oid:...`), each with what they get: their paid orders of the week,
    /// newest first (each order's total in cents), or why nothing.
    pub audience: BTreeMap<String, Result<Vec<i64>, &'static str>>,
    pub unsubscribed: u64,
    pub suppressed: u64,
    pub left_topic: u64,
}

/// Customer `i`'s id.
pub fn customer_id(i: usize) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[0] = 0x65;
    bytes[4..12].copy_from_slice(&(i as u64).to_be_bytes());
    ObjectId::from_bytes(bytes)
}

const ITEMS: [&str; 6] = [
    "Tea",
    "Zoë's <b>mug</b>",
    "李 notebook",
    "{{ pen }}",
    "Crème & co",
    "Socks\u{7}",
];

pub async fn seed_orders(db: &Database, options: &OrdersOptions) -> Result<OrdersReport> {
    let mut rng = Rng::new(options.seed);
    let since = millis(options.window.since);
    let until = millis(options.window.until);
    let span = (until - since).max(1) as u64;
    let mut report = OrdersReport {
        customers: options.customers,
        ..Default::default()
    };
    let (mut customers, mut orders) = (Vec::new(), Vec::new());
    for i in 0..options.customers {
        let id = customer_id(i);
        let signed_up = match i % 23 == 5 {
            true => until + 1000,
            false => since - 86_400_000 * (1 + i as i64 % 300),
        };
        let lang = ["en", "fr-CA", "de", "pt-BR"][i % 4];
        let mut customer = doc! {
            "_id": id,
            "signedUpAt": DateTime::from_millis(signed_up),
            "subscribed": i % 11 != 2,
            "contact": { "email": format!("c{i}@{}", options.domain), "name": format!("Customer {i}") },
            "prefs": { "lang": lang, "tz": "Europe/Berlin" },
        };
        // Why this customer gets nothing, whatever they ordered.
        let mut skip: Option<&'static str> = None;
        match i % 19 {
            3 => {
                customer.remove("contact");
                skip = Some("no_address");
            }
            4 => {
                customer.insert("contact", doc! { "email": 42 });
                skip = Some("invalid_document");
            }
            5 => {
                customer.insert("contact", "c5@example.com");
                skip = Some("invalid_document");
            }
            6 => {
                customer.insert("prefs", doc! { "lang": 7 });
                skip = Some("invalid_document");
            }
            7 => {
                customer.insert("contact", doc! { "email": format!("c{i}@{}", options.domain), "name": "<script>x</script> Zoë \u{0}" });
            }
            8 => {
                customer.insert("contact", doc! { "email": "  " });
                skip = Some("no_address");
            }
            // The same address as the customer before: both are customers, both get theirs.
            9 => {
                customer.insert(
                    "contact",
                    doc! { "email": format!("c{}@{}", i - 1, options.domain) },
                );
            }
            10 => {
                customer.remove("prefs");
            }
            _ => {}
        }
        let suppressed = i % 13 == 9;
        if suppressed {
            customer.insert("suppression", doc! { "reason": "bounce" });
        }
        let left = i % 17 == 4;
        if left {
            customer.insert("topics", doc! { "product-news": { "subscribed": false } });
        }
        let unsubscribed = i % 11 == 2;

        // Orders: paid ones in the window count; the rest must not.
        let mut paid = Vec::new();
        for k in 0..rng.below(4) {
            // Distinct instants (no tie for the order to break).
            let at = since + (rng.below(span / 8) as i64) * 8 + k as i64;
            let cancelled = rng.below(7) == 0;
            let (items, cents) = items(&mut rng);
            let order = doc! {
                "userId": id,
                "placedAt": DateTime::from_millis(at),
                "status": if cancelled { "cancelled" } else { "paid" },
                "items": items,
            };
            if !cancelled {
                paid.push((at, cents));
                // Now and then the same order twice (a retried write): two orders.
                if i % 29 == 1 && k == 0 {
                    orders.push(order.clone());
                    paid.push((at, cents));
                }
            }
            orders.push(order);
        }
        // Before the window, and a malformed one in it.
        orders.push(doc! { "userId": id, "placedAt": DateTime::from_millis(since - 1), "status": "paid", "items": [] });
        if i % 31 == 0 {
            let at = since + 4;
            orders.push(doc! { "userId": id, "placedAt": DateTime::from_millis(at), "status": "paid", "items": "junk" });
            paid.push((at, 0));
        }
        // Orders that name the customer the wrong way: nobody's.
        if i % 37 == 1 {
            orders.push(doc! { "userId": id.to_hex(), "placedAt": DateTime::from_millis(since + 10), "status": "paid", "items": [] });
            orders.push(doc! { "userId": [id], "placedAt": DateTime::from_millis(since + 11), "status": "paid", "items": [] });
        }
        customers.push(customer);

        if signed_up >= until {
            continue;
        }
        if suppressed {
            report.suppressed += 1;
        } else if unsubscribed {
            report.unsubscribed += 1;
        } else if left {
            report.left_topic += 1;
        } else {
            paid.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
            let expected = match (skip, paid.is_empty()) {
                (Some(reason), _) => Err(reason),
                (None, true) => Err("no_orders"),
                (None, false) => Ok(paid.into_iter().map(|(_, c)| c).collect()),
            };
            report
                .audience
                .insert(format!("oid:{}", id.to_hex()), expected);
        }
    }
    // Orders of customers who do not exist, and of no one.
    for n in 0..options.customers / 10 + 1 {
        orders.push(doc! { "userId": customer_id(options.customers + n), "placedAt": DateTime::from_millis(since + 5), "status": "paid", "items": [] });
    }
    orders.push(doc! { "userId": Bson::Null, "placedAt": DateTime::from_millis(since + 5), "status": "paid" });
    report.orders = orders.len();
    insert(db, CUSTOMERS, customers, |_| {}).await?;
    insert(db, ORDERS, orders, |_| {}).await?;
    Ok(report)
}

/// One order's items, some malformed (left out of the email), and the total of the others
/// in cents.
fn items(rng: &mut Rng) -> (Vec<Bson>, i64) {
    let mut items = Vec::new();
    let mut cents = 0;
    for _ in 0..1 + rng.below(3) {
        let name = ITEMS[rng.below(ITEMS.len() as u64) as usize];
        let price = 50 + rng.below(5000) as i64;
        let quantity = 1 + rng.below(3) as i64;
        let decimal: Decimal128 = format!("{}.{:02}", price / 100, price % 100)
            .parse()
            .expect("a decimal");
        match rng.below(10) {
            0 => items.push(Bson::Document(
                doc! { "name": name, "price": price as f64 / 100.0, "quantity": quantity },
            )),
            1 => items.push(Bson::Document(
                doc! { "name": name, "price": decimal, "quantity": "2" },
            )),
            _ => {
                items.push(Bson::Document(
                    doc! { "name": name, "price": decimal, "quantity": quantity as i32 },
                ));
                cents += price * quantity;
            }
        }
    }
    (items, cents)
}
