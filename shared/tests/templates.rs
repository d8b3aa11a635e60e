//! Snapshot tests of the rendered emails: subject, text and HTML for a few users, compared
//! with the files in `tests/snapshots/` (`mailctl preview` prints the same output). After a
//! deliberate template change, run with `UPDATE_SNAPSHOTS=1` and review the diff.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::digest::{Digest, Renderer};
use mailflow::domain::open_content::SlotUrls;
use mailflow::domain::topics::Topics;

const URL: &str = "https://abc123.lambda-url.us-east-1.on.aws/?token=djEK.c2ln";

fn digest(name: &str, locale: Option<&str>, count: u64, recent: &[&str]) -> Digest {
    Digest {
        user_id: "u0000042".into(),
        email: "ada@example.com".into(),
        name: name.into(),
        locale: locale.map(str::to_owned),
        new_followers: count,
        recent: recent.iter().map(|s| s.to_string()).collect(),
    }
}

fn check(case: &str, digest: &Digest) {
    check_with(case, digest, &[]);
}

fn check_with(case: &str, digest: &Digest, picks: &[SlotUrls]) {
    let window = Campaign::from_id("weekly-2026-W47", None).unwrap().window;
    let out = Renderer::new("en")
        .unwrap()
        .render(digest, &window, Topics::builtin().weekly(), URL, picks)
        .unwrap();
    let actual = format!(
        "Subject: {}\nLocale: {}\n\n--- text ---\n{}\n--- html ---\n{}\n",
        out.subject, out.locale, out.text, out.html
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{case}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}; run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    if let Some((n, (e, a))) = expected
        .lines()
        .zip(actual.lines())
        .enumerate()
        .find(|(_, (e, a))| e != a)
    {
        panic!(
            "{case}: line {} differs from {}\n  expected: {e}\n  actual:   {a}\n(run with UPDATE_SNAPSHOTS=1 if the change is intended)",
            n + 1,
            path.display()
        );
    }
    assert_eq!(
        expected.lines().count(),
        actual.lines().count(),
        "{case}: length differs from {}",
        path.display()
    );
}

#[test]
fn english_with_more_followers_than_named() {
    check(
        "en-five-followers",
        &digest(
            "Ada Lovelace",
            Some("en-GB"),
            5,
            &["Grace Hopper", "Linus", "Margaret Hamilton"],
        ),
    );
}

#[test]
fn english_with_three_pick_slots() {
    let picks: Vec<SlotUrls> = (1..=3)
        .map(|i| SlotUrls {
            image: format!("https://o.example/pick?t=T{i}"),
            badge: format!("https://o.example/badge?t=T{i}"),
            link: format!("https://o.example/go?t=T{i}"),
        })
        .collect();
    check_with(
        "en-pick-slots",
        &digest("Ada Lovelace", Some("en"), 2, &["Grace Hopper", "Linus"]),
        &picks,
    );
}

#[test]
fn french_with_one_follower() {
    check(
        "fr-one-follower",
        &digest("Émilie", Some("fr"), 1, &["Sophie Germain"]),
    );
}

#[test]
fn german_with_many_followers() {
    check(
        "de-twelve-followers",
        &digest("Emmy", Some("de-AT"), 12, &["Lise", "Hedy", "Ada"]),
    );
}

#[test]
fn markup_and_template_syntax_in_names_render_as_text() {
    check(
        "en-hostile-names",
        &digest(
            "<script>alert(\"x\")</script>",
            None,
            3,
            &["{{ name }}", "Tom & Jerry", "</mj-text><mj-raw>"],
        ),
    );
}
