//! What template.yaml grants and protects: each function's role allows exactly the actions
//! the function makes, on its own resources only; queues, table and logs are encrypted; the
//! MongoDB URI and the unsubscribe signing key reach the functions through Secrets Manager,
//! never as plain parameters; the one public endpoint is bounded.

use mailflow_local::names;
use std::collections::{BTreeMap, BTreeSet};
use yaml_serde::Value;

fn template() -> Value {
    let path = mailctl::repo_root().join("template.yaml");
    yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn resources(t: &Value) -> impl Iterator<Item = (&str, &Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(id, r)| (id.as_str().unwrap(), r))
}

fn of_type<'a>(t: &'a Value, kind: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
    resources(t).filter(move |(_, r)| r["Type"].as_str() == Some(kind))
}

/// A resource as written: `!GetAtt X.Arn` -> "X.Arn", `!Sub "..."` -> the pattern, "*" -> "*".
fn spelled(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Tagged(t) => spelled(&t.value),
        other => panic!("unexpected resource {other:?}"),
    }
}

fn one_or_many(v: &Value) -> Vec<String> {
    match v {
        Value::Sequence(items) => items.iter().map(spelled).collect(),
        one => vec![spelled(one)],
    }
}

/// (action, resource) pairs a role allows: its inline policies and every `AWS::IAM::Policy`
/// attached to it.
fn grants(t: &Value, role_id: &str) -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    let role = &t["Resources"][role_id];
    let inline = role["Properties"]["Policies"].as_sequence().unwrap().iter();
    let attached = of_type(t, "AWS::IAM::Policy")
        .filter(|(_, p)| {
            p["Properties"]["Roles"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|r| spelled(r) == role_id)
        })
        .map(|(_, p)| &p["Properties"]);
    for policy in inline.chain(attached) {
        for statement in policy["PolicyDocument"]["Statement"].as_sequence().unwrap() {
            assert_eq!(statement["Effect"].as_str(), Some("Allow"));
            for action in one_or_many(&statement["Action"]) {
                for resource in one_or_many(&statement["Resource"]) {
                    pairs.insert((action.clone(), resource));
                }
            }
        }
    }
    pairs
}

const SECRET: &str = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${MongoDbUriSecretName}-*";
/// The generated secret that signs unsubscribe links (`!Ref` gives its ARN).
const SIGNING_KEY: &str = "UnsubscribeSigningKey";
const SES_IDENTITY: &str = "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:identity/*";
const SES_CONFIGURATION_SET: &str =
    "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:configuration-set/*";

/// Actions IAM grants only on "*": they name no resource (the account's own SES quota).
const ACTIONS_WITHOUT_RESOURCES: &[&str] = &[
    "ses:GetAccount",
    "lambda:GetAccountSettings",
    "dynamodb:DescribeLimits",
];

