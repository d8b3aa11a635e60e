//! A campaign over data shaped like a real product's, not like `mailctl seed`'s: ObjectId and
//! string ids mixed (and ids of other types), duplicate and dangling follows, follows outside
//! the window and on its edges, hostile and international names, every address shape of RFC
//! 5322 and RFC 6530 we could think of, missing and odd fields, and users who unsubscribe,
//! are suppressed, vanish or change their address while the campaign runs.
//!
//! The data is generated deterministically here, and what must happen to each user is
//! computed here too, from the documents alone, by rules written out in this file (not by
//! the pipeline's code): who is in the audience, who gets an email with which count and
//! names, who is FAILED with which reason, who is skipped and why. Then the campaign runs
//! through the real stages on the local stack and every user is checked.
//!
//! Part of the `integration` test binary (`tests/integration.rs`).

use mailflow::domain::campaign::{Campaign, Window};
use mailflow::domain::ledger::SendStatus;
use mailflow_local::names;
use mailflow_local::runner;
use mailflow_local::seed::Rng;
use mailflow_tests::{ses, test_env, TestEnv};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, Bson, DateTime, Document};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// What must become of one user of the audience.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    /// One email to this ASCII address, counting `count` followers and naming `named`.
    Send {
        to: String,
        count: usize,
        named: Vec<String>,
    },
    /// A FAILED record whose reason contains this.
    Fail(&'static str),
    /// No email, no record, counted under this skip reason.
    Skip(&'static str),
}

/// The shapes a user's `email` field takes: the stored value, and what the address must
/// become (Ok: the ASCII address SES gets; Err: the FAILED reason or, for a missing or
/// odd value, the skip reason).
fn address_shape(shape: usize, i: usize, domain: &str) -> (Option<Bson>, Result<String, Expect>) {
    let s = |v: String| Some(Bson::String(v));
    let local = format!("p{i}");
    let plain = format!("{local}@{domain}");
    let fail = |reason| Err(Expect::Fail(reason));
    match shape {
        0 => (s(plain.clone()), Ok(plain)),
        1 => (s(format!("Zoë Ødegaard <{plain}>")), Ok(plain)),
        2 => (s(format!("  {plain}\t")), Ok(plain)),
        3 => (s(format!("{local}@{}", domain.to_uppercase())), Ok(plain)),
        4 => (
            s(format!("{local}+weekly@{domain}")),
            Ok(format!("{local}+weekly@{domain}")),
        ),
        5 => (
            s(format!("\"{local}..dots\"@{domain}")),
            Ok(format!("\"{local}..dots\"@{domain}")),
        ),
        6 => (
            s(format!("{local}@bücher.{domain}")),
            Ok(format!("{local}@xn--bcher-kva.{domain}")),
        ),
        7 => (
            s(format!("{local}@例え.{domain}")),
            Ok(format!("{local}@xn--r8jz45g.{domain}")),
        ),
        8 => (s(format!("josé{i}@{domain}")), fail("non-ASCII local part")),
        9 => (
            s(format!("{plain}, stranger{i}@{domain}")),
            fail("holds 2 addresses"),
        ),
        10 => (
            s(format!("friends: {plain}, stranger{i}@{domain};")),
            fail("holds 2 addresses"),
        ),
        11 => (
            s(format!("\"stranger{i}@{domain}\" <{plain}>")),
            fail("display name that holds another address"),
        ),
        12 => (s(format!("{local}@[192.0.2.1]")), fail("IP address")),
        13 => (
            s(format!("{local}-at-{domain}")),
            fail("not one RFC 5322 mailbox"),
        ),
        14 => (s(format!("{local}@localhost")), fail("single label")),
        15 => (
            s(format!("{local}@under_score.{domain}")),
            fail("not a valid domain name"),
        ),
        16 => (s("   ".into()), Err(Expect::Skip("no_address"))),
        17 => (None, Err(Expect::Skip("no_address"))),
        18 => (Some(Bson::Null), Err(Expect::Skip("no_address"))),
        19 => (Some(Bson::Int32(42)), Err(Expect::Skip("invalid_document"))),
        // An angle-addr without a display name, and RFC 5322 comments: one mailbox each.
        20 => (s(format!("<{plain}>")), Ok(plain)),
        21 => (s(format!("(home){plain}")), Ok(plain)),
        22 => (s(format!("{plain} (work, \\(main\\))")), Ok(plain)),
        // A trailing dot stays refused: not a domain SMTP can route.
        23 => (s(format!("{plain}.")), fail("not one RFC 5322 mailbox")),
        _ => (
            Some(Bson::Array(vec![Bson::String(plain)])),
            Err(Expect::Skip("invalid_document")),
        ),
    }
}
const SHAPES: usize = 25;
/// Most real addresses are plain: shape 0 for most users, every other shape for some.
fn pick_shape(rng: &mut Rng) -> usize {
    if rng.below(100) < 55 {
        0
    } else {
        rng.below(SHAPES as u64) as usize
    }
}

const NAMES: [&str; 14] = [
    "Margaret",
    "Zoë Ødegaard",
    "李小龙",
    "Ñandú Pérez",
    "<script>alert(1)</script>",
    "{{ name }}",
    "Tom & Jerry",
    "O'Brien",
    "محمد",
    "Émilie du Châtelet",
    "👩‍💻 Ada",
    "Dmitri Ivanovich Mendeleev Jr.",
    "Nul\0Byte",
    "Line\nBreak\tand\u{1b}[31mcolour",
];

/// The generated database, and the expectations that go with each user's address.
struct World {
    users: Vec<Document>,
    follows: Vec<Document>,
    /// By user id (`Bson`), the expected fate of the address stored for them.
    address: HashMap<String, Result<String, Expect>>,
    /// Pairs of users, one keyed by a string and one by an ObjectId, with the same name,
    /// locale and follower names: their emails must be identical.
    twins: Vec<(Bson, Bson)>,
}

fn key(id: &Bson) -> String {
    format!("{id:?}")
}

fn user_id_text(id: &Bson) -> String {
    mailflow::adapters::bson_ids::from_bson(id)
        .map(|id| id.to_string())
        .unwrap_or_default()
}

fn millis(t: time::OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A deterministic ObjectId for the `i`th generated document of its kind.
fn object_id(i: usize) -> Bson {
    let mut b = [0x65, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    b[8..].copy_from_slice(&(i as u32).to_be_bytes());
    Bson::ObjectId(ObjectId::from_bytes(b))
}

fn at(ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(ms))
}

/// A follower that no longer exists.
fn dangling(n: u64) -> Bson {
    if n % 2 == 0 {
        object_id(1_000_000 + n as usize)
    } else {
        Bson::String(format!("deleted-{n}"))
    }
}

const HOUR: i64 = 3_600_000;

/// Builds the `World` step by step, every random choice from one `Rng` in a fixed order, so a
/// seed always gives the same database.
struct Generator<'a> {
    rng: Rng,
    world: World,
    ids: Vec<Bson>,
    since: i64,
    until: i64,
    domain: &'a str,
    follow_id: u32,
}

impl<'a> Generator<'a> {
    /// ObjectIds, plain strings, and strings that look like the other form or need escaping
    /// in the text form.
    fn user_ids(users: usize) -> Vec<Bson> {
        (0..users)
            .map(|i| match i % 10 {
                0..=4 => object_id(i),
                5..=7 => Bson::String(format!("u{i:05}")),
                _ => Bson::String(match i % 5 {
                    0 => format!("oid:not-an-object-id-{i}"),
                    1 => format!("str:{i}"),
                    2 => format!("65a00000000000000000{i:04x}"), // an ObjectId's hex, as a string
                    3 => format!("名前-{i}"),
                    _ => format!("user with spaces {i}"),
                }),
            })
            .collect()
    }

    /// One user: an address of some shape, subscribed or not (or not a boolean), perhaps
    /// suppressed, a locale and a name of any kind.
    fn user(&mut self, i: usize, id: &Bson) -> Document {
        let rng = &mut self.rng;
        let mut user = doc! { "_id": id.clone() };
        let shape = pick_shape(rng);
        let (email, fate) = address_shape(shape, i, self.domain);
        if let Some(email) = email {
            user.insert("email", email);
        }
        self.world.address.insert(key(id), fate);
        match rng.below(100) {
            0..=79 => user.insert("subscribed", true),
            80..=84 => user.insert("subscribed", false),
            85..=89 => None,                              // never answered
            90..=94 => user.insert("subscribed", "true"), // a string: not subscribed
            _ => user.insert("subscribed", Bson::Null),
        };
        if rng.below(100) < 4 {
            user.insert(
                "suppression",
                doc! { "reason": "bounce", "at": at(self.since) },
            );
        }
        match rng.below(100) {
            0..=49 => user.insert("locale", "en"),
            50..=64 => user.insert("locale", "fr"),
            65..=79 => user.insert("locale", "de-AT"),
            80..=84 => user.insert("locale", "pt-BR"),
            85..=86 => user.insert("locale", 7),
            87..=89 => user.insert("locale", Bson::Null),
            _ => None,
        };
        match rng.below(100) {
            0..=89 => {
                let name = NAMES[rng.below(NAMES.len() as u64) as usize];
                user.insert("name", format!("{name} {i}"))
            }
            90..=94 => None,
            95 => user.insert("name", Bson::Int64(1)),
            // Nothing printable: no name at all.
            96 => user.insert("name", "\0\u{7}"),
            _ => user.insert("name", ""),
        };
        user
    }

    /// A follow document; `Bson::Undefined` leaves the field out.
    fn follow(&mut self, follower: Bson, followee: Bson, ms: i64) {
        self.follow_id += 1;
        let mut d = doc! { "_id": ObjectId::from_bytes({
            let mut b = [0x66; 12];
            b[8..].copy_from_slice(&self.follow_id.to_be_bytes());
            b
        }) };
        if follower != Bson::Undefined {
            d.insert("followerId", follower);
        }
        if followee != Bson::Undefined {
            d.insert("followeeId", followee);
        }
        d.insert("createdAt", at(ms));
        self.world.follows.push(d);
    }

    fn any_user(&mut self) -> Bson {
        self.ids[self.rng.below(self.ids.len() as u64) as usize].clone()
    }

    /// The follows of the `i`th user: a few new followers, some twice, some gone, some of
    /// odd types, some just outside the window and some exactly on its edges.
    fn follows_of(&mut self, i: usize, followee: &Bson) {
        let (since, until) = (self.since, self.until);
        let n = self.rng.below(6);
        // Distinct times per followee (newest first is then well defined), spread over the
        // window, the first exactly at `since`.
        for j in 0..n {
            let ms = if j == 0 {
                since
            } else {
                since + (j as i64) * 7 * HOUR + self.rng.below(HOUR as u64) as i64
            };
            let follower = match self.rng.below(100) {
                0..=69 => self.any_user(),
                70..=84 => dangling(self.rng.below(40)),
                85..=87 => Bson::Int32(12),
                88..=89 => Bson::Null,
                _ => Bson::Undefined, // no followerId at all
            };
            self.follow(follower.clone(), followee.clone(), ms);
            // The same follower following again (unfollowed and followed back).
            if self.rng.below(100) < 15 {
                self.follow(follower, followee.clone(), ms + HOUR / 2);
            }
        }
        // Outside the window: before it, and exactly at its end (exclusive).
        if self.rng.below(100) < 30 {
            let follower = self.any_user();
            self.follow(follower.clone(), followee.clone(), since - 1);
            self.follow(follower, followee.clone(), until);
        }
        // A popular few: more followers than one page of names, so the count comes from the
        // server (distinct followers), with repeats and gone followers among them.
        if i % 29 == 11 {
            for k in 0..24u64 {
                let follower = match k % 4 {
                    0 => dangling(k),
                    _ => {
                        self.ids[((i as u64 * 7 + k * 13) % self.ids.len() as u64) as usize].clone()
                    }
                };
                let at = until - 1 - (k as i64) * 60_000;
                self.follow(follower.clone(), followee.clone(), at);
                if k % 5 == 0 {
                    self.follow(follower, followee.clone(), at - 30_000);
                }
            }
        }
        // Ids in an array: a follow of nobody, by nobody (MongoDB matches an array by its
        // elements; such a follow must still not count). And a user following themself,
        // which is no new follower.
        if i % 19 == 7 {
            self.follow(
                Bson::Array(vec![self.ids[0].clone()]),
                followee.clone(),
                since + HOUR,
            );
            self.follow(
                self.ids[1].clone(),
                Bson::Array(vec![followee.clone()]),
                since + HOUR,
            );
        }
        if i % 13 == 5 {
            self.follow(followee.clone(), followee.clone(), since + 2 * HOUR);
        }
        // A followeeId of the other type than the user's _id: another value, another user.
        if i % 17 == 3 {
            if let Bson::ObjectId(oid) = followee {
                self.follow(
                    self.ids[0].clone(),
                    Bson::String(oid.to_hex()),
                    since + HOUR,
                );
            }
        }
    }

    /// Follows no user can be found through (numbers, null, missing followeeIds), and a user
    /// whose _id is a number, followed this week: never in the audience.
    fn unreachable(&mut self) {
        for (k, followee) in [
            Bson::Int32(7),
            Bson::Int64(8),
            Bson::Null,
            Bson::Undefined,
            Bson::Double(1.5),
        ]
        .into_iter()
        .enumerate()
        {
            self.follow(self.ids[k].clone(), followee, self.since + HOUR);
        }
        let domain = self.domain;
        self.world.users.push(
            doc! { "_id": 7, "email": format!("number@{domain}"), "subscribed": true, "name": "Seven" },
        );
    }

    /// Users whose string `_id` cannot travel in a queue message (a tab, a newline, more than
    /// 512 bytes): eligible in every other way, followed this week and following others.
    fn ids_that_cannot_travel(&mut self) {
        let domain = self.domain;
        for (n, id) in [
            "tab\there".to_owned(),
            "new\nline".to_owned(),
            format!("long-{}", "x".repeat(600)),
        ]
        .into_iter()
        .enumerate()
        {
            let id = Bson::String(id);
            self.world.users.push(doc! {
                "_id": id.clone(), "email": format!("untravelled{n}@{domain}"),
                "name": format!("Untravelled {n}"), "subscribed": true,
            });
            self.world
                .address
                .insert(key(&id), Ok(format!("untravelled{n}@{domain}")));
            self.follow(self.ids[n].clone(), id.clone(), self.since + HOUR);
            self.follow(id, self.ids[n + 1].clone(), self.since + 2 * HOUR);
        }
    }

    /// A user whose id travels but is longer than one SES tag value once encoded (200 dots:
    /// 600 characters, three tags): the email goes out, tagged with all of it.
    fn long_id_that_travels(&mut self) {
        let domain = self.domain;
        let id = Bson::String(".".repeat(200));
        self.world.users.push(doc! {
            "_id": id.clone(), "email": format!("dots@{domain}"), "name": "Dots",
            "subscribed": true,
        });
        self.world
            .address
            .insert(key(&id), Ok(format!("dots@{domain}")));
        self.follow(self.ids[2].clone(), id, self.since + HOUR);
    }

    /// A user whose only follow this week is their own: in the audience (the follows index
    /// names them), skipped for having no new follower.
    fn only_themself(&mut self) {
        let domain = self.domain;
        let id = Bson::String("narcissus".into());
        self.world.users.push(doc! {
            "_id": id.clone(), "email": format!("narcissus@{domain}"), "name": "Narcissus",
            "subscribed": true,
        });
        self.world
            .address
            .insert(key(&id), Ok(format!("narcissus@{domain}")));
        self.follow(id.clone(), id, self.since + HOUR);
    }

    /// Twins: one keyed by a string, one by an ObjectId, same everything else.
    fn twins(&mut self) {
        let domain = self.domain;
        for t in 0..3 {
            let string_id = Bson::String(format!("twin-{t}"));
            let oid = object_id(2_000_000 + t);
            let follower_names = ["Grace", "Linus", "Barbara", "Ken"];
            for (n, id) in [string_id.clone(), oid.clone()].into_iter().enumerate() {
                let local = format!("twin{t}-{n}");
                let locale = ["en", "fr", "de"][t];
                self.world.users.push(doc! {
                    "_id": id.clone(), "email": format!("{local}@{domain}"), "name": format!("Twin {t}"),
                    "subscribed": true, "locale": locale,
                });
                self.world
                    .address
                    .insert(key(&id), Ok(format!("{local}@{domain}")));
                for (k, name) in follower_names.iter().enumerate() {
                    let follower = Bson::String(format!("twin-{t}-{n}-follower-{k}"));
                    self.world
                        .users
                        .push(doc! { "_id": follower.clone(), "name": *name, "subscribed": false });
                    self.follow(follower, id.clone(), self.since + (k as i64 + 1) * HOUR);
                }
            }
            self.world.twins.push((string_id, oid));
        }
    }
}

fn generate(seed: u64, users: usize, window: &Window, domain: &str) -> World {
    let mut generator = Generator {
        rng: Rng::new(seed),
        world: World {
            users: Vec::new(),
            follows: Vec::new(),
            address: HashMap::new(),
            twins: Vec::new(),
        },
        ids: Generator::user_ids(users),
        since: millis(window.since),
        until: millis(window.until),
        domain,
        follow_id: 0,
    };
    let ids = generator.ids.clone();
    for (i, id) in ids.iter().enumerate() {
        let user = generator.user(i, id);
        generator.world.users.push(user);
    }
    for (i, followee) in ids.iter().enumerate() {
        generator.follows_of(i, followee);
    }
    generator.unreachable();
    generator.twins();
    generator.ids_that_cannot_travel();
    generator.only_themself();
    generator.long_id_that_travels();
    generator.world
}

/// The users GetUsers must enqueue: subscribed (the boolean true), not suppressed, keyed by
/// a non-empty string or an ObjectId, followed at least once in the window by a follow whose
/// followeeId is that same value (whatever the followerId).
fn audience(world: &World, window: &Window) -> BTreeSet<String> {
    eligible(world, window, true)
}

/// Whether an `_id` can travel in a queue message: an ObjectId, or a string of at most 512
/// bytes without a control character. GetUsers refuses the others, counted (`usersRefused`).
fn travels(id: &Bson) -> bool {
    match id {
        Bson::String(s) => s.len() <= 512 && !s.chars().any(char::is_control),
        _ => true,
    }
}

/// The users eligible for the campaign whose ids travel (`travelling`) or do not.
fn eligible(world: &World, window: &Window, travelling: bool) -> BTreeSet<String> {
    let (since, until) = (millis(window.since), millis(window.until));
    let followed: BTreeSet<String> = world
        .follows
        .iter()
        .filter(|f| in_window(f, since, until))
        .filter_map(|f| f.get("followeeId").map(key))
        .collect();
    world
        .users
        .iter()
        .filter(|u| u.get("subscribed") == Some(&Bson::Boolean(true)))
        .filter(|u| !u.contains_key("suppression"))
        .filter(|u| {
            matches!(u.get("_id"), Some(Bson::ObjectId(_)))
                || matches!(u.get("_id"), Some(Bson::String(s)) if !s.is_empty())
        })
        .filter(|u| followed.contains(&key(u.get("_id").unwrap())))
        .filter(|u| travels(u.get("_id").unwrap()) == travelling)
        .map(|u| key(u.get("_id").unwrap()))
        .collect()
}

fn in_window(follow: &Document, since: i64, until: i64) -> bool {
    let ms = follow.get_datetime("createdAt").unwrap().timestamp_millis();
    (since..until).contains(&ms)
}

/// A name as the email must show it: control characters never reach it (whitespace ones
/// become spaces, the others are dropped), and a name with nothing printable is no name.
fn shown_name(raw: String) -> Option<String> {
    let name: String = raw
        .chars()
        .filter_map(|c| match c {
            c if !c.is_control() => Some(c),
            c if c.is_whitespace() => Some(' '),
            _ => None,
        })
        .collect();
    (!name.trim().is_empty()).then_some(name)
}

fn text_field(doc: &Document, field: &str) -> Result<Option<String>, ()> {
    match doc.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

/// What must happen to one audience user, from the documents as CreateEmails will read them.
fn expect(world: &World, id: &str, window: &Window) -> Expect {
    let (since, until) = (millis(window.since), millis(window.until));
    let by_id: HashMap<String, &Document> = world
        .users
        .iter()
        .map(|u| (key(u.get("_id").unwrap()), u))
        .collect();
    let Some(user) = by_id.get(id) else {
        return Expect::Skip("vanished");
    };
    match user.get("subscribed") {
        Some(Bson::Boolean(true)) => {}
        None | Some(Bson::Null | Bson::Boolean(false)) => return Expect::Skip("unsubscribed"),
        Some(_) => return Expect::Skip("invalid_document"),
    }
    if user.contains_key("suppression") {
        return Expect::Skip("suppressed");
    }
    match text_field(user, "email") {
        Ok(None) => return Expect::Skip("no_address"),
        Err(()) => return Expect::Skip("invalid_document"),
        Ok(Some(_)) => {}
    }
    if text_field(user, "name").is_err() || text_field(user, "locale").is_err() {
        return Expect::Skip("invalid_document");
    }
    let mut follows: Vec<&Document> = world
        .follows
        .iter()
        .filter(|f| {
            in_window(f, since, until) && f.get("followeeId").map(key).as_deref() == Some(id)
        })
        .collect();
    follows.sort_by_key(|f| {
        std::cmp::Reverse(f.get_datetime("createdAt").unwrap().timestamp_millis())
    });
    let mut distinct: Vec<String> = Vec::new();
    for f in follows {
        let valid = match f.get("followerId") {
            Some(Bson::ObjectId(_)) => true,
            Some(Bson::String(s)) => !s.is_empty(),
            _ => false,
        };
        let follower = key(f.get("followerId").unwrap_or(&Bson::Null));
        // Following oneself is no new follower.
        if valid && follower != id && !distinct.contains(&follower) {
            distinct.push(follower);
        }
    }
    if distinct.is_empty() {
        return Expect::Skip("no_new_followers");
    }
    let named: Vec<String> = distinct
        .iter()
        .filter_map(|f| {
            by_id
                .get(f)
                .and_then(|u| text_field(u, "name").ok().flatten().and_then(shown_name))
        })
        .take(3)
        .collect();
    match &world.address[id] {
        Ok(to) => Expect::Send {
            to: to.clone(),
            count: distinct.len(),
            named,
        },
        Err(other) => other.clone(),
    }
}

/// Changes made after GetUsers enqueued the audience and before CreateEmails reads it.
fn change_during_the_run(
    world: &mut World,
    audience: &BTreeSet<String>,
    domain: &str,
) -> Vec<(Bson, Document)> {
    let mut changes = Vec::new();
    let twins: BTreeSet<String> = world
        .twins
        .iter()
        .flat_map(|(a, b)| [key(a), key(b)])
        .collect();
    let ids: Vec<Bson> = world
        .users
        .iter()
        .map(|u| u.get("_id").unwrap())
        .filter(|id| audience.contains(&key(id)) && !twins.contains(&key(id)))
        .cloned()
        .collect();
    for (n, id) in ids.iter().step_by(9).take(12).enumerate() {
        let user = world
            .users
            .iter_mut()
            .find(|u| u.get("_id") == Some(id))
            .unwrap();
        let set = match n % 4 {
            0 => doc! { "subscribed": false },
            1 => doc! { "suppression": { "reason": "complaint" } },
            2 => doc! { "email": format!("moved{n}@{domain}, stranger@{domain}") },
            _ => doc! { "deleted": true },
        };
        if set.contains_key("email") {
            world
                .address
                .insert(key(id), Err(Expect::Fail("holds 2 addresses")));
        }
        if set.contains_key("deleted") {
            world.users.retain(|u| u.get("_id") != Some(id));
        } else {
            user.extend(set.clone());
        }
        changes.push((id.clone(), set));
    }
    changes
}

async fn insert(env: &TestEnv, collection: &str, docs: &[Document]) {
    for chunk in docs.chunks(500) {
        env.db
            .collection::<Document>(collection)
            .insert_many(chunk.to_vec())
            .await
            .unwrap();
    }
}

/// The named followers and the subject of an email, as its text part shows them.
fn shown(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_over_real_world_data_sends_exactly_the_right_emails() {
    let mut env = test_env("real-world", |_| {}).await.unwrap();
    let _server = env.serve_unsubscribe().await.unwrap();
    let campaign = Campaign::for_schedule(time::OffsetDateTime::now_utc());
    let window = campaign.window;
    let mut world = generate(2026, 400, &window, &env.domain);
    insert(&env, "users", &world.users).await;
    insert(&env, "follows", &world.follows).await;
    mailflow::adapters::mongo::create_indexes(&env.db)
        .await
        .unwrap();
    let audience = audience(&world, &window);
    assert!(
        audience.len() > 150,
        "the generator makes a sizeable audience: {}",
        audience.len()
    );
    // A usable id is an ObjectId or a non-empty string; any other follow counts for nobody.
    let usable = |id: Option<&Bson>| match id {
        Some(Bson::ObjectId(_)) => true,
        Some(Bson::String(s)) => !s.is_empty(),
        _ => false,
    };
    let in_this_window = |f: &&Document| in_window(f, millis(window.since), millis(window.until));
    let odd_follows = world
        .follows
        .iter()
        .filter(in_this_window)
        .filter(|f| !usable(f.get("followeeId")))
        .count();
    let odd_followers = world
        .follows
        .iter()
        .filter(in_this_window)
        .filter(|f| !usable(f.get("followerId")))
        .count();
    assert!(
        odd_followers > 10,
        "the generator makes odd followers: {odd_followers}"
    );

    let pipeline = env.pipeline(Default::default(), ses).await.unwrap();
    let schedule = serde_json::json!({
        "detail-type": "Scheduled Event", "source": "aws.events",
        "time": time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap(),
    });
    let started = pipeline.start(schedule).await.unwrap();
    assert_eq!(started["usersEnqueued"], audience.len(), "{started}");
    let refused = eligible(&world, &window, false);
    assert_eq!(refused.len(), 3, "the generator's ids that cannot travel");
    assert_eq!(started["usersRefused"], refused.len(), "{started}");
    assert_eq!(started["followsSkipped"], odd_follows, "{started}");
    assert_eq!(started["followersSkipped"], odd_followers, "{started}");

    // The text form of every id, before some users are deleted below.
    let id_text: HashMap<String, String> = world
        .users
        .iter()
        .map(|u| {
            (
                key(u.get("_id").unwrap()),
                user_id_text(u.get("_id").unwrap()),
            )
        })
        .collect();
    // Users change while their messages wait on the users queue.
    for (id, set) in change_during_the_run(&mut world, &audience, &env.domain) {
        let users = env.db.collection::<Document>("users");
        if set.contains_key("deleted") {
            users.delete_one(doc! { "_id": id }).await.unwrap();
        } else {
            users
                .update_one(doc! { "_id": id }, doc! { "$set": set })
                .await
                .unwrap();
        }
    }
    let consumers = runner::run_until_drained(
        &env.sqs(),
        pipeline.consumers().unwrap(),
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    // No data decides by retrying: a record that would fail the same way again keeps the
    // queues from draining, ends in a DLQ, with the wrong outcome or FAILED "on N attempts"
    // (each fails the test here or below). A record may come back for a transient reason
    // (beside other tests, a slow server leaves too little of an invocation to send, or no
    // send slot before its deadline); each such return is a retry, and the record then gets
    // its outcome like any other. A job may also arrive twice (SQS delivers at least once,
    // and a producer's send retried after a slow answer is a second message; a loaded CI run
    // had two such copies): a copy of a SENT or FAILED record is acknowledged as a
    // duplicate or as failed before, never sent again (one email each, checked below).
    let send = pipeline.totals.lock().unwrap().send_email.clone();
    assert_eq!(
        (send.stopped, send.paused),
        (0, 0),
        "{send:?}; {:?}",
        consumers[names::SEND_EMAIL]
    );
    for function in [names::CREATE_EMAILS, names::SEND_EMAIL] {
        assert_eq!(consumers[function].crashes, 0, "{function} panicked");
    }

    // Every audience user, checked against what must happen to them.
    let records = env.records(campaign.id.as_str()).await.unwrap();
    let sent = mailflow_local::ses_record::sent_messages(&env.endpoint)
        .await
        .unwrap();
    let mut by_to: HashMap<String, Vec<&mailflow_local::ses_record::SentMessage>> = HashMap::new();
    for m in &sent {
        for to in &m.to {
            if to.ends_with(&env.domain) {
                by_to.entry(to.clone()).or_default().push(m);
            }
        }
    }
    let mut skips: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failed_reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut sends = 0;
    let mut most_followers = 0;
    for id in &audience {
        let expected = expect(&world, id, &window);
        let text = id_text.get(id).cloned().unwrap_or_default();
        let record = records.get(&text);
        match &expected {
            Expect::Send { to, count, named } => {
                sends += 1;
                most_followers = most_followers.max(*count);
                let record =
                    record.unwrap_or_else(|| panic!("{id}: no record, expected {expected:?}"));
                assert_eq!(record.status, Some(SendStatus::Sent), "{id}: {record:?}");
                let emails = by_to.get(to).map_or(&[][..], Vec::as_slice);
                assert_eq!(emails.len(), 1, "{id} ({to}): {} emails", emails.len());
                let email = emails[0];
                assert_eq!(email.to, vec![to.clone()], "{id}: one recipient");
                assert_eq!(email.header("To"), Some(to.as_str()), "{id}");
                let text_part = email.text.as_deref().unwrap_or_default();
                assert_eq!(
                    &shown(text_part),
                    named,
                    "{id}: named followers\n{text_part}"
                );
                let more = count - named.len();
                if more > 0 {
                    assert!(
                        text_part.contains(&format!(" {more} ")),
                        "{id}: {count} followers, {more} more\n{text_part}"
                    );
                }
                if *count > 1 {
                    let subject = email.subject.as_deref().unwrap_or_default();
                    assert!(
                        subject.contains(&count.to_string()),
                        "{id}: {count} in {subject:?}"
                    );
                }
            }
            Expect::Fail(reason) => {
                let record =
                    record.unwrap_or_else(|| panic!("{id}: no record, expected {expected:?}"));
                assert_eq!(record.status, Some(SendStatus::Failed), "{id}: {record:?}");
                let error = record.last_error.as_deref().unwrap_or_default();
                assert!(
                    error.contains(reason) && !error.contains("refused on"),
                    "{id}: {error:?} should say {reason:?}, decided on the first attempt"
                );
                *failed_reasons.entry(reason).or_default() += 1;
            }
            Expect::Skip(reason) => {
                assert!(
                    record.is_none(),
                    "{id}: skipped ({reason}) but has {record:?}"
                );
                *skips.entry(reason).or_default() += 1;
            }
        }
    }
    // Nobody else: no record and no email outside the audience, no second recipient.
    let audience_texts: BTreeSet<&String> =
        audience.iter().filter_map(|id| id_text.get(id)).collect();
    for user in records.keys() {
        assert!(
            audience_texts.contains(user),
            "{user} has a record but is not in the audience"
        );
    }
    assert_eq!(
        by_to.values().map(Vec::len).sum::<usize>(),
        sends,
        "emails beyond the expected ones"
    );
    assert!(
        !by_to.keys().any(|to| to.contains("stranger")),
        "a second recipient got an email"
    );
    let totals = pipeline.totals.lock().unwrap().clone();
    let counted: BTreeMap<&str, usize> = totals.create_emails.skipped.clone().into_iter().collect();
    // CreateEmails counts what it handles: a message SQS delivers twice (at least once is
    // its promise) is counted twice, so the counters may exceed the users, never fall short.
    assert_eq!(
        counted.keys().collect::<Vec<_>>(),
        skips.keys().collect::<Vec<_>>(),
        "skip reasons: {counted:?} vs {skips:?}"
    );
    for (reason, n) in &skips {
        assert!(
            (*n..=n + 3).contains(&counted[reason]),
            "{reason}: {counted:?} vs {skips:?}"
        );
    }
    assert!(records
        .values()
        .all(|r| r.status != Some(SendStatus::InProgress)));
    for dlq in names::CAMPAIGN_DLQS {
        assert_eq!(env.depth(dlq).await.unwrap(), 0, "{dlq}");
    }
    // Every kind of outcome happened (the generator is not accidentally tame), and some
    // counts came from the server rather than from the first page of follows.
    assert!(most_followers > 10, "{most_followers}");
    assert!(
        sends > 100 && failed_reasons.len() >= 6 && skips.len() >= 6,
        "{failed_reasons:?} {skips:?}"
    );

    // Status says the same, by reason.
    let target = mailctl::ops::Target::from_prefix(&env.stack.sdk, &env.stack.prefix)
        .await
        .unwrap();
    let status = mailctl::ops::status(&env.stack.sdk, &target, campaign.id.as_str())
        .await
        .unwrap();
    assert_eq!(status.sent, sends);
    assert_eq!(status.failed, failed_reasons.values().sum::<usize>());
    assert_eq!(status.problems(), status.failed as u64);
    for (reason, n) in &failed_reasons {
        let grouped: usize = status
            .failed_by_reason
            .iter()
            .filter(|(group, _)| group.contains(reason) || reason.contains(group.as_str()))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(grouped, *n, "{reason}: {:?}", status.failed_by_reason);
    }

    // The operator's view: `mailctl status --watch` ends with exit status 1 and the reasons.
    let out = std::process::Command::new(mailflow_tests::binary("mailctl"))
        .args([
            "status",
            "--prefix",
            &env.stack.prefix,
            "--campaign",
            campaign.id.as_str(),
            "--watch",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("ended with {} FAILED", status.failed)),
        "{stderr}"
    );
    assert!(
        stdout.contains("FAILED") && stdout.contains("address holds 2 addresses"),
        "{stdout}"
    );

    // A user keyed by an ObjectId gets exactly the email their string-keyed twin gets.
    let email_of = |id: &Bson| {
        let to = world.address[&key(id)].clone().unwrap();
        by_to[&to][0]
    };
    // Unsubscribe and pick-slot links are sealed per user, so they differ between twins.
    let without_link = |text: &str| {
        text.lines()
            .filter(|l| !l.contains("token=") && !l.contains("/go?t="))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (string_id, oid) in &world.twins {
        let (a, b) = (email_of(string_id), email_of(oid));
        assert_eq!(a.subject, b.subject);
        assert_eq!(
            without_link(a.text.as_deref().unwrap()),
            without_link(b.text.as_deref().unwrap())
        );
        assert_eq!(shown(a.text.as_deref().unwrap()).len(), 3);
    }

    // Their one-click unsubscribe and an SES bounce find the ObjectId-keyed documents.
    let (_, oid) = &world.twins[0];
    let link = {
        let header = email_of(oid).header("List-Unsubscribe").unwrap();
        header[1..header.len() - 1].to_owned()
    };
    let response = mailflow_local::http::request(
        &link,
        "POST",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"List-Unsubscribe=One-Click",
    )
    .await
    .unwrap();
    assert_eq!(response.status, 200);
    let users = env.db.collection::<Document>("users");
    let doc = users
        .find_one(doc! { "_id": oid.clone() })
        .await
        .unwrap()
        .unwrap();
    // One click leaves the campaign's topic (the digest), recorded on the ObjectId document.
    let digest = doc
        .get_document("topics")
        .and_then(|t| t.get_document("digest"))
        .unwrap_or_else(|_| panic!("{doc}"));
    assert_eq!(digest.get_bool("subscribed").ok(), Some(false), "{doc}");
    assert_eq!(doc.get_bool("subscribed").ok(), Some(true), "{doc}");
    let (_, bounced) = &world.twins[1];
    let event = mailflow_local::ses_event_source::event(
        "Bounce",
        Some((campaign.id.as_str(), &user_id_text(bounced))),
        "m-real-world",
        serde_json::json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}}),
    );
    env.deliver_ses_events(&pipeline, &[event]).await.unwrap();
    let doc = users
        .find_one(doc! { "_id": bounced.clone() })
        .await
        .unwrap()
        .unwrap();
    assert!(doc.get_document("suppression").is_ok(), "{doc}");
}
