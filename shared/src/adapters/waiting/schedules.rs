//! The one-time EventBridge Scheduler schedules that release a send slot (and sweep it):
//! their names, their `at(...)` expressions, and their creation, idempotent.

use super::{store_error, WaitingTable};
use crate::adapters::describe;
use crate::domain::campaign::CampaignId;
use crate::ports::{SlotSchedule, StoreError};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A schedule's name: at most 64 characters, unique per campaign, slot and kind.
pub fn schedule_name(campaign: &CampaignId, schedule: SlotSchedule) -> String {
    let digest = Sha256::digest(campaign.as_str().as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let kind = if schedule.sweep { "sweep" } else { "release" };
    format!("{kind}-{hex}-{}", schedule.slot_ms)
}

/// `at(...)`, the one-time schedule expression: whole seconds, UTC, never before `at_ms`.
pub fn at_expression(at_ms: i64) -> String {
    let seconds = at_ms.div_euclid(1000) + i64::from(at_ms.rem_euclid(1000) > 0);
    let at = jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::MAX);
    format!("at({})", at.strftime("%Y-%m-%dT%H:%M:%S"))
}

impl WaitingTable {
    pub(super) async fn create_schedule(
        &self,
        campaign: &CampaignId,
        schedule: SlotSchedule,
        target_arn: &str,
        event: &Value,
    ) -> Result<(), StoreError> {
        use aws_sdk_scheduler::types::{
            ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode,
            RetryPolicy, Target,
        };
        // Retried for a day (Scheduler's longest), then on the DLQ and its alarm: a slot is
        // never dropped silently.
        let retry = RetryPolicy::builder()
            .maximum_event_age_in_seconds(86_400)
            .maximum_retry_attempts(185)
            .build();
        let target = Target::builder()
            .arn(target_arn)
            .role_arn(&self.scheduler_role_arn)
            .input(event.to_string())
            .retry_policy(retry)
            .dead_letter_config(
                DeadLetterConfig::builder()
                    .arn(&self.dead_letter_arn)
                    .build(),
            )
            .build()
            .map_err(|e| store_error("CreateSchedule", e.to_string()))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| store_error("CreateSchedule", e.to_string()))?;
        let created = self
            .scheduler
            .create_schedule()
            .name(schedule_name(campaign, schedule))
            .group_name(&self.schedule_group)
            .schedule_expression(at_expression(schedule.fires_at_ms()))
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window)
            .target(target)
            .action_after_completion(ActionAfterCompletion::Delete)
            .send()
            .await;
        match created {
            Ok(_) => Ok(()),
            // Another segment (or a retry) created it: the slot is scheduled.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conflict_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(StoreError(format!(
                "EventBridge Scheduler: scheduling the release of a send slot in schedule group {} failed: {}",
                self.schedule_group,
                describe(&e)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_named_within_the_limit_and_never_fire_early() {
        let id = CampaignId::parse(&"c".repeat(64)).unwrap();
        let at = |slot_ms, sweep| SlotSchedule { slot_ms, sweep };
        let name = schedule_name(&id, at(1_796_029_200_000, true));
        assert!(name.len() <= 64, "{name}");
        assert_ne!(name, schedule_name(&id, at(1_796_029_260_000, true)));
        assert_ne!(name, schedule_name(&id, at(1_796_029_200_000, false)));
        assert_eq!(at_expression(1_796_029_200_000), "at(2026-11-30T09:00:00)");
        assert_eq!(at_expression(1_796_029_200_001), "at(2026-11-30T09:00:01)");
    }
}
