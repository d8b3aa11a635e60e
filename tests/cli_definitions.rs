//! mailctl's campaign commands with a campaign definition, through the binary against the
//! local stack: `run --definition` (the campaign id of the definition's window rule, its
//! pin), `status` and `report` naming the version it ran, a resend of a customer whose
//! address was fixed after a FAILED send, and `preview`, `test-send` and `plan` of a pushed
//! definition, of a pinned campaign and of a folder on disk (nothing pushed).

use crate::cli::{ended, last_json, mailctl, ok, status_json, unique};
use mailflow::domain::campaign::Campaign;
use mailflow::domain::topics::Topics;
use mailflow_local::seed::customer_id;
use mailflow_tests::endpoints;
use std::path::PathBuf;

/// A stack provisioned through mailctl with the orders example's customers seeded
/// (`seed --orders`).
struct OrdersStack {
    prefix: String,
    database: String,
    domain: String,
    /// The campaign `run --definition orders` runs now: orders-YYYY-Www.
    campaign: String,
}

impl OrdersStack {
    fn env(&self) -> [(&str, &str); 1] {
        [("MONGODB_DATABASE", self.database.as_str())]
    }

    fn provision_and_seed(name: &str, customers: usize) -> Self {
        endpoints();
        let prefix = unique(name);
        let database = prefix.replace('-', "_");
        let env = [("MONGODB_DATABASE", database.as_str())];
        ok(mailctl(&["provision", "--prefix", &prefix], &env));
        let domain = format!("{prefix}.example.com");
        let customers = customers.to_string();
        let seeded = ok(mailctl(
            &[
                "seed", "--orders", "--users", &customers, "--domain", &domain,
            ],
            &env,
        ));
        assert!(seeded.contains("with paid orders that week"), "{seeded}");
        let topic = Topics::builtin().get("product-news").unwrap().id.clone();
        let campaign =
            Campaign::for_definition("orders", 7, topic, time::OffsetDateTime::now_utc())
                .id
                .to_string();
        Self {
            prefix,
            database,
            domain,
            campaign,
        }
    }

    fn call(&self, args: &[&str]) -> std::process::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--prefix", self.prefix.as_str()]);
        mailctl(&all, &self.env())
    }

    /// The first seeded customers who get an email (`preview` with `definition` succeeds),
    /// with what preview printed.
    fn customers_with_email(&self, definition: &[&str], n: usize) -> Vec<(usize, String)> {
        let found: Vec<(usize, String)> = (0..40)
            .filter_map(|i| {
                let user = format!("oid:{}", customer_id(i).to_hex());
                let mut args = vec!["preview", "--user", &user];
                args.extend(definition);
                let out = self.call(&args);
                out.status
                    .success()
                    .then(|| (i, String::from_utf8_lossy(&out.stdout).into_owned()))
            })
            .take(n)
            .collect();
        assert_eq!(found.len(), n, "seeded customers who get an email");
        found
    }
}

fn orders_folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../campaigns/orders")
}

/// Sets customer `i`'s address.
fn set_address(database: &str, i: usize, address: &str) {
    let (_, uri) = endpoints();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let updated = rt.block_on(async {
        let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
        let customers = client
            .database(database)
            .collection::<mongodb::bson::Document>("customers");
        customers
            .update_one(
                mongodb::bson::doc! {"_id": customer_id(i)},
                mongodb::bson::doc! {"$set": {"contact.email": address}},
            )
            .await
            .unwrap()
    });
    assert_eq!(updated.matched_count, 1);
}

