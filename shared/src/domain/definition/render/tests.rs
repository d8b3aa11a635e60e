use super::*;
use crate::domain::definition::{DataQuery, Query, Templates};
use crate::domain::digest::hostile_names;
use serde_json::json;

use crate::domain::definition::read_folder;

/// `Templates` from a folder's files, as SPEC lays them out (what the loader will do).
fn templates_of(files: &Files, default_language: &str) -> Templates {
    let files: BTreeMap<String, String> = files
        .iter()
        .filter_map(|(path, source)| {
            let name = path.strip_prefix("templates/")?.strip_suffix(".j2")?;
            Some((name.to_owned(), source.clone()))
        })
        .collect();
    let has = |folder: &str, names: &[&str]| {
        names
            .iter()
            .all(|n| files.contains_key(&format!("{folder}/{n}")))
    };
    let languages: Vec<String> = files
        .keys()
        .filter_map(|n| n.split_once('/').map(|(l, _)| l.to_owned()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|l| has(l, &["subject.txt", "body.mjml", "body.txt"]))
        .collect();
    let variants: Vec<String> = files
        .keys()
        .filter_map(|n| {
            let mut parts = n.split('/');
            let (_, variant, _) = (parts.next()?, parts.next()?, parts.next()?);
            Some(variant.to_owned())
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|v| {
            languages
                .iter()
                .all(|l| has(&format!("{l}/{v}"), &["body.mjml", "body.txt"]))
        })
        .collect();
    Templates {
        files,
        languages,
        default_language: default_language.to_owned(),
        variants,
    }
}

fn definition_of(files: &Files, default_language: &str) -> Definition {
    let query = Query {
        collection: "follows".into(),
        pipeline: vec![],
    };
    Definition {
        name: "digest".into(),
        description: "Weekly digest of your new followers".into(),
        topic: "digest".into(),
        recipients: crate::domain::definition::Recipients {
            collection: "users".into(),
            email: "email".into(),
            name: Some("name".into()),
            language: Some("locale".into()),
            zone: Some("timezone".into()),
            subscribed: "subscribed".into(),
            topics: "topics".into(),
            suppressed: "suppression".into(),
        },
        audience: query.clone(),
        data: [(
            "followers".to_owned(),
            DataQuery {
                query,
                by: "followeeId".into(),
                user: "_id".into(),
                first: true,
            },
        )]
        .into(),
        skip: vec![],
        params: [("shown".to_owned(), json!(10))].into(),
        templates: templates_of(files, default_language),
        audience_by: "followeeId".into(),
        schedule: None,
        window_days: 7,
        open_content: Some(crate::domain::definition::PicksSource::FollowBack),
    }
}

/// The digest as a definition: `campaigns/digest/`, read by the loader.
fn digest_definition() -> (Definition, Files) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaigns/digest");
    let files = read_folder(&dir);
    let definition = Definition::load(&files).unwrap_or_else(|e| panic!("{e:#?}"));
    (definition, files)
}

const URL: &str = "https://abc123.lambda-url.us-east-1.on.aws/?token=djEK.c2ln";

fn window(id: &str) -> Window {
    crate::domain::campaign::Campaign::from_id(id, None)
        .unwrap()
        .window
}

/// One user of the digest: name, locale, count, names listed.
struct Case {
    name: Option<String>,
    locale: Option<String>,
    count: u64,
    recent: Vec<String>,
}

impl Case {
    /// `long`: the count as the driver writes an Int64 (`$numberLong`, canonical form).
    fn email_data(&self, long: bool) -> EmailData {
        let count = if long {
            json!({"$numberLong": self.count.to_string()})
        } else {
            json!(self.count)
        };
        EmailData {
            user_id: UserId::parse("u0000042").unwrap(),
            email: "ada@example.com".into(),
            name: self.name.clone(),
            language: self.locale.clone(),
            zone: None,
            data: [(
                "followers".to_owned(),
                json!({"count": count, "names": self.recent}),
            )]
            .into(),
        }
    }
}

fn picks(n: usize) -> Vec<SlotUrls> {
    (1..=n)
        .map(|i| SlotUrls {
            image: format!("https://o.example/\\ü\u{200B}/pick?t=T{i}&x=\u{301}"),
            badge: format!("https://o.example/badge?t=B{i}"),
            link: format!("https://o.example/go?t=L{i}&a=1"),
        })
        .collect()
}

/// The digest's emails over hostile data: each renders, and most come from a shape mrml
/// rendered once, every shape held to mrml's own output (`shapes`). The snapshot tests
/// (`shared/tests/templates.rs`) hold its emails byte for byte.
#[test]
fn the_digest_renders_hostile_data_in_every_language_and_body_from_checked_shapes() {
    let (definition, _) = digest_definition();
    assert_eq!(definition.templates.languages, ["de", "en", "fr"]);
    assert_eq!(definition.templates.variants, ["short"]);
    let new = DefinitionTemplates::new(&definition).unwrap();
    let topics = Topics::builtin().all();
    let w47 = window("weekly-2026-W47");
    let three = picks(3);
    let mut compared = 0;
    // Hostile names as the user's and the followers' (markup, template syntax, entities,
    // control and sentinel characters, RTL, CJK, emoji, very long), no name at all, every
    // locale (fr-CA, de_DE, an unknown one, none), 0 to 4 names listed with counts that
    // leave none, one or many unnamed, picks or none, two windows and URLs, every topic,
    // both bodies, and the count as a plain number or `$numberLong`.
    let names = hostile_names();
    let windows = [w47, window("weekly-2027-W01")];
    let urls = [
        URL.to_owned(),
        "https://u.example/\\é\u{200B}?token=a&b=c".to_owned(),
    ];
    const COUNTS: [u64; 8] = [0, 1, 2, 3, 4, 5, 6, 12_345];
    for n in 0..=names.len() {
        // n == names.len(): a user without a name (the directory's null).
        let name = names.get(n).cloned();
        for (l, locale) in ["en", "fr-CA", "de_DE", "pt", "", "FR"].iter().enumerate() {
            for recent in 0..=4usize {
                let turn = n + l + recent;
                let count = COUNTS[turn % COUNTS.len()].max(recent as u64 * (turn % 2) as u64);
                let case = Case {
                    name: name.clone(),
                    locale: (!locale.is_empty()).then(|| locale.to_string()),
                    count,
                    recent: (0..recent)
                        .map(|i| names[(n + i + 1) % names.len()].clone())
                        .collect(),
                };
                let email = Email {
                    window: &windows[turn % 2],
                    topic: &topics[turn % topics.len()],
                    manage_url: &urls[(n + count as usize) % 2],
                    picks: &three[..if (n + recent) % 2 == 0 { 0 } else { 3 }],
                    variant: [None, Some("short")][(n + l) % 2],
                    subject: None,
                };
                let out = new
                    .render(&case.email_data(turn % 3 == 0), &email)
                    .unwrap_or_else(|e| panic!("case n={n} l={l} recent={recent}: {e}"));
                assert!(!out.subject.is_empty() && out.html.contains("</html>"));
                compared += 1;
            }
        }
    }
    assert_eq!(compared, (names.len() + 1) * 6 * 5);
    // Most of those emails were made from a shape mrml rendered once, and every shape
    // was mrml's own.
    let (made, kept) = new.shapes.counts();
    assert_eq!(kept, made);
    assert!(made * 4 < compared, "{made} shapes for {compared} emails");
}

#[test]
fn a_nameless_user_is_there_in_every_language() {
    let (definition, _) = digest_definition();
    let new = DefinitionTemplates::new(&definition).unwrap();
    let w = window("weekly-2026-W47");
    for (name, language) in [(None, "fr"), (Some(" \u{0}\n"), "de"), (Some(""), "en")] {
        let case = Case {
            name: name.map(str::to_owned),
            locale: Some(language.into()),
            count: 2,
            recent: vec![],
        };
        let email = Email {
            window: &w,
            topic: Topics::builtin().weekly(),
            manage_url: URL,
            picks: &[],
            variant: None,
            subject: None,
        };
        let out = new.render(&case.email_data(false), &email).unwrap();
        assert!(out.text.contains(" there,\n"), "{language}: {}", out.text);
    }
}

#[test]
fn the_digest_samples_render_in_every_language_and_body() {
    let (definition, files) = digest_definition();
    assert_eq!(check_samples(&definition, &files), Vec::<String>::new());
    assert_eq!(
        files.keys().filter(|p| p.starts_with("samples/")).count(),
        4
    );
}

/// The digest's definition with `path` replaced (or removed, with None).
fn with_file(path: &str, source: Option<&str>) -> (Definition, Files) {
    let (_, mut files) = digest_definition();
    match source {
        Some(s) => files.insert(path.to_owned(), s.to_owned()),
        None => files.remove(path),
    };
    (definition_of(&files, "en"), files)
}

#[test]
fn an_undefined_variable_names_the_template_line_and_sample() {
    let body = "{% extends \"layout.mjml\" %}\n{% block content %}\n<mj-text>{{ user.nickname }}</mj-text>\n{% endblock %}";
    let (definition, files) = with_file("templates/fr/short/body.mjml.j2", Some(body));
    let errors = check_samples(&definition, &files);
    assert_eq!(errors.len(), 4, "{errors:#?}");
    for e in &errors {
        assert!(
            e.starts_with("templates/fr/short/body.mjml.j2:3: undefined value"),
            "{e}"
        );
        assert!(
            e.contains("(rendering samples/") && e.contains("in fr, short body"),
            "{e}"
        );
    }
    // In a partial: the partial's file and line, once per sample.
    let dates = "{%- macro date(d) -%}\n{{ d.day }} {{ d.weekday }}\n{%- endmacro -%}";
    let (definition, files) = with_file("templates/de/dates.j2", Some(dates));
    let errors = check_samples(&definition, &files);
    assert!(
        errors
            .iter()
            .all(|e| e.starts_with("templates/de/dates.j2:2: ")),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 4, "{errors:#?}");
    // A sample without the field a template reads.
    let (definition, files) = with_file(
        "samples/odd.json",
        Some(r#"{"user": {"id": "u1"}, "data": {"followers": {"count": 2}}}"#),
    );
    let errors = check_samples(&definition, &files);
    assert!(!errors.is_empty());
    assert!(
        errors
            .iter()
            .all(|e| e.contains("samples/odd.json") && e.contains("undefined value")),
        "{errors:#?}"
    );
}

#[test]
fn template_syntax_errors_name_every_file_and_line() {
    let mut files = digest_definition().1;
    files.insert(
        "templates/en/subject.txt.j2".into(),
        "{% if data %}x".into(),
    );
    files.insert("templates/de/body.txt.j2".into(), "a\nb {{ user. }}".into());
    files.remove("templates/fr/short/body.txt.j2");
    let mut definition = definition_of(&files, "en");
    // The loader would not list fr's variant without the file: a definition saying so.
    definition.templates.variants = vec!["short".into()];
    let Err(errors) = DefinitionTemplates::new(&definition) else {
        panic!("compiled");
    };
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with("templates/de/body.txt.j2:2: syntax error"),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("templates/en/subject.txt.j2:1: syntax error"),
        "{errors:#?}"
    );
    assert_eq!(
        errors[2],
        "templates/fr/short/body.txt.j2: missing (every language has its own)"
    );
    assert_eq!(check_samples(&definition, &files), errors);
}

#[test]
fn samples_are_required_and_checked_against_the_definition() {
    let (definition, mut files) = digest_definition();
    files.retain(|p, _| !p.starts_with("samples/"));
    let errors = check_samples(&definition, &files);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("add samples/<name>.json"), "{errors:?}");

    for (sample, says) in [
        ("{\"user\": {\"id\": \"u1\"},\n \"data\": {\"followers\": null},\n \"extra\": 1}", "samples/bad.json:3:8: unknown field `extra`"),
        ("{\"user\": {\"id\": \"u1\"}, \"data\": {}}", "samples/bad.json: data.followers missing"),
        ("{\"user\": {\"id\": \"u1\"}, \"data\": {\"followers\": null, \"likes\": []}}", "samples/bad.json: data.likes: campaign.toml has no [data.likes] (have: followers)"),
        ("{\"user\": {\"id\": \"oid:zz\"}, \"data\": {\"followers\": null}}", "samples/bad.json: user.id: userId \"oid:zz\" starts with"),
        ("{\"user\": {\"id\": \"\"}, \"data\": {\"followers\": null}}", "samples/bad.json: user.id: userId must be 1 to"),
        ("{\"user\": {\"id\": \"u1\"}, \"data\": {\"followers\": {\"count\": {\"$numberLong\": \"x\"}}}}", "samples/bad.json: data.followers.count.$numberLong: \"x\" is not a 64-bit whole number"),
        ("{\"user\": {\"id\": \"u1\"}, \"data\": {\"followers\": null}, \"params\": {\"sown\": 1}}", "samples/bad.json: params.sown: campaign.toml's [params] has no sown"),
        ("{\"user\": {\"id\": 42}, \"data\": {\"followers\": null}}", "samples/bad.json:1:18: invalid type: integer `42`, expected a string"),
        ("not json", "samples/bad.json:1:2: expected ident"),
        ("{\"user\": {\"id\": \"u1\"}, \"data\": {\"followers\": null}}", "undefined value"),
    ] {
        let (definition, files) = with_file("samples/bad.json", Some(sample));
        let errors = check_samples(&definition, &files);
        assert!(
            errors.first().is_some_and(|e| e.starts_with(says) || e.contains(says)),
            "{sample}: {errors:#?}"
        );
        assert!(errors.iter().all(|e| e.contains("samples/bad.json")), "{errors:#?}");
    }
}

