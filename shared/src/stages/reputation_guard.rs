//! ReputationGuard: SES reviews an account whose bounce rate reaches 5 % or complaint rate
//! 0.1 % (and may stop its sending at 10 % / 0.5 %). CloudWatch alarms on the account's own
//! `AWS/SES Reputation.BounceRate` and `Reputation.ComplaintRate` (published by SES at no
//! cost, nothing counted per email here) fire below those thresholds and notify an SNS topic;
//! this function, subscribed to it, stops the consumers of the campaign queues (their event
//! source mappings) and pauses every running campaign, saying why. Only an operator resumes
//! (`mailctl resume`): an alarm returning to OK changes nothing.

use crate::domain::campaign_state::StateChange;
use crate::domain::ledger::epoch_ms;
use crate::ports::{ControlError, SendingSwitch};
use aws_lambda_events::event::sns::SnsEvent;
use serde::Deserialize;
use std::time::SystemTime;

/// Who the guard's pauses are recorded as.
pub const GUARD: &str = "reputation-guard";

/// A CloudWatch alarm's state change as it arrives in an SNS message.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AlarmNotification {
    alarm_name: String,
    new_state_value: String,
    #[serde(default)]
    new_state_reason: String,
    #[serde(default)]
    trigger: Option<Trigger>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Trigger {
    #[serde(default)]
    metric_name: String,
    #[serde(default)]
    threshold: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Alarm notifications in state ALARM.
    pub alarms: usize,
    /// Event source mappings disabled.
    pub consumers_stopped: usize,
    /// Campaigns this invocation paused.
    pub paused: Vec<String>,
    /// Notifications that were not an alarm's state change, or not ALARM (logged).
    pub ignored: usize,
}

pub struct ReputationGuard<S> {
    switch: S,
}

impl<S: SendingSwitch> ReputationGuard<S> {
    pub fn new(switch: S) -> Self {
        Self { switch }
    }

    /// An SNS delivery (one record on AWS). Fails only when the switch cannot be reached, so
    /// that Lambda retries the notification; an unreadable message is logged and dropped.
    pub async fn handle(&self, event: SnsEvent) -> Result<Summary, ControlError> {
        let mut summary = Summary::default();
        let mut reasons = Vec::new();
        for record in &event.records {
            match serde_json::from_str::<AlarmNotification>(&record.sns.message) {
                Ok(alarm) if alarm.new_state_value == "ALARM" => {
                    summary.alarms += 1;
                    reasons.push(describe(&alarm));
                }
                Ok(alarm) => {
                    summary.ignored += 1;
                    tracing::info!(alarm = %alarm.alarm_name, state = %alarm.new_state_value, "reputation alarm left ALARM: paused campaigns stay paused until an operator resumes them");
                }
                Err(err) => {
                    summary.ignored += 1;
                    tracing::error!(message_id = %record.sns.message_id, reason = %err, "not a CloudWatch alarm notification; ignored");
                }
            }
        }
        if reasons.is_empty() {
            return Ok(summary);
        }
        // Consumers first: that alone stops every campaign within seconds. A consumer that
        // cannot be stopped keeps no campaign running: each is paused all the same (the
        // functions hold a paused campaign's records back), and then the error, which names
        // the consumer left running, has Lambda deliver the alarm again.
        let stopped = self.switch.stop_consumers().await;
        summary.consumers_stopped = *stopped.as_ref().unwrap_or(&0);
        let change = StateChange {
            at_ms: epoch_ms(SystemTime::now()),
            by: GUARD.into(),
            reason: reasons.join("; "),
        };
        for campaign in self.switch.running_campaigns().await? {
            if self.switch.pause(&campaign, &change).await? {
                summary.paused.push(campaign);
            }
        }
        if let Err(err) = stopped {
            tracing::error!(paused = ?summary.paused, reason = %err, "SES reputation alarm: campaigns paused, but a consumer of the campaign queues still runs");
            return Err(ControlError(format!(
                "campaigns paused ({}), but not every consumer is stopped: {err}",
                summary.paused.join(", ")
            )));
        }
        tracing::warn!(
            consumers_stopped = summary.consumers_stopped,
            paused = ?summary.paused,
            reason = %change.reason,
            "SES reputation alarm: sending paused; check bounces and complaints, then `mailctl resume`"
        );
        Ok(summary)
    }
}

fn describe(alarm: &AlarmNotification) -> String {
    let (metric, threshold) = match &alarm.trigger {
        Some(t) => (t.metric_name.as_str(), t.threshold),
        None => ("", None),
    };
    let threshold = threshold.map_or(String::new(), |t| format!(" (threshold {t})"));
    format!(
        "alarm {} on SES {metric}{threshold}: {}",
        alarm.alarm_name, alarm.new_state_reason
    )
}