/// What each function calls (the adapters in shared/src/adapters) plus what its event source
/// mapping and its logs need, on the one resource each is for.
fn needed(function: &str) -> BTreeSet<(String, String)> {
    let logs = format!("{function}Logs.Arn");
    let mut pairs: Vec<(&str, String)> = vec![
        ("logs:CreateLogStream", logs.clone()),
        ("logs:PutLogEvents", logs),
    ];
    let poll = |queue: &str| {
        [
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
        ]
        .map(|action| (action, format!("{queue}.Arn")))
    };
    match function {
        "GetUsers" => {
            pairs.push(("sqs:SendMessage", "UsersQueue.Arn".into()));
            pairs.push(("sqs:SendMessage", "ContinuationQueue.Arn".into()));
            pairs.extend(poll(names::CONTINUATION_QUEUE));
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
            // Registers the campaign RUNNING (with its window and topic) when it starts it,
            // and records each run segment's exclusions on it.
            pairs.push(("dynamodb:UpdateItem", "CampaignsTable.Arn".into()));
            // Local-time delivery: holds users, reads a slot back, records counts; one
            // schedule per slot, in its own group, run as the scheduler role.
            for action in [
                "dynamodb:BatchWriteItem",
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
            ] {
                pairs.push((action, "WaitingTable.Arn".into()));
            }
            pairs.push((
                "scheduler:CreateSchedule",
                "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ReleaseScheduleGroup}/*".into(),
            ));
            pairs.push(("iam:PassRole", "ReleaseSchedulerRole.Arn".into()));
            // An A/B experiment is decided on its send records, read by campaign.
            pairs.push((
                "dynamodb:Query",
                "${SendsTable.Arn}/index/CampaignShardIndex".into(),
            ));
            // A failed checkpoint's backoff.
            pairs.push((
                "sqs:ChangeMessageVisibility",
                "ContinuationQueue.Arn".into(),
            ));
        }
        "CreateEmails" => {
            pairs.push(("sqs:SendMessage", "EmailsQueue.Arn".into()));
            pairs.extend(poll(names::USERS_QUEUE));
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
            pairs.push(("secretsmanager:GetSecretValue", SIGNING_KEY.into()));
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
            // The one-click unsubscribes MongoDB did not take, per batch.
            pairs.push(("dynamodb:BatchGetItem", "SendsTable.Arn".into()));
        }
        // The preference centre reads and writes MongoDB's users only (the topics live there,
        // not in an SES contact list: no `ses:` action), and notes the send record (and a
        // one-click MongoDB did not take, on an item of its own in the same table); the
        // campaigns table is read for where the campaign's users are.
        "Unsubscribe" => {
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
            pairs.push(("secretsmanager:GetSecretValue", SIGNING_KEY.into()));
            pairs.push(("dynamodb:UpdateItem", "SendsTable.Arn".into()));
            // Where the campaign keeps its recipients: its pin, the pinned version.
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
        }
        "OpenContent" => {
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
            pairs.push(("secretsmanager:GetSecretValue", SIGNING_KEY.into()));
            // Frozen picks (claim, freeze), click activity (query, totals), counts.
            for action in [
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                "dynamodb:Query",
                "dynamodb:BatchGetItem",
            ] {
                pairs.push((action, "OpenContentTable.Arn".into()));
            }
            // Opens and clicks noted for the campaign analytics.
            pairs.push(("dynamodb:UpdateItem", "SendsTable.Arn".into()));
        }
        "SesEvents" => {
            pairs.extend(poll(names::SES_EVENTS_QUEUE));
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
            pairs.push(("dynamodb:GetItem", "SendsTable.Arn".into()));
            pairs.push(("dynamodb:UpdateItem", "SendsTable.Arn".into()));
            // Where the campaign keeps its recipients (the suppression is written there).
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
        }
        "SendEmail" => {
            pairs.extend(poll(names::EMAILS_QUEUE));
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
            pairs.push(("sqs:ChangeMessageVisibility", "EmailsQueue.Arn".into()));
            // An email with no send slot in time goes back as a new, delayed message.
            pairs.push(("sqs:SendMessage", "EmailsQueue.Arn".into()));
            pairs.push(("dynamodb:UpdateItem", "SendsTable.Arn".into()));
            // Frequency caps: each user's `#caps` item, read then written conditionally.
            pairs.push(("dynamodb:GetItem", "SendsTable.Arn".into()));
            pairs.push(("dynamodb:PutItem", "SendsTable.Arn".into()));
            pairs.push(("ses:SendEmail", SES_IDENTITY.into()));
            pairs.push(("ses:SendEmail", SES_CONFIGURATION_SET.into()));
            // The shared send rate (one item: `send_email_and_rate_control_touch_only_the_rate_item`).
            // SES's quota and the mapping's concurrency are RateControl's.
            pairs.push(("dynamodb:UpdateItem", "CampaignsTable.Arn".into()));
            // A user met in their quiet hours waits in the waiting room for their end: the
            // hold and the slot's count, and the slot's schedules run as the scheduler role.
            pairs.push(("dynamodb:BatchWriteItem", "WaitingTable.Arn".into()));
            pairs.push(("dynamodb:UpdateItem", "WaitingTable.Arn".into()));
            pairs.push((
                "scheduler:CreateSchedule",
                "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ReleaseScheduleGroup}/*".into(),
            ));
            pairs.push(("iam:PassRole", "ReleaseSchedulerRole.Arn".into()));
            // An email that waited since it was rendered: the person's standing read again,
            // the pending one-click leave (the sends table), then MongoDB.
            pairs.push(("dynamodb:BatchGetItem", "SendsTable.Arn".into()));
            pairs.push(("secretsmanager:GetSecretValue", SECRET.into()));
        }
        "RateControl" => {
            // SES's quota, the account's concurrency, DynamoDB's per-table quota, the sends
            // table's own throughput, the rate item, and SendEmail's, CreateEmails' and
            // SesEvents' mappings named by their SAM ids.
            pairs.push(("ses:GetAccount", "*".into()));
            pairs.push(("lambda:GetAccountSettings", "*".into()));
            pairs.push(("dynamodb:DescribeLimits", "*".into()));
            pairs.push(("dynamodb:DescribeTable", "SendsTable.Arn".into()));
            pairs.push(("dynamodb:GetItem", "CampaignsTable.Arn".into()));
            pairs.push(("dynamodb:UpdateItem", "CampaignsTable.Arn".into()));
            for action in [
                "lambda:GetEventSourceMapping",
                "lambda:UpdateEventSourceMapping",
            ] {
                for mapping in [
                    "SendEmailFunctionEmails",
                    "CreateEmailsFunctionUsers",
                    "SesEventsFunctionSesEvents",
                ] {
                    pairs.push((
                        action,
                        format!("arn:${{AWS::Partition}}:lambda:${{AWS::Region}}:${{AWS::AccountId}}:event-source-mapping:${{{mapping}}}"),
                    ));
                }
            }
        }
        "ReputationGuard" => {
            // Lists the running campaigns and pauses them; disables exactly the three
            // campaign queues' event source mappings, named by their SAM-generated ids.
            pairs.push(("dynamodb:Scan", "CampaignsTable.Arn".into()));
            pairs.push(("dynamodb:UpdateItem", "CampaignsTable.Arn".into()));
            for mapping in [
                "GetUsersFunctionContinuation",
                "CreateEmailsFunctionUsers",
                "SendEmailFunctionEmails",
            ] {
                pairs.push((
                    "lambda:UpdateEventSourceMapping",
                    format!("arn:${{AWS::Partition}}:lambda:${{AWS::Region}}:${{AWS::AccountId}}:event-source-mapping:${{{mapping}}}"),
                ));
            }
        }
        other => panic!("no expectations for {other}"),
    }
    pairs.into_iter().map(|(a, r)| (a.to_owned(), r)).collect()
}

