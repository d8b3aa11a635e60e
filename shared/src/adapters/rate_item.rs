//! The stack's send-rate item (`RateBucket`), in the campaigns table under a key no campaign
//! can have (`#send-rate`: campaign ids are letters, digits and `._-`). It holds the next free
//! send time and the shared rate (`domain::send_rate`):
//!
//! - a take is one UpdateItem: `ADD nextFreeUs` while the schedule runs ahead of now (atomic,
//!   so environments taking at once get consecutive slots without a read or a retry), or, when
//!   the stack was idle, `SET nextFreeUs` to now plus the chunk, on the condition that it still
//!   is idle (the rare race retries the ADD). A schedule already past the taker's deadline is
//!   left as it is (the refused write returns it, so the taker knows when to come back);
//! - a rate change is a conditional SET on `rateChangedAt`, so that the throttles of one burst,
//!   reported by many environments at once, lower the rate once.
//!
//! Nothing per environment is kept in it, so the item stays under 1 KB and a take costs one
//! write request unit however many environments send (at 20,000 emails/s that is hundreds).
//! One write per take: 0.050-0.075 per email where
//! the rate is the bottleneck (a take serves two full batches), 0.21 in the benchmark, where
//! SendEmail outruns its queue and most batches are partial (docs/benchmarks.md).

use super::describe;
use super::item::{n, number, s, Item};
use crate::domain::send_rate::{RateSource, SharedRate, Slots};
use crate::ports::{RateBucket, RateError, RateView, SlotRequest, Taken};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

/// The item's key in the campaigns table.
pub const RATE_ITEM_KEY: &str = "#send-rate";

#[derive(Clone)]
pub struct RateItem {
    client: Client,
    table: String,
}

fn view(item: &Item) -> RateView {
    let source = match item.get("rateSource") {
        Some(AttributeValue::S(s)) => RateSource::parse(s),
        _ => None,
    };
    let rate = match (
        number(item, "rate"),
        number(item, "ceiling"),
        source,
        number(item, "rateChangedAt"),
    ) {
        (Some(rate), Some(ceiling), Some(source), Some(changed_at_ms)) => Some(SharedRate {
            rate,
            ceiling,
            source,
            changed_at_ms,
            lowered_at_ms: number(item, "rateLoweredAt").unwrap_or(0),
            // An item from before this attribute: a ceiling not set from the configuration
            // may be SES's (kept: the conservative reading).
            ceiling_from_ses: match item.get("ceilingFromSes") {
                Some(AttributeValue::Bool(from_ses)) => *from_ses,
                _ => source != RateSource::Configured,
            },
        }),
        _ => None,
    };
    RateView { rate }
}

fn refused(err: &SdkError<UpdateItemError, impl std::fmt::Debug>) -> bool {
    matches!(err, SdkError::ServiceError(e)
        if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)))
}

/// The item as it was when a condition refused the write (ALL_OLD on failure).
fn refused_item(err: &SdkError<UpdateItemError, impl std::fmt::Debug>) -> Option<Item> {
    match err {
        SdkError::ServiceError(e) => match e.err() {
            UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
            _ => None,
        },
        _ => None,
    }
}

/// How often a take races an idle-to-busy switch before it gives up (each loss means
/// another environment's write landed: progress).
const TAKE_ATTEMPTS: u32 = 4;

impl RateItem {
    /// `table`: the campaigns table (`CAMPAIGNS_TABLE_NAME`).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn error(&self, operation: &str, detail: String) -> RateError {
        RateError(format!("{operation} in {}: {detail}", self.table))
    }

    fn update(
        &self,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("campaignId", s(RATE_ITEM_KEY))
            .return_values(ReturnValue::AllNew)
    }
}

