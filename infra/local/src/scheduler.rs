//! EventBridge Scheduler, locally: moto keeps the one-time schedules GetUsers creates but
//! never fires them, so the simulator does, on a clock it controls (`SimClock`). A schedule
//! fires when the clock reaches its `at(...)`, whatever else is happening; the simulator
//! invokes its target (GetUsers) asynchronously with the schedule's input (`async_invoke`)
//! and deletes it, as `ActionAfterCompletion: DELETE` does on AWS. When nothing else is
//! happening, the clock jumps to the next schedule: a day of local times runs in minutes,
//! and the functions never know (they read the clock they are given).

use anyhow::{Context, Result};
use mailflow::ports::Clock;
use std::sync::atomic::{AtomicI64, Ordering};

/// Real time plus an offset that only grows: time runs at its normal pace (leases, timeouts
/// and delays behave), and jumps forward when the simulator skips an idle stretch.
#[derive(Default)]
pub struct SimClock {
    offset_ms: AtomicI64,
}

fn real_ms() -> i64 {
    mailflow::ports::SystemClock.now_ms()
}

impl SimClock {
    /// Moves the clock forward to `ms` (never back).
    pub fn advance_to(&self, ms: i64) {
        let wanted = ms - real_ms();
        self.offset_ms.fetch_max(wanted, Ordering::SeqCst);
    }

    /// Starts the clock at `ms` (a campaign's start, in tests), forward or back.
    pub fn set(&self, ms: i64) {
        self.offset_ms.store(ms - real_ms(), Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        real_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

/// One schedule of the group, as the simulator fires it.
#[derive(Clone, Debug)]
pub struct Due {
    pub name: String,
    pub at_ms: i64,
    pub input: serde_json::Value,
    /// The target's ARN and the role Scheduler invokes it as.
    pub target_arn: String,
    pub role_arn: String,
}

pub struct LocalScheduler {
    client: aws_sdk_scheduler::Client,
    group: String,
    /// Each schedule read once (GetUsers creates them and never changes them): the
    /// scheduler looks for due ones several times a second.
    read: std::sync::Mutex<std::collections::HashMap<String, Option<Due>>>,
}

/// The instant of `at(YYYY-MM-DDTHH:MM:SS)` (UTC).
pub fn at_ms(expression: &str) -> Option<i64> {
    let inner = expression.strip_prefix("at(")?.strip_suffix(')')?;
    let civil: jiff::civil::DateTime = inner.parse().ok()?;
    Some(
        jiff::tz::Offset::UTC
            .to_timestamp(civil)
            .ok()?
            .as_millisecond(),
    )
}

impl LocalScheduler {
    pub fn new(sdk: &aws_config::SdkConfig, group: &str) -> Self {
        Self {
            client: aws_sdk_scheduler::Client::new(sdk),
            group: group.to_owned(),
            read: Default::default(),
        }
    }

    /// Every schedule of the group, earliest first.
    pub async fn schedules(&self) -> Result<Vec<Due>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .list_schedules()
                .group_name(&self.group)
                .set_next_token(token)
                .send()
                .await
                .with_context(|| format!("listing the schedules of {}", self.group))?;
            for summary in page.schedules() {
                let Some(name) = summary.name() else { continue };
                let known = self.lock_read().get(name).cloned();
                if let Some(known) = known {
                    out.extend(known);
                    continue;
                }
                let schedule = match self
                    .client
                    .get_schedule()
                    .group_name(&self.group)
                    .name(name)
                    .send()
                    .await
                {
                    Ok(schedule) => schedule,
                    // Deleted since it was listed (fired meanwhile).
                    Err(err)
                        if err
                            .as_service_error()
                            .is_some_and(|e| e.is_resource_not_found_exception()) =>
                    {
                        continue
                    }
                    Err(err) => {
                        return Err(err).with_context(|| format!("reading schedule {name}"))
                    }
                };
                let at = schedule.schedule_expression().and_then(at_ms);
                let target = schedule.target();
                let input = target
                    .and_then(|t| t.input())
                    .and_then(|i| serde_json::from_str(i).ok());
                let due = match (at, input, target) {
                    (Some(at_ms), Some(input), Some(target)) => Some(Due {
                        name: name.to_owned(),
                        at_ms,
                        input,
                        target_arn: target.arn().to_owned(),
                        role_arn: target.role_arn().to_owned(),
                    }),
                    _ => None,
                };
                self.lock_read().insert(name.to_owned(), due.clone());
                out.extend(due);
            }
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        out.sort_by_key(|d| d.at_ms);
        Ok(out)
    }

    fn lock_read(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Option<Due>>> {
        mailflow::runtime::lock(&self.read)
    }

    pub async fn delete(&self, name: &str) -> Result<()> {
        self.lock_read().remove(name);
        let deleted = self
            .client
            .delete_schedule()
            .group_name(&self.group)
            .name(name)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            // Deleted by another look at the same due schedule.
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(())
            }
            Err(err) => Err(err).with_context(|| format!("deleting schedule {name}")),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_one_time_expressions() {
        assert_eq!(
            super::at_ms("at(2026-11-30T09:00:00)"),
            Some(1_796_029_200_000)
        );
        assert_eq!(super::at_ms("rate(1 minute)"), None);
    }
}