#[test]
fn the_data_and_params_reach_the_templates_as_the_spec_says() {
    let mut files = Files::new();
    let t = |name: &str, source: &str| (format!("templates/{name}.j2"), source.to_owned());
    files.extend([
        t("en/subject.txt", "{{ params.greeting }} {{ user.name }}"),
        t("en/body.txt", "{{ subject }}|{{ user.id }}|{{ data.order.total }}|{{ data.order.at.year }}|{{ data.order.id }}|{{ data.items|length }}|{{ since.iso }}|{{ until.day }}|{{ topic }}|{{ locale }}|{{ picks|length }}|{{ leave_url }}"),
        t("en/body.mjml", "<mjml><mj-body><mj-section><mj-column><mj-text>{{ user.name }} <a href=\"{{ leave_url }}\">x</a></mj-text></mj-column></mj-section></mj-body></mjml>"),
    ]);
    let mut definition = definition_of(&files, "en");
    definition.params = [("greeting".to_owned(), json!("Hello"))].into();
    let new = DefinitionTemplates::new(&definition).unwrap();
    let user = EmailData {
        user_id: UserId::parse("oid:65a1b2c3d4e5f60718293a4b").unwrap(),
        email: "a@example.com".into(),
        name: Some("<b>Zoë</b>\u{0}".into()),
        language: Some("ja".into()),
        zone: None,
        data: [
            ("order".to_owned(), json!({"total": {"$numberDecimal": "10.50"}, "at": {"$date": "2026-03-01T10:00:00Z"}, "id": {"$oid": "65a1b2c3d4e5f60718293a4c"}})),
            ("items".to_owned(), json!([1, 2, 3])),
        ]
        .into(),
    };
    let w = window("weekly-2026-W47");
    let email = Email {
        window: &w,
        topic: Topics::builtin().weekly(),
        manage_url: "https://u.example/?token=t",
        picks: &[],
        variant: None,
        subject: None,
    };
    let out = new.render(&user, &email).unwrap();
    assert_eq!(out.subject, "Hello <b>Zoë</b>");
    assert_eq!(out.locale, "en");
    assert_eq!(
        out.text,
        "Hello <b>Zoë</b>|65a1b2c3d4e5f60718293a4b|10.50|2026|65a1b2c3d4e5f60718293a4c|3|2026-11-16T00:00:00Z|22|Weekly digest of your new followers|en|0|https://u.example/?token=t&leave=1"
    );
    assert!(
        out.html.contains("&lt;b&gt;Zoë&lt;&#x2f;b&gt;"),
        "{}",
        out.html
    );
    assert!(
        out.html
            .contains("href=\"https://u.example/?token=t&amp;leave=1\""),
        "{}",
        out.html
    );
    // A variant the definition does not have, and data that does not convert, fail this
    // email with an error that says so.
    let err = new
        .render(
            &user,
            &Email {
                variant: Some("long"),
                subject: None,
                ..email
            },
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("templates/en/long/body.txt.j2"),
        "{err}"
    );
    let mut bad = user.clone();
    bad.data
        .insert("order".into(), json!({"at": {"$date": "soon"}}));
    let err = new.render(&bad, &email).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the data: data.order.at.$date: \"soon\""),
        "{err}"
    );
}