/// `run --definition orders`: refused before a push; after it, the campaign of the window
/// rule runs as the plan counted, pinned to version 1, which `status` and `report` name; the
/// customer whose address was broken is FAILED (exit status 1) and, the address fixed, a
/// `resend --include-failed` by the id alone (the pin) sends them their email. `preview` of
/// the pinned campaign, without --definition, is the email that was sent.
#[test]
fn run_of_a_pushed_definition_is_pinned_reported_and_resent() {
    let t = OrdersStack::provision_and_seed("defrun", 40);
    let out = t.call(&["run", "--definition", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no definition \"orders\" was pushed"),
        "{err}"
    );
    let folder = orders_folder();
    let folder = folder.to_str().unwrap();
    let out = t.call(&["run", "--definition", folder]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("`mailctl campaign push"),
        "{err}"
    );
    ok(t.call(&["campaign", "push", folder]));

    // One customer who would get an email gets an address SendEmail refuses.
    let (broken, _) = t.customers_with_email(&["--definition", "orders"], 1)[0].clone();
    set_address(&t.database, broken, "no-domain");

    let plan = last_json(&ok(t.call(&["plan", "--definition", "orders", "--json"])));
    assert_eq!(plan["campaignId"], t.campaign.as_str(), "{plan}");
    assert_eq!(plan["definition"], "orders v1", "{plan}");
    assert_eq!(plan["topic"], "product-news", "{plan}");
    assert_eq!(plan["wouldFail"], 1, "{plan}");
    let would_send = plan["wouldSend"].as_u64().unwrap();
    assert!(would_send > 0, "{plan}");

    let out = t.call(&["run", "--definition", "orders"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains(&format!(
            "{}: definition orders (version 1 of the latest)",
            t.campaign
        )),
        "{said}"
    );
    let run = ended(out, "run --definition");
    assert_eq!(run["campaign"]["failed"], 1, "{run}");
    assert_eq!(run["sent"].as_u64().unwrap(), would_send, "{run}");

    let status = status_json(&t.prefix, &t.campaign, &t.env());
    assert_eq!(
        status["definition"],
        serde_json::json!({"name": "orders", "version": 1}),
        "{status}"
    );
    let text = ok(t.call(&["status", "--campaign", &t.campaign]));
    assert!(text.lines().any(|l| l == "definition orders v1"), "{text}");
    let page = std::env::temp_dir().join(format!("{}-report.html", t.prefix));
    ok(t.call(&[
        "report",
        "--campaign",
        &t.campaign,
        "--out",
        page.to_str().unwrap(),
    ]));
    let html = std::fs::read_to_string(&page).unwrap();
    std::fs::remove_file(&page).ok();
    assert!(html.contains("definition orders v1"), "{html}");

    // The address fixed, a resend by the campaign id alone sends that customer only.
    let to = format!("fixed{broken}@{}", t.domain);
    set_address(&t.database, broken, &to);
    let resend = ended(
        t.call(&["resend", "--campaign", &t.campaign, "--include-failed"]),
        "resend",
    );
    assert_eq!(resend["sent"], 1, "{resend}");
    let status = status_json(&t.prefix, &t.campaign, &t.env());
    assert_eq!(status["failed"], 0, "{status}");
    assert_eq!(status["sent"].as_u64().unwrap(), would_send + 1, "{status}");

    // preview of the pinned campaign, without --definition: what the customer got.
    let (endpoint, _) = endpoints();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sent = rt
        .block_on(mailflow_local::ses_record::sent_to_domain(
            &endpoint, &t.domain,
        ))
        .unwrap();
    let email = sent.iter().find(|e| e.to == [to.clone()]).unwrap();
    let user = format!("oid:{}", customer_id(broken).to_hex());
    let html = std::env::temp_dir().join(format!("{}.html", t.prefix));
    let preview = ok(t.call(&[
        "preview",
        "--user",
        &user,
        "--campaign",
        &t.campaign,
        "--out",
        html.to_str().unwrap(),
    ]));
    let written = std::fs::read_to_string(&html).unwrap();
    std::fs::remove_file(&html).ok();
    assert_eq!(written, email.html.clone().unwrap());
    assert!(
        preview.contains(&format!("Subject: {}\n", email.subject.as_deref().unwrap())),
        "{preview}"
    );
    assert!(
        preview.ends_with(email.text.as_deref().unwrap()),
        "{preview}"
    );
    // The pin holds: another version is refused without --repin.
    let out = t.call(&[
        "run",
        "--definition",
        "orders",
        "--definition-version",
        "2",
        "--campaign",
        &t.campaign,
    ]);
    assert!(!out.status.success());

    // A recorded experiment is checked again against another version plan previews, as
    // GetUsers checks it on a repin, and not against the pinned one it started with. Written
    // into the record: this stack has no consent to tracking, so no start records one; its
    // variant has no German subject, which the folder's German templates need.
    record_experiment(
        &t,
        r#"{"variants": [{"name": "own"}, {"name": "count", "subject": {"en": "[count] {{ data.orders|length }} orders"}}],
            "testPercent": 20, "waitHours": 4}"#,
    );
    ok(t.call(&["plan", "--campaign", &t.campaign, "--json"]));
    let folder = orders_folder();
    let out = t.call(&[
        "plan",
        "--campaign",
        &t.campaign,
        "--definition",
        folder.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("experiment variant count: ")
            && err.contains("missing de"),
        "{err}"
    );
}

/// Writes `experiment` (its file's JSON) into the campaign's record, as a first start with
/// it would have.
fn record_experiment(t: &OrdersStack, experiment: &str) {
    let experiment = mailflow::domain::experiment::Experiment::parse(experiment).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let sdk = mailflow::adapters::aws_config().await;
        let target = mailctl::ops::Target::from_prefix(&sdk, &t.prefix)
            .await
            .unwrap();
        aws_sdk_dynamodb::Client::new(&sdk)
            .update_item()
            .table_name(&target.campaigns_table)
            .key(
                "campaignId",
                aws_sdk_dynamodb::types::AttributeValue::S(t.campaign.clone()),
            )
            .update_expression("SET experiment = :e")
            .condition_expression("attribute_exists(startedAt)")
            .expression_attribute_values(
                ":e",
                aws_sdk_dynamodb::types::AttributeValue::S(
                    serde_json::to_string(&experiment).unwrap(),
                ),
            )
            .send()
            .await
            .unwrap();
    });
}