#[test]
fn each_function_role_allows_exactly_what_it_uses() {
    let t = template();
    assert!(
        t["Globals"]["Function"].get("Policies").is_none()
            && t["Globals"]["Function"].get("Role").is_none(),
        "roles are per function"
    );
    let roles: BTreeMap<&str, &Value> = of_type(&t, "AWS::IAM::Role").collect();
    let functions: Vec<(&str, &Value)> = of_type(&t, "AWS::Serverless::Function").collect();
    assert_eq!(functions.len(), 8);
    for (id, function) in functions {
        let name = id.strip_suffix("Function").unwrap();
        let props = &function["Properties"];
        // SAM adds broad managed policies (logs and SQS on "*") to roles it generates from
        // `Policies`; an explicit role keeps them out.
        assert!(
            props.get("Policies").is_none(),
            "{id}: use its Role, not Policies"
        );
        assert_eq!(spelled(&props["Role"]), format!("{name}Role.Arn"), "{id}");
        let role = roles[format!("{name}Role").as_str()];
        assert!(
            role["Properties"].get("ManagedPolicyArns").is_none(),
            "{id}"
        );
        let trust = &role["Properties"]["AssumeRolePolicyDocument"]["Statement"];
        assert_eq!(trust.as_sequence().unwrap().len(), 1, "{id}");
        assert_eq!(
            trust[0]["Principal"]["Service"].as_str(),
            Some("lambda.amazonaws.com"),
            "{id}"
        );
        let granted = grants(&t, &format!("{name}Role"));
        for (action, resource) in &granted {
            assert!(!action.contains('*'), "{id}: wildcard action {action}");
            if !ACTIONS_WITHOUT_RESOURCES.contains(&action.as_str()) {
                assert_ne!(resource, "*", "{id}: {action} on every resource");
            }
        }
        assert_eq!(
            granted,
            needed(name),
            "{id}: grants differ from what it uses"
        );
    }
}

/// The release schedules' role may invoke only GetUsers (by its ARN, in a policy of its own:
/// GetUsers names the role in its environment, so an inline `!GetAtt` would be circular, and
/// a name pattern breaks with a long stack name) and write only to the schedule DLQ;
/// GetUsers may pass it to EventBridge Scheduler and nothing else.
#[test]
fn the_release_schedules_can_only_invoke_get_users() {
    let t = template();
    let role = &t["Resources"]["ReleaseSchedulerRole"];
    let trust = &role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0];
    assert_eq!(
        trust["Principal"]["Service"].as_str(),
        Some("scheduler.amazonaws.com")
    );
    assert_eq!(
        spelled(&trust["Condition"]["StringEquals"]["aws:SourceAccount"]),
        "AWS::AccountId"
    );
    let expected: BTreeSet<(String, String)> = [
        ("lambda:InvokeFunction", "GetUsersFunction.Arn"),
        ("lambda:InvokeFunction", "${GetUsersFunction.Arn}:*"),
        ("sqs:SendMessage", "ScheduleDLQ.Arn"),
    ]
    .into_iter()
    .map(|(a, r)| (a.to_owned(), r.to_owned()))
    .collect();
    assert_eq!(grants(&t, "ReleaseSchedulerRole"), expected);
    let statements =
        &t["Resources"]["GetUsersRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"];
    let pass = statements
        .as_sequence()
        .unwrap()
        .iter()
        .find(|s| s["Sid"].as_str() == Some("PassSchedulerRole"))
        .unwrap();
    assert_eq!(
        pass["Condition"]["StringEquals"]["iam:PassedToService"].as_str(),
        Some("scheduler.amazonaws.com")
    );
}