/// Rendering time per email of the digest's definition (its shape cache warm after the
/// first shapes), three runs. Build optimised for figures that mean anything (`--profile
/// lab`). `MEASURE_EMAILS` sets how many (default 2000).
#[test]
#[ignore = "a measure, not a check: prints µs per email"]
fn measure_render_per_email() {
    let emails: usize = std::env::var("MEASURE_EMAILS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let (definition, _) = digest_definition();
    let new = DefinitionTemplates::new(&definition).unwrap();
    let w = window("weekly-2026-W47");
    let topic = Topics::builtin().weekly();
    let people = [
        "Ada Lovelace",
        "Grace Hopper",
        "Linus",
        "Émilie du Châtelet",
        "李小龍",
        "Tom & Jerry",
        "Margaret Hamilton",
    ];
    let cases: Vec<Case> = (0..emails)
        .map(|i| {
            let shown = [0, 1, 3, 5][i % 4];
            Case {
                name: (i % 11 != 0).then(|| format!("{} {i}", people[i % people.len()])),
                locale: Some(["en-GB", "fr-CA", "de_DE", "en"][i % 4].into()),
                count: [1, 3, 5, 12, 40][i % 5].max(shown as u64),
                recent: (0..shown)
                    .map(|k| people[(i + k) % people.len()].to_owned())
                    .collect(),
            }
        })
        .collect();
    let inputs: Vec<EmailData> = cases.iter().map(|c| c.email_data(false)).collect();
    let email = Email {
        window: &w,
        topic,
        manage_url: URL,
        picks: &[],
        variant: None,
        subject: None,
    };
    for run in 1..=3 {
        let start = std::time::Instant::now();
        let bytes: usize = (inputs.iter())
            .map(|e| new.render(e, &email).unwrap().html.len())
            .sum();
        assert!(bytes > 0);
        let per_email = start.elapsed().as_secs_f64() * 1e6 / emails as f64;
        println!("run {run}, {emails} emails, µs/email: {per_email:.1}");
    }
}

/// An experiment is judged by its subjects alone: a version whose own template fails a
/// sample (checked when it was pushed, read otherwise by another build) does not make a
/// sound experiment's subjects wrong.
#[test]
fn an_experiment_is_refused_for_its_subjects_not_for_the_definitions_templates() {
    let (definition, files) = with_file("templates/en/body.txt.j2", Some("{{ nope }}"));
    let experiment = |en: &str| {
        crate::domain::experiment::Experiment::parse(
            &json!({"variants": [
                {"name": "own"},
                {"name": "count", "subject": {"en": en, "fr": "x", "de": "x"}},
            ], "testPercent": 100, "waitHours": 3, "minDelivered": 1, "minPeople": 1})
            .to_string(),
        )
        .unwrap()
    };
    check_experiment(
        &experiment("{{ data.followers.count }} new"),
        &definition,
        &files,
    )
    .unwrap();
    let err = check_experiment(&experiment("{{ nope }}"), &definition, &files).unwrap_err();
    assert!(
        err.starts_with(
            "experiment variant count: the experiment variant's en subject:1: undefined value"
        ),
        "{err}"
    );
    let err = check_experiment(&experiment(&"x".repeat(501)), &definition, &files).unwrap_err();
    assert!(err.contains("501 bytes of template; at most 500"), "{err}");
}
