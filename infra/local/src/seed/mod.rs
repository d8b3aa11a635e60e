//! Synthetic users and follows for local runs: deterministic for a given seed, with the
//! awkward cases a real audience has (unsubscribed users, suppressed addresses, users
//! without new followers, invalid addresses, names that look like HTML or template code,
//! locales with and without templates).

mod orders;

pub use orders::{customer_id, seed_orders, OrdersOptions, OrdersReport, CUSTOMERS, ORDERS};

use anyhow::{Context, Result};
use mailflow::domain::campaign::Window;
use mailflow::domain::local_time::ZoneField;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::Database;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct SeedOptions {
    pub users: usize,
    pub seed: u64,
    /// Mail domain of the generated addresses (tests use their own to tell emails apart).
    pub domain: String,
    pub window: Window,
}

/// What a correct run of the seeded campaign must do.
#[derive(Clone, Debug, Default)]
pub struct SeedReport {
    pub users: usize,
    pub follows: usize,
    /// Subscribed users with at least one new follower: the audience, with their counts.
    pub audience: BTreeMap<String, u64>,
    /// Audience members whose address SES rejects.
    pub invalid_addresses: BTreeSet<String>,
    pub addresses: BTreeMap<String, String>,
    /// Each user's `locale` field.
    pub locales: BTreeMap<String, String>,
    pub unsubscribed: usize,
    /// Subscribed users whose address is suppressed (an earlier bounce or complaint).
    pub suppressed: usize,
}

impl SeedReport {
    /// Users who must get exactly one email.
    pub fn deliverable(&self) -> impl Iterator<Item = (&String, &u64)> {
        self.audience
            .iter()
            .filter(|(id, _)| !self.invalid_addresses.contains(*id))
    }
}

/// SplitMix64: tiny, fast, deterministic; plenty for test data and fault decisions.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const NAMES: [&str; 8] = [
    "Ada", "Grace", "Linus", "Margaret", "Dennis", "Barbara", "Ken", "Frances",
];

pub fn user_id(i: usize) -> String {
    format!("u{i:07}")
}

