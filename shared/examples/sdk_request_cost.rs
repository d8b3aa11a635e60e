//! What one DynamoDB request costs this process in CPU, alone: N conditional UpdateItems
//! (the claim's shape) against the local stack, with the SDK as the functions build it and
//! with some of its per-request machinery turned off. Run with the local stack's
//! environment: `infra/with-local-stack.sh cargo run --release -p mailflow --example
//! sdk_request_cost -- 2000`. Figures: docs/benchmarks.md.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ReturnValue, ScalarAttributeType,
};

/// This process's CPU time (user and kernel), from /proc (clock ticks of 10 ms).
fn cpu_us() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime: fields 14 and 15 of the line, 11 and 12 from the state on.
    let ticks = |i: usize| fields[i].parse::<u64>().unwrap();
    (ticks(11) + ticks(12)) * 10_000
}

async fn run(name: &str, round: &str, client: &aws_sdk_dynamodb::Client, n: usize) {
    let started = cpu_us();
    let wall = std::time::Instant::now();
    for i in 0..n {
        client
            .update_item()
            .table_name("sdk-cost")
            .key("id", AttributeValue::S(format!("{name}/{round}/u{i}")))
            .update_expression("SET #s = :s, startedAt = :t, leaseUntil = :l")
            .condition_expression("attribute_not_exists(#s) OR #s <> :s")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":s", AttributeValue::S("IN_PROGRESS".into()))
            .expression_attribute_values(":t", AttributeValue::N(i.to_string()))
            .expression_attribute_values(":l", AttributeValue::N((i + 180_000).to_string()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .expect("update");
    }
    let cpu = cpu_us() - started;
    println!(
        "{name:<30} {:>6} µs CPU per request, {:>6} µs wall",
        cpu / n as u64,
        wall.elapsed().as_micros() as u64 / n as u64
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let sdk = mailflow::adapters::aws_config().await;
    let plain = aws_sdk_dynamodb::Client::new(&sdk);
    let _ = plain
        .create_table()
        .table_name("sdk-cost")
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    let metered = mailflow::adapters::dynamodb_client(&sdk);
    let unstalled = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .stalled_stream_protection(
                aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
            )
            .build(),
    );
    let no_retry = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .stalled_stream_protection(
                aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
            )
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    );
    let clients = [
        ("as the functions build it", &metered),
        ("SDK defaults, no interceptor", &plain),
        ("stalled-stream guard off", &unstalled),
        ("that, and retries off", &no_retry),
    ];
    // Warm each (connections, credentials), then measure each twice, interleaved.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    for (name, client) in clients {
        run(name, &format!("{nonce}w"), client, 20).await;
    }
    println!("measured:");
    for round in 0..2 {
        for (name, client) in clients {
            run(name, &format!("{nonce}{round}"), client, n).await;
        }
    }
}