// The summary is the response.
crate::runtime::serve::stage! {
    impl<S: SendingSwitch> for ReputationGuard<S> {
        SnsEvent => Result<(Summary, ()), ControlError>,
        |stage, event, _invocation| Ok((stage.handle(event).await?, ()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::campaign_state::Hold;
    use crate::ports::memory::MemoryCampaigns;
    use crate::ports::CampaignStates;
    use aws_lambda_events::event::sns::SnsRecord;

    pub fn notification(state: &str) -> String {
        serde_json::json!({
            "AlarmName": "mailflow-BounceRate",
            "NewStateValue": state,
            "NewStateReason": "Threshold Crossed: 1 datapoint [0.046] was greater than or equal to the threshold (0.04).",
            "StateChangeTime": "2026-11-24T10:05:00.000+0000",
            "OldStateValue": "OK",
            "Trigger": {"MetricName": "Reputation.BounceRate", "Namespace": "AWS/SES", "Threshold": 0.04}
        })
        .to_string()
    }

    fn event(messages: &[String]) -> SnsEvent {
        let mut event = SnsEvent::default();
        for (i, m) in messages.iter().enumerate() {
            let mut record = SnsRecord::default();
            record.sns.message_id = format!("m{i}");
            record.sns.message = m.clone();
            event.records.push(record);
        }
        event
    }

    fn campaign(id: &str) -> crate::domain::campaign::Campaign {
        let week = crate::domain::campaign::Campaign::from_id("weekly-2026-W47", None).unwrap();
        crate::domain::campaign::Campaign::from_id(id, Some(week.window)).unwrap()
    }

    #[tokio::test]
    async fn an_alarm_stops_the_consumers_and_pauses_every_running_campaign() {
        let campaigns = MemoryCampaigns::default();
        for id in ["a", "b", "gone"] {
            campaigns
                .register(&campaign(id), &Default::default(), None, None, 1)
                .await
                .unwrap();
        }
        campaigns.cancel("gone");
        let guard = ReputationGuard::new(campaigns);
        let summary = guard.handle(event(&[notification("ALARM")])).await.unwrap();
        assert_eq!(summary.paused, ["a", "b"]);
        assert_eq!(summary.consumers_stopped, 3);
        let switch = &guard.switch;
        assert!(*switch.consumers_stopped.lock().unwrap());
        match switch.hold_of("a") {
            Some(Hold::Paused(change)) => {
                assert_eq!(change.by, GUARD);
                assert!(change
                    .reason
                    .contains("Reputation.BounceRate (threshold 0.04)"));
            }
            other => panic!("a: {other:?}"),
        }
        assert!(matches!(switch.hold_of("gone"), Some(Hold::Cancelled(_))));
    }

    /// A switch whose consumers cannot all be stopped.
    struct Stuck(MemoryCampaigns);

    impl SendingSwitch for Stuck {
        async fn stop_consumers(&self) -> Result<usize, ControlError> {
            Err(ControlError("event source mapping(s) left enabled: emails (could not disable it, 6 attempt(s): ResourceInUseException)".into()))
        }

        async fn running_campaigns(&self) -> Result<Vec<String>, ControlError> {
            self.0.running_campaigns().await
        }

        async fn pause(&self, id: &str, change: &StateChange) -> Result<bool, ControlError> {
            SendingSwitch::pause(&self.0, id, change).await
        }
    }

    #[tokio::test]
    async fn a_consumer_that_cannot_be_stopped_still_pauses_every_campaign_and_is_named() {
        let campaigns = MemoryCampaigns::default();
        for id in ["a", "b"] {
            campaigns
                .register(&campaign(id), &Default::default(), None, None, 1)
                .await
                .unwrap();
        }
        let guard = ReputationGuard::new(Stuck(campaigns));
        let err = guard
            .handle(event(&[notification("ALARM")]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "campaigns paused (a, b), but not every consumer is stopped: event source mapping(s) left enabled: emails (could not disable it, 6 attempt(s): ResourceInUseException)"
        );
        for id in ["a", "b"] {
            assert!(
                matches!(guard.switch.0.hold_of(id), Some(Hold::Paused(_))),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn ok_and_unreadable_notifications_change_nothing() {
        let guard = ReputationGuard::new(MemoryCampaigns::default());
        guard
            .switch
            .register(&campaign("a"), &Default::default(), None, None, 1)
            .await
            .unwrap();
        let summary = guard
            .handle(event(&[notification("OK"), "not json".into()]))
            .await
            .unwrap();
        assert_eq!(summary.ignored, 2);
        assert!(!*guard.switch.consumers_stopped.lock().unwrap());
        assert_eq!(guard.switch.hold_of("a"), None);
    }
}
