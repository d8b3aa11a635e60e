//! Snapshot tests of the bundled digest's emails (`campaigns/digest`): subject, text and
//! HTML for a few users, compared with the files in `tests/snapshots/` (`mailctl preview`
//! prints the same output). After a
//! deliberate template change, run with `UPDATE_SNAPSHOTS=1` and review the diff.

use mailflow::domain::campaign::Campaign;
use mailflow::domain::definition::render::Email;
use mailflow::domain::definition::EmailData;
use mailflow::domain::open_content::SlotUrls;
use mailflow::domain::topics::Topics;
use mailflow::domain::user_id::UserId;
use mailflow::ports::LoadedDefinition;

const URL: &str = "https://abc123.lambda-url.us-east-1.on.aws/?token=djEK.c2ln";

/// A user of the bundled digest as its `followers` query reads them.
fn digest(name: &str, locale: Option<&str>, count: u64, recent: &[&str]) -> EmailData {
    EmailData {
        user_id: UserId::parse("u0000042").unwrap(),
        email: "ada@example.com".into(),
        name: Some(name.into()),
        language: locale.map(str::to_owned),
        zone: None,
        data: [(
            "followers".to_owned(),
            serde_json::json!({"_id": "u0000042", "count": count, "names": recent}),
        )]
        .into(),
    }
}

fn check(case: &str, digest: &EmailData) {
    check_with(case, digest, &[]);
}

fn check_with(case: &str, digest: &EmailData, picks: &[SlotUrls]) {
    let window = Campaign::from_id("weekly-2026-W47", None).unwrap().window;
    let email = Email {
        window: &window,
        topic: Topics::builtin().weekly(),
        manage_url: URL,
        picks,
        variant: None,
        subject: None,
    };
    let out = LoadedDefinition::bundled()
        .unwrap()
        .templates
        .render(digest, &email)
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