/// `preview`, `test-send` and `plan` of a definition's folder, nothing pushed: the email is
/// the one the pushed version renders for the same customer, the test goes to the test
/// address only, and the plan counts the definition's audience.
#[test]
fn a_folder_is_previewed_test_sent_and_planned_without_a_push() {
    let t = OrdersStack::provision_and_seed("deffolder", 30);
    let folder = orders_folder();
    let folder = folder.to_str().unwrap();
    let (i, preview) = t.customers_with_email(&["--definition", folder], 1)[0].clone();
    let user = format!("oid:{}", customer_id(i).to_hex());
    assert!(
        preview.starts_with("To: ") && preview.lines().next().unwrap().ends_with(&t.domain),
        "{preview}"
    );

    let plan = last_json(&ok(t.call(&["plan", "--definition", folder, "--json"])));
    assert_eq!(plan["campaignId"], t.campaign.as_str(), "{plan}");
    assert!(
        plan["definition"]
            .as_str()
            .unwrap()
            .starts_with("orders (folder "),
        "{plan}"
    );
    assert!(plan["wouldSend"].as_u64().unwrap() > 0, "{plan}");
    let skipped: u64 = mailflow_tests::total(&plan["skipped"]);
    assert_eq!(
        plan["wouldSend"].as_u64().unwrap() + plan["wouldFail"].as_u64().unwrap() + skipped,
        plan["audience"].as_u64().unwrap(),
        "{plan}"
    );
    assert!(
        plan["skipped"]["no_orders"].as_u64().unwrap_or(0) > 0,
        "the definition's own skip rule: {plan}"
    );
    // A digest plan of the same stack finds no followers: the definition's audience is not
    // the digest's.
    let digest = last_json(&ok(t.call(&["plan", "--json"])));
    assert_eq!(digest["audience"], 0, "{digest}");

    let to = format!("qa@{}-inbox.example.com", t.prefix);
    let said = ok(t.call(&[
        "test-send",
        "--campaign",
        &t.campaign,
        "--definition",
        folder,
        "--user",
        &user,
        "--to",
        &to,
    ]));
    assert!(said.contains("no send record or count changed"), "{said}");
    let (endpoint, _) = endpoints();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let inbox = format!("{}-inbox.example.com", t.prefix);
    let sent = rt
        .block_on(mailflow_local::ses_record::sent_to_domain(
            &endpoint, &inbox,
        ))
        .unwrap();
    assert_eq!(sent.len(), 1, "one test email, to the test address only");
    let subject = sent[0].subject.clone().unwrap();
    assert!(
        preview.contains(&format!(
            "Subject: {}\n",
            subject.trim_start_matches("[TEST] ")
        )),
        "{subject} / {preview}"
    );
    assert!(
        preview.ends_with(sent[0].text.as_deref().unwrap()),
        "{preview}"
    );

    // Nothing was pushed; pushed, the same files render the same email.
    let out = t.call(&["run", "--definition", "orders"]);
    assert!(!out.status.success());
    ok(t.call(&["campaign", "push", folder]));
    let pushed = ok(t.call(&["preview", "--user", &user, "--definition", "orders"]));
    assert_eq!(pushed, preview);
}