/// No grant names a resource by a pattern over the stack's name: CloudFormation shortens the
/// names it generates (a function's to 64 characters), so such a pattern matches under a
/// short stack name and silently stops matching under a long one. Grants name resources by
/// `!GetAtt`/`!Ref` (tests/local_time.rs proves the release schedules' under both lengths).
#[test]
fn no_grant_names_a_resource_by_the_stacks_name() {
    let t = template();
    let policies = of_type(&t, "AWS::IAM::Role")
        .flat_map(|(id, r)| {
            r["Properties"]["Policies"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(move |p| (id, p))
        })
        .chain(of_type(&t, "AWS::IAM::Policy").map(|(id, p)| (id, &p["Properties"])));
    for (id, policy) in policies {
        for statement in policy["PolicyDocument"]["Statement"].as_sequence().unwrap() {
            for resource in one_or_many(&statement["Resource"]) {
                assert!(
                    !resource.contains("AWS::StackName"),
                    "{id}: {resource} matches generated names only under short stack names"
                );
            }
        }
    }
}

/// SendEmail may write one item of the campaigns table, the rate item, and change only the
/// mappings of its own function.
#[test]
fn send_email_and_rate_control_touch_only_the_rate_item() {
    let t = template();
    for role in ["SendEmailRole", "RateControlRole"] {
        let statements =
            &t["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"];
        let rate = statements
            .as_sequence()
            .unwrap()
            .iter()
            .find(|s| s["Sid"].as_str() == Some("SharedSendRate"))
            .unwrap_or_else(|| panic!("{role}: no statement SharedSendRate"));
        assert_eq!(
            rate["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"][0].as_str(),
            Some(mailflow::adapters::rate_item::RATE_ITEM_KEY),
            "{role}"
        );
    }
}

#[test]
fn the_public_endpoints_are_bounded_and_only_events_write_to_the_ses_events_queue() {
    let t = template();
    let mut public = Vec::new();
    for (id, function) in of_type(&t, "AWS::Serverless::Function") {
        let props = &function["Properties"];
        let Some(url) = props.get("FunctionUrlConfig") else {
            continue;
        };
        public.push(id);
        assert_eq!(url["AuthType"].as_str(), Some("NONE"));
        // A number, or a parameter whose MaxValue bounds it: at most an account's default
        // concurrency (the bound follows the send rate, docs/open-time-content.md, Capacity;
        // 1,000 environments of 128 MB cost about $6 an hour at most, plus requests).
        let reserved = &props["ReservedConcurrentExecutions"];
        let bound = reserved.as_u64().or_else(|| {
            let parameter = spelled(reserved);
            t["Parameters"][parameter.as_str()]["MaxValue"].as_u64()
        });
        assert!(
            bound.is_some_and(|n| n <= 1_000),
            "{id}: a public URL needs a concurrency bound (no surprise bill)"
        );
    }
    assert_eq!(
        public,
        ["UnsubscribeFunction", "OpenContentFunction"],
        "only Unsubscribe and OpenContent are public"
    );
    let policies: Vec<_> = of_type(&t, "AWS::SQS::QueuePolicy").collect();
    assert_eq!(policies.len(), 1);
    for statement in policies[0].1["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()
        .unwrap()
    {
        assert_eq!(
            statement["Principal"]["Service"].as_str(),
            Some("events.amazonaws.com")
        );
        assert_eq!(spelled(&statement["Action"]), "sqs:SendMessage");
        assert_eq!(
            spelled(&statement["Condition"]["ArnEquals"]["aws:SourceArn"]),
            "SesEventsRule.Arn",
            "only our rule may send"
        );
    }
}

#[test]
fn queues_table_and_logs_are_encrypted_and_logs_expire() {
    let t = template();
    let queues: Vec<_> = of_type(&t, "AWS::SQS::Queue").collect();
    assert!(queues.len() >= 6);
    for (id, queue) in queues {
        let props = &queue["Properties"];
        assert!(
            props["SqsManagedSseEnabled"].as_bool() == Some(true)
                || props.get("KmsMasterKeyId").is_some(),
            "{id} is not encrypted at rest"
        );
    }
    for (id, table) in of_type(&t, "AWS::DynamoDB::Table") {
        let sse = &table["Properties"]["SSESpecification"]["SSEEnabled"];
        assert_eq!(sse.as_bool(), Some(true), "{id} is not encrypted with KMS");
    }
    // CloudWatch Logs encrypts every log group at rest; each function writes to its own
    // group (its role can write nowhere else) and the group does not keep logs forever.
    let groups: BTreeMap<&str, &Value> = of_type(&t, "AWS::Logs::LogGroup").collect();
    for (id, function) in of_type(&t, "AWS::Serverless::Function") {
        let group = spelled(&function["Properties"]["LoggingConfig"]["LogGroup"]);
        let group = groups
            .get(group.as_str())
            .unwrap_or_else(|| panic!("{id} logs to {group}, not a log group of this stack"));
        assert!(group["Properties"].get("RetentionInDays").is_some(), "{id}");
    }
}

#[test]
fn the_mongodb_uri_comes_from_secrets_manager_not_from_parameters() {
    let t = template();
    for (id, function) in of_type(&t, "AWS::Serverless::Function") {
        let Some(env) = function["Properties"]["Environment"]["Variables"].as_mapping() else {
            continue;
        };
        for (name, _) in env {
            let name = name.as_str().unwrap();
            assert_ne!(
                name, "MONGODB_URI",
                "{id}: the URI must not be a plain variable"
            );
        }
        if env.contains_key("MONGODB_DATABASE") {
            assert!(env.contains_key("MONGODB_URI_SECRET_ID"), "{id}");
        }
        assert!(
            !env.contains_key("UNSUBSCRIBE_SECRET"),
            "{id}: the signing key must not be a plain variable"
        );
        if let Some(key) = env.get("UNSUBSCRIBE_SECRET_ID") {
            assert_eq!(spelled(key), SIGNING_KEY, "{id}");
        }
    }
    // The signing key is generated by the deployment, never typed into a parameter.
    let key = &t["Resources"][SIGNING_KEY];
    assert_eq!(key["Type"].as_str(), Some("AWS::SecretsManager::Secret"));
    assert!(key["Properties"]["GenerateSecretString"]["PasswordLength"]
        .as_u64()
        .is_some_and(|n| n >= 32));
    assert!(key["Properties"].get("SecretString").is_none());
    for (name, spec) in t["Parameters"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        let described = spec["Description"].as_str().unwrap_or_default();
        assert!(
            !["uri", "secret", "key"]
                .iter()
                .any(|word| name.to_ascii_lowercase().contains(word))
                || name.ends_with("SecretName"),
            "{name}: a connection string parameter would be visible in the stack ({described})"
        );
    }
}

/// The reputation guard is wired as docs/operating.md says: each SES reputation alarm watches the
/// account's own metric at a threshold parameter and notifies both the guard's topic and the
/// operator's, and the guard is subscribed to that topic.
#[test]
fn the_reputation_alarms_reach_the_guard_and_the_operator() {
    let t = template();
    for (alarm, metric, threshold) in [
        (
            "BounceRateAlarm",
            "Reputation.BounceRate",
            "BounceRateThreshold",
        ),
        (
            "ComplaintRateAlarm",
            "Reputation.ComplaintRate",
            "ComplaintRateThreshold",
        ),
    ] {
        let p = &t["Resources"][alarm]["Properties"];
        assert_eq!(p["Namespace"].as_str(), Some("AWS/SES"), "{alarm}");
        assert_eq!(p["MetricName"].as_str(), Some(metric), "{alarm}");
        assert_eq!(spelled(&p["Threshold"]), threshold, "{alarm}");
        let actions = format!("{:?}", p["AlarmActions"]);
        assert!(
            actions.contains("ReputationAlarmTopic") && actions.contains("AlarmTopicArn"),
            "{alarm} notifies {actions}"
        );
    }
    let events = &t["Resources"]["ReputationGuardFunction"]["Properties"]["Events"];
    let topic = &events["ReputationAlarm"]["Properties"]["Topic"];
    assert_eq!(events["ReputationAlarm"]["Type"].as_str(), Some("SNS"));
    assert_eq!(spelled(topic), "ReputationAlarmTopic");
}
