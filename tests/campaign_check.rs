//! `mailctl campaign check` and `campaign schema`, the real binary on the test definitions
//! (shared/tests/definitions): no AWS, no MongoDB.

use mailflow_tests::binary;
use std::process::Output;

fn mailctl(args: &[&str]) -> Output {
    std::process::Command::new(binary("mailctl"))
        .args(args)
        // Offline: the commands must not need any AWS configuration.
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("mailctl runs")
}

fn definition(name: &str) -> String {
    mailctl::repo_root()
        .join("shared/tests/definitions")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn a_good_definition_is_summarised() {
    let out = mailctl(&["campaign", "check", &definition("good")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "digest-test: OK (3 languages, 2 data queries, 1 skip rule)\n"
    );
}

#[test]
fn a_bad_definition_says_each_problem_on_its_line_and_exits_2() {
    let out = mailctl(&["campaign", "check", &definition("bad")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    let lines: Vec<&str> = stderr.lines().collect();
    let expected = [
        "templates/en/: body.txt.j2 missing; every language folder has subject.txt.j2, body.mjml.j2, body.txt.j2",
        "campaign.toml:1: name: \"Bad Name\" is not 1-40 of a-z, 0-9 and -; rename it",
        "campaign.toml:10: [audience] pipeline: $$sinse is not defined;",
        "campaign.toml:11: [audience] pipeline: $out writes to the database; a definition only reads: remove it",
        "campaign.toml:15: [data.orders] by: missing; name the field of \"orders\" that holds the user id",
    ];
    for e in expected {
        assert!(lines.iter().any(|l| l.starts_with(e)), "{e}\nin:\n{stderr}");
    }
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("mailctl: ") && l.ends_with("bad: 5 problems")),
        "{stderr}"
    );
    assert_eq!(lines.len(), 6, "{stderr}");
}

#[test]
fn a_folder_that_is_not_there_is_one_line() {
    let out = mailctl(&["campaign", "check", "/nonexistent/definition"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("/nonexistent/definition: "), "{stderr}");
}

#[test]
fn the_schema_is_the_published_one() {
    let out = mailctl(&["campaign", "schema"]);
    assert!(out.status.success());
    let published =
        std::fs::read_to_string(mailctl::repo_root().join("docs/campaign.schema.json")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), published);
}

#[test]
fn the_bundled_examples_pass_the_check_their_samples_rendered() {
    for (folder, summary) in [
        (
            "digest",
            "digest: OK (3 languages, 1 data query, 1 skip rule)\n",
        ),
        (
            "orders",
            "orders: OK (2 languages, 1 data query, 1 skip rule)\n",
        ),
        (
            "announcement",
            "announcement: OK (1 language, 0 data queries, 0 skip rules)\n",
        ),
    ] {
        let dir = mailctl::repo_root().join("campaigns").join(folder);
        let out = mailctl(&["campaign", "check", dir.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{folder}: {stdout}{stderr}");
        assert_eq!(stdout, summary);
    }
}

#[test]
fn a_template_that_does_not_render_a_sample_is_refused_with_its_line() {
    let dir = std::env::temp_dir().join(format!("campaign-check-{}", std::process::id()));
    let source = mailctl::repo_root().join("campaigns/orders");
    let copy = std::process::Command::new("cp")
        .args(["-r", source.to_str().unwrap(), dir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::write(
        dir.join("templates/de/subject.txt.j2"),
        "Hallo\n{{ data.orders.first.missing.field }}\n",
    )
    .unwrap();
    let out = mailctl(&["campaign", "check", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("templates/de/subject.txt.j2:2"), "{stderr}");
}