fn millis(t: time::OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

pub async fn seed(db: &Database, options: &SeedOptions) -> Result<SeedReport> {
    seed_reporting(db, options, |_, _| {}).await
}

/// `seed`, telling `inserted` how many documents of how many are in after each batch.
pub async fn seed_reporting(
    db: &Database,
    options: &SeedOptions,
    inserted: impl Fn(usize, usize),
) -> Result<SeedReport> {
    let mut rng = Rng::new(options.seed);
    let mut report = SeedReport {
        users: options.users,
        ..Default::default()
    };
    let since = millis(options.window.since);
    let span = (millis(options.window.until) - since).max(1) as u64;
    let mut users = Vec::with_capacity(options.users);
    let mut follows = Vec::new();
    for i in 0..options.users {
        let user = seed_user(i, &mut rng, options, since, &mut report);
        let new_followers = draw_follows(i, &mut rng, options, (since, span), &mut follows);
        if user.subscribed && !user.suppressed && new_followers > 0 {
            report.audience.insert(user_id(i), new_followers);
        }
        users.push(user.document);
    }
    report
        .invalid_addresses
        .retain(|id| report.audience.contains_key(id));
    report.follows = follows.len();
    let total = users.len() + follows.len();
    let users_done = users.len();
    insert(db, mailflow::adapters::mongo::USERS, users, |n| {
        inserted(n, total)
    })
    .await?;
    insert(db, mailflow::adapters::mongo::FOLLOWS, follows, |n| {
        inserted(users_done + n, total)
    })
    .await?;
    Ok(report)
}

/// A seeded user's document, and whether they may be mailed.
struct SeededUser {
    document: Document,
    subscribed: bool,
    suppressed: bool,
}

/// User `i`: subscribed or not, a valid address or not, an awkward name now and then, a
/// locale by position, a suppressed address now and then (all noted in `report`).
fn seed_user(
    i: usize,
    rng: &mut Rng,
    options: &SeedOptions,
    since: i64,
    report: &mut SeedReport,
) -> SeededUser {
    let id = user_id(i);
    let subscribed = rng.below(100) < 85;
    let invalid = i % 101 == 7;
    let email = if invalid {
        format!("{id}-at-{}", options.domain)
    } else {
        format!("{id}@{}", options.domain)
    };
    let name = match i % 53 {
        0 => format!("<script>alert({i})</script>"),
        1 => format!("{{{{ name }}}} {i}"),
        _ => format!("{} {i}", NAMES[rng.below(NAMES.len() as u64) as usize]),
    };
    if !subscribed {
        report.unsubscribed += 1;
    }
    if invalid {
        report.invalid_addresses.insert(id.clone());
    }
    // By position, not from the generator, so the rest of the data stays as it was.
    let locale = match i % 10 {
        3 => "fr-FR",
        7 => "de",
        9 => "pt-BR",
        _ => "en",
    };
    report.addresses.insert(id.clone(), email.clone());
    report.locales.insert(id.clone(), locale.to_owned());
    let mut document = doc! { "_id": &id, "email": email, "name": name, "subscribed": subscribed, "locale": locale };
    let suppressed = i % 97 == 11;
    if suppressed {
        if subscribed {
            report.suppressed += 1;
        }
        document.insert(
            "suppression",
            doc! { "reason": "bounce", "at": DateTime::from_millis(since - 86_400_000) },
        );
    }
    SeededUser {
        document,
        subscribed,
        suppressed,
    }
}

/// User `i`'s follows: new ones within the window (`since`, `span` ms long) for most users,
/// and a few older ones outside it; how many distinct new followers they have.
fn draw_follows(
    i: usize,
    rng: &mut Rng,
    options: &SeedOptions,
    (since, span): (i64, u64),
    follows: &mut Vec<Document>,
) -> u64 {
    let id = user_id(i);
    let mut new_followers = 0;
    if options.users > 1 && rng.below(100) < 70 {
        // The same follower may be drawn twice (a duplicate follow, as real collections
        // have): the email counts people, so the report does too.
        let mut followers = std::collections::BTreeSet::new();
        for _ in 0..1 + rng.below(6) {
            let follower = (i + 1 + rng.below(options.users as u64 - 1) as usize) % options.users;
            let at = since + rng.below(span) as i64;
            follows.push(follow(&user_id(follower), &id, at));
            followers.insert(follower);
        }
        new_followers = followers.len() as u64;
    }
    // Older follows, outside the window: they must not count.
    for _ in 0..rng.below(3) {
        let follower = rng.below(options.users as u64) as usize;
        let at = since - 1 - rng.below(30 * 86_400_000) as i64;
        follows.push(follow(&user_id(follower), &id, at));
    }
    new_followers
}

fn follow(follower: &str, followee: &str, at_ms: i64) -> Document {
    doc! { "followerId": follower, "followeeId": followee, "createdAt": DateTime::from_millis(at_ms) }
}

async fn insert(
    db: &Database,
    collection: &str,
    docs: Vec<Document>,
    inserted: impl Fn(usize),
) -> Result<()> {
    let coll = db.collection::<Document>(collection);
    let mut done = 0;
    for chunk in docs.chunks(1000) {
        coll.insert_many(chunk.to_vec())
            .await
            .with_context(|| format!("inserting into {collection}"))?;
        done += chunk.len();
        inserted(done);
    }
    Ok(())
}

/// Seeds unless the users collection holds documents already (a stack used again keeps its
/// data); the report of what was seeded, if anything was.
pub async fn seed_if_empty(db: &Database, options: &SeedOptions) -> Result<Option<SeedReport>> {
    let users = db
        .collection::<Document>(mailflow::adapters::mongo::USERS)
        .estimated_document_count()
        .await?;
    if users > 0 {
        return Ok(None);
    }
    Ok(Some(seed(db, options).await?))
}

/// The zones `assign_timezones` gives: every UTC offset in use, from +14 to -12, the odd
/// quarters among them, two legacy names.
pub const ZONES: [&str; 40] = [
    "Pacific/Kiritimati",
    "Pacific/Chatham",
    "Pacific/Auckland",
    "Pacific/Fiji",
    "Asia/Kamchatka",
    "Pacific/Noumea",
    "Australia/Sydney",
    "Australia/Adelaide",
    "Asia/Tokyo",
    "Australia/Eucla",
    "Asia/Shanghai",
    "Asia/Bangkok",
    "Asia/Yangon",
    "Asia/Dhaka",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "Asia/Karachi",
    "Asia/Kabul",
    "Asia/Dubai",
    "Asia/Tehran",
    "Europe/Moscow",
    "Africa/Cairo",
    "Europe/Berlin",
    "Europe/London",
    "Atlantic/Azores",
    "America/Noronha",
    "America/Sao_Paulo",
    "America/St_Johns",
    "America/Halifax",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Anchorage",
    "Pacific/Marquesas",
    "Pacific/Honolulu",
    "Pacific/Pago_Pago",
    "Etc/GMT+12",
    "US/Eastern",
    "Asia/Calcutta",
];

/// Gives every user of `ids` a `timezone` (local-time delivery): one of `ZONES` for most, and for every 13th and
/// 17th none (absent, null, empty) or an unusable one (misspelt, invented, a number, a
/// fixed offset). Returns each user's field as the audience scan reads it.
pub async fn assign_timezones(
    db: &Database,
    ids: &[String],
) -> Result<BTreeMap<String, ZoneField>> {
    let users = db.collection::<Document>("users");
    let odd: [(Option<Bson>, ZoneField); 7] = [
        (None, ZoneField::Missing),
        (Some(Bson::Null), ZoneField::Missing),
        (Some(Bson::String(String::new())), ZoneField::Missing),
        (
            Some(Bson::String("Europe/Berln".into())),
            ZoneField::Text("Europe/Berln".into()),
        ),
        (
            Some(Bson::String("Mars/Olympus_Mons".into())),
            ZoneField::Text("Mars/Olympus_Mons".into()),
        ),
        (Some(Bson::Int32(42)), ZoneField::Other("int")),
        (
            Some(Bson::String("GMT+5".into())),
            ZoneField::Text("GMT+5".into()),
        ),
    ];
    let mut groups: BTreeMap<String, (Option<Bson>, Vec<String>)> = BTreeMap::new();
    let mut fields = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let (value, field) = if i % 13 == 0 || i % 17 == 0 {
            odd[i % odd.len()].clone()
        } else {
            let zone = ZONES[i % ZONES.len()];
            (
                Some(Bson::String(zone.into())),
                ZoneField::Text(zone.into()),
            )
        };
        let group = groups
            .entry(format!("{value:?}"))
            .or_insert((value, Vec::new()));
        group.1.push(id.clone());
        fields.insert(id.clone(), field);
    }
    for (_, (value, ids)) in groups {
        let update = match value {
            Some(v) => doc! { "$set": { "timezone": v } },
            None => doc! { "$unset": { "timezone": "" } },
        };
        users
            .update_many(doc! { "_id": { "$in": ids } }, update)
            .await?;
    }
    Ok(fields)
}
