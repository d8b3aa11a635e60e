//! Campaign definitions: `Definition::load` on the test definition under
//! tests/definitions/good and on each kind of mistake, every problem one line that names
//! the file, the line and the field.

use mailflow::domain::definition::{Definition, Files, PicksSource, SkipWhen};
use std::path::Path;

fn read(dir: &Path, prefix: &str, files: &mut Files) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            read(&entry.path(), &format!("{name}/"), files);
        } else {
            files.insert(name, std::fs::read_to_string(entry.path()).unwrap());
        }
    }
}

fn fixture(name: &str) -> Files {
    let mut files = Files::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/definitions")
        .join(name);
    read(&dir, "", &mut files);
    files
}

fn good() -> Files {
    fixture("good")
}

/// `good` with campaign.toml's `old` replaced by `new`.
fn edited(old: &str, new: &str) -> Files {
    let mut files = good();
    let toml = files.get_mut("campaign.toml").unwrap();
    assert!(toml.contains(old), "{old:?} is not in the fixture");
    *toml = toml.replacen(old, new, 1);
    files
}

fn errors(files: &Files) -> Vec<String> {
    Definition::load(files).expect_err("refused")
}

/// The one problem `files` has.
fn one(files: &Files) -> String {
    let errors = errors(files);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().unwrap()
}

