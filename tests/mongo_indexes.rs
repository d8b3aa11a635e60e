//! MongoDB's indexes against the local stack: the audience a function reads is an index
//! scan, and a function whose index is missing refuses to start and names the command.

use mailflow::adapters::directory::IdType;
use mailflow::domain::campaign::Campaign;
use mailflow::domain::user_id::UserId;
use mailflow_tests::test_env;
use mongodb::bson::doc;

fn campaign() -> Campaign {
    Campaign::from_id("weekly-2026-W46", None).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn audience_query_is_an_index_scan() {
    let env = test_env("explain", |_| {}).await.unwrap();
    env.seed(50, &campaign()).await.unwrap();
    mailflow::adapters::mongo::create_indexes(&env.db)
        .await
        .unwrap();
    // The bundled digest's audience query, as GetUsers runs it for a weekly campaign.
    let digest = mailflow::ports::LoadedDefinition::bundled().unwrap();
    let topic = mailflow::domain::topics::Topics::builtin()
        .get("digest")
        .unwrap()
        .clone();
    let run = mailflow::adapters::definition::DefinitionRun::new(
        env.db.clone(),
        digest.definition.clone(),
        topic,
        &campaign().window,
        campaign().id.as_str(),
    )
    .unwrap();
    let text = UserId::Text("u0000010".into());
    let object_id = UserId::ObjectId([0x65; 12]);
    for (kind, after) in [
        (IdType::Text, None),
        (IdType::Text, Some(&text)),
        (IdType::ObjectId, None),
        (IdType::ObjectId, Some(&object_id)),
    ] {
        let explain = env
            .db
            .run_command(doc! {
                "explain": {
                    "aggregate": "follows",
                    "pipeline": run.audience_pipeline(kind, after),
                    "cursor": {},
                    "let": run.variables().clone(),
                },
                "verbosity": "queryPlanner",
            })
            .await
            .unwrap()
            .to_string();
        assert!(
            explain.contains("IXSCAN") && !explain.contains("COLLSCAN"),
            "plan: {explain}"
        );
        assert!(
            explain.contains(mailflow::adapters::mongo::FOLLOWS_INDEX),
            "plan: {explain}"
        );
        // The users side of the join: an `_id` range whatever the topic (the audience rule
        // reads the projected fields), so topics add no scan.
        let topic = mailflow::domain::topics::TopicId::parse("product-news").unwrap();
        let plan = env
            .winning_plan(doc! {
                "find": "users",
                "filter": {"_id": kind.range(after)},
                "sort": {"_id": 1},
                "projection": mailflow::adapters::preferences::standing_projection(&topic),
                "hint": {"_id": 1},
            })
            .await
            .unwrap();
        eprintln!("users scan ({kind:?}, after {after:?}): {plan}");
        assert!(
            plan.contains("IXSCAN") && !plan.contains("COLLSCAN"),
            "plan: {plan}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_without_its_index_refuses_to_start_and_says_what_to_run() {
    let env = test_env("no-index", |_| {}).await.unwrap();
    // provision() created the index, as a deployment does; a team that skipped it:
    env.db
        .collection::<mongodb::bson::Document>(mailflow::adapters::mongo::FOLLOWS)
        .drop_indexes()
        .await
        .unwrap();
    let vars = env.stack.env(mailflow_local::names::GET_USERS).unwrap();
    let config =
        mailflow::config::GetUsersConfig::from_source(&|k: &str| vars.get(k).cloned()).unwrap();
    let err = match mailflow::assemble::get_users(config, &env.stack.sdk).await {
        Ok(_) => panic!("started without its index"),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("is missing") && err.contains("mailctl create-indexes"),
        "{err}"
    );
    // Created as docs/deploying.md says, it starts.
    mailflow::adapters::mongo::create_indexes(&env.db)
        .await
        .unwrap();
    let config =
        mailflow::config::GetUsersConfig::from_source(&|k: &str| vars.get(k).cloned()).unwrap();
    assert!(mailflow::assemble::get_users(config, &env.stack.sdk)
        .await
        .is_ok());
}
