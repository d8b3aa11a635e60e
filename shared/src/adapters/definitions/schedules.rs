//! Each pushed definition's recurring schedule in EventBridge Scheduler: created, updated or
//! deleted to match the latest version's `schedule` (`mailctl campaign push`).

use super::super::describe;
use crate::ports::definitions::{check_name, DefinitionError};

/// The state a definition's schedule is written in: each firing starts the campaign of the
/// definition's window rule then (GetUsers, `{"definition": name}`).
pub const SCHEDULE_STATE: aws_sdk_scheduler::types::ScheduleState =
    aws_sdk_scheduler::types::ScheduleState::Enabled;

/// EventBridge Scheduler's context attribute for the time a firing was scheduled for,
/// replaced in a target's input when it is invoked.
pub const SCHEDULED_TIME: &str = "<aws.scheduler.scheduled-time>";

/// Each definition's recurring schedule: `definition-<name>` in the definitions' schedule
/// group, invoking GetUsers with `{"definition": "<name>", "at": <the firing's time>}` as the scheduler role, retried
/// and dead-lettered as the stack's weekly schedule is.
#[derive(Clone)]
pub struct DefinitionSchedules {
    pub scheduler: aws_sdk_scheduler::Client,
    pub group: String,
    /// The role Scheduler invokes GetUsers as (the release schedules' own).
    pub role_arn: String,
    /// GetUsers' ARN.
    pub target_arn: String,
    /// Where an invocation Scheduler could not deliver goes (the schedule DLQ).
    pub dead_letter_arn: String,
}

/// What `DefinitionSchedules::sync` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleChange {
    Created,
    Updated,
    /// The definition has no `schedule` any more: its schedule was deleted.
    Removed,
    /// No `schedule`, and none was there.
    None,
}

/// A definition's schedule's name: at most 51 characters (Scheduler allows 64).
pub fn schedule_name(name: &str) -> String {
    format!("definition-{name}")
}

impl DefinitionSchedules {
    fn error(&self, what: &str, name: &str, detail: String) -> DefinitionError {
        DefinitionError::Store(format!(
            "{what} the schedule of definition {name} in schedule group {} failed: {detail}",
            self.group
        ))
    }

    /// Creates or updates `name`'s schedule (in `SCHEDULE_STATE`) at `expression` (UTC); without one,
    /// deletes the schedule it had. Nothing else in the group is touched.
    pub async fn sync(
        &self,
        name: &str,
        expression: Option<&str>,
    ) -> Result<ScheduleChange, DefinitionError> {
        use aws_sdk_scheduler::types::{
            DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode, RetryPolicy, Target,
        };
        check_name(name)?;
        let Some(expression) = expression else {
            let deleted = self
                .scheduler
                .delete_schedule()
                .name(schedule_name(name))
                .group_name(&self.group)
                .send()
                .await;
            return match deleted {
                Ok(_) => Ok(ScheduleChange::Removed),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    Ok(ScheduleChange::None)
                }
                Err(e) => Err(self.error("deleting", name, describe(&e))),
            };
        };
        let built =
            |e: aws_sdk_scheduler::error::BuildError| self.error("building", name, e.to_string());
        // As the stack's weekly schedule: two retries, then the schedule DLQ and its alarm.
        let target = Target::builder()
            .arn(&self.target_arn)
            .role_arn(&self.role_arn)
            // Scheduler puts the firing's own time in: a retry much later still runs the
            // period the firing was for.
            .input(serde_json::json!({ "definition": name, "at": SCHEDULED_TIME }).to_string())
            .retry_policy(RetryPolicy::builder().maximum_retry_attempts(2).build())
            .dead_letter_config(
                DeadLetterConfig::builder()
                    .arn(&self.dead_letter_arn)
                    .build(),
            )
            .build()
            .map_err(built)?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(built)?;
        let description = format!("mailflow: runs definition {name} (mailctl campaign push)");
        let created = self
            .scheduler
            .create_schedule()
            .name(schedule_name(name))
            .group_name(&self.group)
            .schedule_expression(expression)
            .schedule_expression_timezone("UTC")
            .description(&description)
            .state(SCHEDULE_STATE)
            .flexible_time_window(window.clone())
            .target(target.clone())
            .send()
            .await;
        match created {
            Ok(_) => return Ok(ScheduleChange::Created),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conflict_exception()) => {}
            Err(e) => return Err(self.error("creating", name, describe(&e))),
        }
        // UpdateSchedule replaces the whole schedule: every setting again.
        self.scheduler
            .update_schedule()
            .name(schedule_name(name))
            .group_name(&self.group)
            .schedule_expression(expression)
            .schedule_expression_timezone("UTC")
            .description(description)
            .state(SCHEDULE_STATE)
            .flexible_time_window(window)
            .target(target)
            .send()
            .await
            .map_err(|e| self.error("updating", name, describe(&e)))?;
        Ok(ScheduleChange::Updated)
    }

    /// `name`'s schedule expression as Scheduler has it (None: no schedule).
    pub async fn expression(&self, name: &str) -> Result<Option<String>, DefinitionError> {
        let got = self
            .scheduler
            .get_schedule()
            .name(schedule_name(name))
            .group_name(&self.group)
            .send()
            .await;
        match got {
            Ok(schedule) => Ok(schedule.schedule_expression),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.error("reading", name, describe(&e))),
        }
    }
}