impl RateBucket for RateItem {
    async fn take(&self, request: &SlotRequest) -> Result<Taken, RateError> {
        let SlotRequest {
            count,
            interval_us,
            now_us,
            latest_us,
        } = *request;
        let span = u64::from(count) * interval_us;
        let slots = |first_us, count| Slots {
            first_us,
            interval_us,
            count,
        };
        for _ in 0..TAKE_ATTEMPTS {
            // The schedule runs ahead of now (but not past `latest`): the next slots after it.
            let update = self
                .update()
                .update_expression("ADD nextFreeUs :span")
                .condition_expression("nextFreeUs BETWEEN :now AND :latest")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .expression_attribute_values(":span", n(span))
                .expression_attribute_values(":now", n(now_us))
                .expression_attribute_values(":latest", n(latest_us));
            let old = match update.send().await {
                Ok(out) => {
                    let item = out.attributes.unwrap_or_default();
                    let next_free: u64 = number(&item, "nextFreeUs")
                        .ok_or_else(|| self.error("take send slots", "no nextFreeUs".into()))?;
                    return Ok(Taken {
                        slots: slots(next_free - span, count),
                        view: view(&item),
                    });
                }
                Err(err) if refused(&err) => refused_item(&err).unwrap_or_default(),
                Err(err) => return Err(self.error("take send slots", describe(&err))),
            };
            if let Some(next_free) = number::<u64>(&old, "nextFreeUs") {
                if next_free > latest_us {
                    // Too far ahead for this invocation: nothing taken, say when it frees up.
                    return Ok(Taken {
                        slots: slots(next_free, 0),
                        view: view(&old),
                    });
                }
            }
            // Idle (or never used): the slots start now. (`envs`, the map of environments an
            // older version kept here, goes: it made every take's write grow with them.)
            let idle = self
                .update()
                .update_expression("SET nextFreeUs = :end REMOVE envs")
                .condition_expression("attribute_not_exists(nextFreeUs) OR nextFreeUs < :now")
                .expression_attribute_values(":end", n(now_us + span))
                .expression_attribute_values(":now", n(now_us))
                .send()
                .await;
            match idle {
                Ok(out) => {
                    return Ok(Taken {
                        slots: slots(now_us, count),
                        view: view(&out.attributes.unwrap_or_default()),
                    })
                }
                Err(err) if refused(&err) => {}
                Err(err) => return Err(self.error("take send slots", describe(&err))),
            }
        }
        Err(self.error(
            "take send slots",
            format!("lost {TAKE_ATTEMPTS} races in a row"),
        ))
    }

    async fn change_rate(
        &self,
        seen: Option<&SharedRate>,
        next: &SharedRate,
    ) -> Result<bool, RateError> {
        let request = self
            .update()
            .update_expression(
                "SET rate = :rate, ceiling = :ceiling, rateSource = :source, \
                 rateChangedAt = :at, rateLoweredAt = :lowered, ceilingFromSes = :fromSes",
            )
            .expression_attribute_values(":fromSes", AttributeValue::Bool(next.ceiling_from_ses))
            .expression_attribute_values(":lowered", n(next.lowered_at_ms))
            .expression_attribute_values(":rate", n(next.rate))
            .expression_attribute_values(":ceiling", n(next.ceiling))
            .expression_attribute_values(":source", s(next.source.as_str()))
            .expression_attribute_values(":at", n(next.changed_at_ms));
        let request = match seen {
            None => request.condition_expression("attribute_not_exists(rateChangedAt)"),
            Some(seen) => request
                .condition_expression("rateChangedAt = :seen")
                .expression_attribute_values(":seen", n(seen.changed_at_ms)),
        };
        match request.send().await {
            Ok(_) => Ok(true),
            Err(err) if refused(&err) => Ok(false),
            Err(err) => Err(self.error("change the send rate", describe(&err))),
        }
    }

    async fn read(&self) -> Result<RateView, RateError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("campaignId", s(RATE_ITEM_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("read the send rate", describe(&e)))?;
        Ok(out.item.as_ref().map(view).unwrap_or_default())
    }
}
