//! What one AWS SDK request costs in CPU with none of our code around it: conditional
//! DynamoDB UpdateItems shaped like SendEmail's ledger claim, one after another, against the
//! local stack, and this process's CPU time per request (docs/benchmarks.md: the floor under
//! SendEmail's three requests per email).
//!
//! ```sh
//! infra/local-stack.sh start; eval "$(infra/local-stack.sh env)"
//! cargo run --release -p mailflow-lab --example request_cost
//! infra/local-stack.sh stop
//! ```

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use mailflow_local::function_host::CpuTime;
use std::time::Duration;

const REQUESTS_PER_ROUND: u32 = 1000;
const ROUNDS: u32 = 3;

/// This process's CPU time so far (user and system; /proc counts in 10 ms ticks).
fn cpu_time() -> anyhow::Result<Duration> {
    CpuTime::of_process(std::process::id())
        .map(|cpu| cpu.total())
        .ok_or_else(|| anyhow::anyhow!("cannot read /proc/self/stat"))
}

// One thread, as the functions run.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let sdk = mailflow::adapters::aws_config().await;
    let dynamodb = mailflow::adapters::dynamodb_client(&sdk);
    let table = format!("request-cost-{}", std::process::id());
    let definition = AttributeDefinition::builder()
        .attribute_name("pk")
        .attribute_type(ScalarAttributeType::S)
        .build()?;
    let schema = KeySchemaElement::builder()
        .attribute_name("pk")
        .key_type(KeyType::Hash)
        .build()?;
    dynamodb
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(definition)
        .key_schema(schema)
        .send()
        .await?;
    for round in 1..=ROUNDS {
        let started = cpu_time()?;
        for i in 0..REQUESTS_PER_ROUND {
            dynamodb
                .update_item()
                .table_name(&table)
                .key("pk", AttributeValue::S(format!("user-{round}-{i}")))
                .update_expression("SET #s = :sending, startedAt = :now")
                .condition_expression("attribute_not_exists(#s)")
                .expression_attribute_names("#s", "status")
                .expression_attribute_values(":sending", AttributeValue::S("SENDING".into()))
                .expression_attribute_values(":now", AttributeValue::N("1764000000000".into()))
                .send()
                .await?;
        }
        let cpu = cpu_time()? - started;
        println!(
            "round {round}: {} µs of CPU per UpdateItem ({REQUESTS_PER_ROUND} requests)",
            cpu.as_micros() / u128::from(REQUESTS_PER_ROUND)
        );
    }
    dynamodb.delete_table().table_name(&table).send().await?;
    Ok(())
}