#[test]
fn loads_the_test_definition_with_its_defaults() {
    let d = Definition::load(&good()).unwrap();
    assert_eq!(d.name, "digest-test");
    assert_eq!(d.topic, "digest");
    assert_eq!(d.schedule.as_deref(), Some("cron(0 9 ? * MON *)"));
    assert_eq!(d.window_days, 7);
    assert_eq!(d.params["shown"], 10);
    assert_eq!(d.recipients.collection, "users");
    assert_eq!(d.recipients.name.as_deref(), Some("name"));
    assert_eq!(d.recipients.suppressed, "suppression");
    assert_eq!(d.audience.collection, "follows");
    assert_eq!(d.audience_by, "followeeId");
    assert_eq!(d.audience.pipeline.len(), 2);
    let followers = &d.data["followers"];
    assert_eq!(
        (
            followers.by.as_str(),
            followers.user.as_str(),
            followers.first
        ),
        ("followeeId", "_id", true)
    );
    // Keys keep the order written: $sort's fields are its order.
    let sort: Vec<&String> = followers.query.pipeline[1]["$sort"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(sort, ["createdAt", "_id"]);
    assert_eq!(d.data["last_login"].user, "userId");
    assert_eq!(d.skip.len(), 1);
    assert_eq!(d.skip[0].when, SkipWhen::Empty);
    assert_eq!(d.open_content, Some(PicksSource::FollowBack));
    assert_eq!(d.templates.languages, ["en", "fr", "pt-BR"]);
    assert_eq!(d.templates.default_language, "en");
    assert_eq!(d.templates.variants, ["b"]);
    assert!(d.templates.files.contains_key("layout.mjml"));
    assert!(d.templates.files.contains_key("pt-BR/b/body.txt"));
}

#[test]
fn the_smallest_definition_takes_every_default() {
    let mut files = good();
    files.insert(
        "campaign.toml".into(),
        "name = \"news\"\ndescription = \"Product news\"\ntopic = \"product-news\"\ndefault_language = \"fr\"\n[audience]\ncollection = \"users\"\n".into(),
    );
    let d = Definition::load(&files).unwrap();
    assert_eq!(
        (
            d.audience_by.as_str(),
            d.audience.pipeline.len(),
            d.window_days
        ),
        ("_id", 0, 7)
    );
    assert_eq!(d.recipients.language.as_deref(), Some("locale"));
    assert!(
        d.data.is_empty() && d.skip.is_empty() && d.schedule.is_none() && d.open_content.is_none()
    );
}

#[test]
fn unknown_keys_are_refused_on_their_line() {
    assert_eq!(
        one(&edited("window_days = 7\n", "window_days = 7\ncolour = \"blue\"\n")),
        "campaign.toml:8: colour: unknown key \"colour\"; the keys here are name, description, topic, default_language, schedule, window_days, params, recipients, audience, data, skip, open_content"
    );
    let e = one(&edited(
        "user = \"_id\"\n",
        "user = \"_id\"\nfirts = true\n",
    ));
    assert!(e.starts_with("campaign.toml:32: [data.followers] firts: unknown key \"firts\"; the keys here are collection, by, user, first, pipeline"), "{e}");
    // Each part is read on its own: every unknown key is said, not only the first.
    let files = edited("email = \"email\"\n", "emial = \"email\"\n");
    let files = {
        let mut f = files;
        let t = f.get_mut("campaign.toml").unwrap();
        *t = t.replacen(
            "reason = \"no_new_followers\"\n",
            "reason = \"no_new_followers\"\nwhy = 1\n",
            1,
        );
        *t = t.replacen("window_days = 7\n", "window_days = 7\nzone = 1\n", 1);
        f
    };
    let errors = errors(&files);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    // In the file's order, whatever the keys' order.
    assert!(
        errors[0].starts_with("campaign.toml:8: zone: unknown key"),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("campaign.toml:15: [recipients] emial: unknown key"),
        "{errors:#?}"
    );
    assert!(
        errors[2].starts_with("campaign.toml:57: [[skip]] #1 why: unknown key"),
        "{errors:#?}"
    );
}

#[test]
fn wrong_types_name_the_field_and_line() {
    assert_eq!(
        one(&edited("window_days = 7", "window_days = \"7\"")),
        "campaign.toml:7: window_days: invalid type: string \"7\", expected a whole number; fix the value"
    );
    let e = one(&edited("first = true", "first = \"yes\""));
    assert!(
        e.starts_with("campaign.toml:32: [data.followers] first: invalid type: string \"yes\""),
        "{e}"
    );
    let e = one(&edited(
        "[audience]\ncollection = \"follows\"",
        "[audience]\ncollection = 3",
    ));
    assert!(
        e.starts_with("campaign.toml:19: [audience] collection: invalid type: integer"),
        "{e}"
    );
    let e = one(&edited(
        "name = \"digest-test\"",
        "name = [\"digest-test\"]",
    ));
    assert!(
        e.starts_with("campaign.toml:2: name: invalid type: sequence"),
        "{e}"
    );
    // Not TOML at all: the parser's message, on its line.
    let e = one(&edited("topic = \"digest\"", "topic = digest"));
    assert!(e.starts_with("campaign.toml:4: "), "{e}");
}

#[test]
fn missing_fields_are_said_with_what_to_write() {
    assert_eq!(
        one(&edited("[data.last_login]\ncollection = \"sessions\"\nby = \"userId\"\n", "[data.last_login]\ncollection = \"sessions\"\n")),
        "campaign.toml:46: [data.last_login] by: missing; name the field of \"last_login\" that holds the user id"
    );
    let e = one(&edited("topic = \"digest\"\n", ""));
    assert_eq!(
        e,
        "campaign.toml:1: topic: missing; name a topic id of shared/topics.json"
    );
    let e = one(&edited(
        "data = \"followers\"\nwhen = \"empty\"\n",
        "data = \"followers\"\n",
    ));
    assert_eq!(
        e,
        "campaign.toml:52: [[skip]] #1 when: missing; write when = \"empty\""
    );
}

#[test]
fn bad_names_and_values_are_refused() {
    let e = one(&edited("name = \"digest-test\"", "name = \"Digest <b>\""));
    assert!(
        e.starts_with("campaign.toml:2: name: \"Digest <b>\" is not 1-40 of a-z, 0-9 and -"),
        "{e}"
    );
    let e = one(&edited("name = \"digest-test\"", "name = \"weekly\""));
    assert!(
        e.starts_with("campaign.toml:2: name: \"weekly\" is the built-in digest's"),
        "{e}"
    );
    let e = one(&edited("topic = \"digest\"", "topic = \"dïgest\""));
    assert!(e.starts_with("campaign.toml:4: topic: "), "{e}");
    let e = one(&edited("[data.last_login]", "[data.\"Last Login\"]"));
    assert!(
        e.starts_with("campaign.toml:46: [data.Last Login]: \"Last Login\" is not a name"),
        "{e}"
    );
    let e = one(&edited(
        "reason = \"no_new_followers\"",
        "reason = \"No new followers!\"",
    ));
    assert!(
        e.starts_with("campaign.toml:55: [[skip]] #1 reason: \"No new followers!\" is not 1-40"),
        "{e}"
    );
    let e = one(&edited("data = \"followers\"", "data = \"folowers\""));
    assert_eq!(e, "campaign.toml:53: [[skip]] #1 data: \"folowers\" is not a data query; name one of: followers, last_login");
    let e = one(&edited("when = \"empty\"", "when = \"zero\""));
    assert!(
        e.starts_with("campaign.toml:54: [[skip]] #1 when: \"zero\" is not a condition"),
        "{e}"
    );
    let e = one(&edited("shown = 10", "shown = 10\nsince = 10"));
    assert!(
        e.starts_with("campaign.toml:11: [params] since: $$since is already a variable"),
        "{e}"
    );
    let e = one(&edited(
        "schedule = \"cron(0 9 ? * MON *)\"",
        "schedule = \"every monday\"",
    ));
    assert!(e.starts_with("campaign.toml:6: schedule: \"every monday\" is not an EventBridge Scheduler expression"), "{e}");
    let e = one(&edited("window_days = 7", "window_days = 0"));
    assert!(
        e.starts_with("campaign.toml:7: window_days: 0 is not 1 to 366"),
        "{e}"
    );
    let e = one(&edited("by = \"followeeId\"", "by = \"$followeeId\""));
    assert!(
        e.starts_with("campaign.toml:20: [audience] by: \"$followeeId\" is not a field path"),
        "{e}"
    );
    let e = one(&edited(
        "collection = \"sessions\"",
        "collection = \"system.users\"",
    ));
    assert!(e.starts_with("campaign.toml:47: [data.last_login] collection: \"system.users\" is not a collection name"), "{e}");
    let e = one(&edited("picks = \"follow-back\"", "picks = \"random\""));
    assert!(
        e.starts_with(
            "campaign.toml:58: [open_content] picks: \"random\" is not a source of picks"
        ),
        "{e}"
    );
}

#[test]
fn pipelines_are_checked_on_their_lines() {
    // A stage that writes, inside $lookup's pipeline, on the line it is written.
    let e = one(&edited(
        "    {\"$project\": {\"name\": 1}}\n",
        "    {\"$project\": {\"name\": 1}},\n    {\"$merge\": {\"into\": \"x\"}}\n",
    ));
    assert_eq!(e, "campaign.toml:40: [data.followers] pipeline: $merge writes to the database; a definition only reads: remove it");
    let e = one(&edited(
        "  {\"$project\": {\"followeeId\": 1}}\n",
        "  {\"$facet\": {\"a\": [{\"$out\": \"x\"}]}}\n",
    ));
    assert_eq!(e, "campaign.toml:24: [audience] pipeline: $out writes to the database; a definition only reads: remove it");
    let e = one(&edited(
        "\"$$since\"]}, {\"$lt\"",
        "\"$$sinse\"]}, {\"$lt\"",
    ));
    assert!(e.starts_with("campaign.toml:23: [audience] pipeline: $$sinse is not defined; use one of $$campaign, $$params, $$shown, $$since, $$until"), "{e}");
    // $$userIds is the data queries'.
    let e = one(&edited(
        "{\"$project\": {\"followeeId\": 1}}",
        "{\"$match\": {\"$expr\": {\"$in\": [\"$followeeId\", \"$$userIds\"]}}}",
    ));
    assert!(
        e.starts_with("campaign.toml:24: [audience] pipeline: $$userIds is not defined"),
        "{e}"
    );
    let e = one(&edited(
        "{\"$sort\": {\"at\": -1}}",
        "{\"$sort\": {\"at\": -1}, \"$limit\": 1}",
    ));
    assert!(
        e.starts_with("campaign.toml:50: [data.last_login] pipeline: stage 1 has 2 keys"),
        "{e}"
    );
    let e = one(&edited(
        "  {\"$sort\": {\"createdAt\": -1, \"_id\": 1}},\n",
        "  {\"$sort\": {\"createdAt\": -1, \"_id\": 1}}\n",
    ));
    assert!(
        e.starts_with(
            "campaign.toml:37: [data.followers] pipeline: not JSON (expected `,` or `]`)"
        ),
        "{e}"
    );
}

#[test]
fn templates_are_laid_out_per_language() {
    let mut files = good();
    files.remove("templates/fr/body.txt.j2");
    assert_eq!(one(&files), "templates/fr/: body.txt.j2 missing; every language folder has subject.txt.j2, body.mjml.j2, body.txt.j2");

    let mut files = good();
    files.remove("templates/pt-BR/b/body.mjml.j2");
    files.remove("templates/pt-BR/b/body.txt.j2");
    assert_eq!(one(&files), "templates/pt-BR/b/: missing (en has variant b); every language has every variant: add its body.mjml.j2 and body.txt.j2");

    let mut files = good();
    files.remove("templates/en/b/body.txt.j2");
    assert_eq!(
        one(&files),
        "templates/en/b/: body.txt.j2 missing; a variant has body.mjml.j2, body.txt.j2"
    );

    let mut files = good();
    let subject = files.remove("templates/fr/subject.txt.j2").unwrap();
    files.insert("templates/French/subject.txt.j2".into(), subject);
    let errors = errors(&files);
    assert!(errors.contains(&"templates/French/: not a language tag (en, pt-BR, es-419); name the folder after its language".to_owned()), "{errors:#?}");

    let e = one(&edited(
        "default_language = \"en\"",
        "default_language = \"de\"",
    ));
    assert_eq!(e, "campaign.toml:5: default_language: \"de\" has no folder templates/de/; add it (subject.txt.j2, body.mjml.j2, body.txt.j2) or name one of: en, fr, pt-BR");
}

#[test]
fn files_keep_to_the_limits_and_safe_names() {
    let mut files = good();
    for i in 0..200 {
        files.insert(format!("templates/partials/p{i}.j2"), String::new());
    }
    assert!(one(&files).starts_with("the definition has 220 files; at most 200"));

    let mut files = good();
    files.insert("templates/big.j2".into(), "x".repeat(300 * 1024));
    let e = one(&files);
    assert!(
        e.starts_with("the definition's files hold 30")
            && e.ends_with(" KiB; at most 300 KiB: make them smaller"),
        "{e}"
    );

    for (path, why) in [
        ("templates/../../etc/passwd.j2", "an empty, . or .. part"),
        ("templates/.secret.j2", "a hidden name"),
        ("templates/en/<b>.j2", "a name with characters other than"),
        ("templates/en/café.j2", "a name with characters other than"),
        ("notes.txt", "not a definition's file"),
        ("samples/a/b.json", "not a definition's file"),
        ("templates/logo.png", "not a definition's file"),
    ] {
        let mut files = good();
        files.insert(path.into(), String::new());
        let e = one(&files);
        assert!(e.contains(why), "{path}: {e}");
    }

    let mut files = good();
    files.remove("campaign.toml");
    assert!(one(&files).starts_with("campaign.toml: missing;"));
}

#[test]
fn hostile_text_never_panics() {
    for text in ["", "\u{0}", "[[[", "name = '''", "a.b.c = 1\n[a]\nb = 2", "audience = 5", "data = 5", "skip = 5", "[[data]]\nx = 1", "params = [1]", "[data.x]\npipeline = '''[{\"$match\": {\"$expr\": {\"$map\": 5}}}]'''", "[audience]\npipeline = '''[{\"$lookup\": {\"pipeline\": 5}}, {\"$facet\": 5}, {\"$let\": {\"vars\": 1}}]'''"] {
        let mut files = good();
        files.insert("campaign.toml".into(), text.into());
        assert!(Definition::load(&files).is_err(), "{text:?}");
    }
}
