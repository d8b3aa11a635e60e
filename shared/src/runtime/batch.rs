//! The SQS consumers' partial batch: every record on its own, failures reported alone.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsMessage};

/// The partial-batch driver of the SQS consumers: `process` runs on every record, at most
/// `concurrency` at once, each on its own (a bad record fails alone, never the batch), and
/// each record's message id comes back with its outcome, for the stage to count and to
/// report the failed ones with `batch_response`.
pub async fn each_record<T, F, Fut>(
    records: Vec<SqsMessage>,
    concurrency: usize,
    process: F,
) -> Vec<(String, T)>
where
    F: Fn(SqsMessage) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    use futures::stream::{self, StreamExt};
    stream::iter(records)
        .map(|record| {
            let id = record.message_id.clone().unwrap_or_default();
            let outcome = process(record);
            async move { (id, outcome.await) }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

/// Builds the partial batch response from the ids of the records that must come back.
pub fn batch_response(failed: impl IntoIterator<Item = String>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for id in failed {
        let mut item = BatchItemFailure::default();
        item.item_identifier = id;
        response.batch_item_failures.push(item);
    }
    response
}
