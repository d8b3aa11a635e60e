//! A deployed stack's outputs as `mailctl` reads them: each `MAILFLOW_*` variable named once,
//! with the `template.yaml` output it holds, so the commands, `provision`'s exports, the
//! table in docs/operating.md and the template cannot drift apart (the tests below check the last two).

use anyhow::{Context, Result};

/// One output of the stack and the variable it is exported as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackOutput {
    pub var: &'static str,
    pub output: &'static str,
}

pub const SENDS_TABLE: StackOutput = StackOutput {
    var: "MAILFLOW_SENDS_TABLE",
    output: "SendsTableName",
};
pub const CAMPAIGNS_TABLE: StackOutput = StackOutput {
    var: "MAILFLOW_CAMPAIGNS_TABLE",
    output: "CampaignsTableName",
};
pub const WAITING_TABLE: StackOutput = StackOutput {
    var: "MAILFLOW_WAITING_TABLE",
    output: "WaitingTableName",
};
pub const OPEN_CONTENT_TABLE: StackOutput = StackOutput {
    var: "MAILFLOW_OPEN_CONTENT_TABLE",
    output: "OpenContentTableName",
};
pub const USERS_QUEUE: StackOutput = StackOutput {
    var: "MAILFLOW_USERS_QUEUE_URL",
    output: "UsersQueueUrl",
};
pub const USERS_DLQ: StackOutput = StackOutput {
    var: "MAILFLOW_USERS_DLQ_URL",
    output: "UsersDLQUrl",
};
pub const EMAILS_QUEUE: StackOutput = StackOutput {
    var: "MAILFLOW_EMAILS_QUEUE_URL",
    output: "EmailsQueueUrl",
};
pub const EMAILS_DLQ: StackOutput = StackOutput {
    var: "MAILFLOW_EMAILS_DLQ_URL",
    output: "EmailsDLQUrl",
};
pub const CONTINUATION_QUEUE: StackOutput = StackOutput {
    var: "MAILFLOW_CONTINUATION_QUEUE_URL",
    output: "ContinuationQueueUrl",
};
pub const CONTINUATION_DLQ: StackOutput = StackOutput {
    var: "MAILFLOW_CONTINUATION_DLQ_URL",
    output: "ContinuationDLQUrl",
};
pub const SES_EVENTS_QUEUE: StackOutput = StackOutput {
    var: "MAILFLOW_SES_EVENTS_QUEUE_URL",
    output: "SesEventsQueueUrl",
};
pub const SES_EVENTS_DLQ: StackOutput = StackOutput {
    var: "MAILFLOW_SES_EVENTS_DLQ_URL",
    output: "SesEventsDLQUrl",
};
pub const GET_USERS_FUNCTION: StackOutput = StackOutput {
    var: "MAILFLOW_GET_USERS_FUNCTION",
    output: "GetUsersFunctionName",
};
pub const CREATE_EMAILS_FUNCTION: StackOutput = StackOutput {
    var: "MAILFLOW_CREATE_EMAILS_FUNCTION",
    output: "CreateEmailsFunctionName",
};

pub const SEND_EMAIL_FUNCTION: StackOutput = StackOutput {
    var: "MAILFLOW_SEND_EMAIL_FUNCTION",
    output: "SendEmailFunctionName",
};

pub const RATE_CONTROL_FUNCTION: StackOutput = StackOutput {
    var: "MAILFLOW_RATE_CONTROL_FUNCTION",
    output: "RateControlFunctionName",
};

pub const EVENT_SOURCE_MAPPINGS: StackOutput = StackOutput {
    var: "MAILFLOW_EVENT_SOURCE_MAPPING_IDS",
    output: "EventSourceMappingIds",
};

/// What `mailctl campaign push` needs for a definition's recurring schedule.
pub const GET_USERS_FUNCTION_ARN: StackOutput = StackOutput {
    var: "MAILFLOW_GET_USERS_FUNCTION_ARN",
    output: "GetUsersFunctionArn",
};
pub const DEFINITION_SCHEDULE_GROUP: StackOutput = StackOutput {
    var: "MAILFLOW_DEFINITION_SCHEDULE_GROUP",
    output: "DefinitionScheduleGroupName",
};
pub const SCHEDULER_ROLE: StackOutput = StackOutput {
    var: "MAILFLOW_SCHEDULER_ROLE_ARN",
    output: "SchedulerRoleArn",
};
pub const SCHEDULE_DLQ: StackOutput = StackOutput {
    var: "MAILFLOW_SCHEDULE_DLQ_ARN",
    output: "ScheduleDLQArn",
};

pub const ALL: [StackOutput; 21] = [
    SENDS_TABLE,
    CAMPAIGNS_TABLE,
    WAITING_TABLE,
    OPEN_CONTENT_TABLE,
    USERS_QUEUE,
    USERS_DLQ,
    EMAILS_QUEUE,
    EMAILS_DLQ,
    CONTINUATION_QUEUE,
    CONTINUATION_DLQ,
    SES_EVENTS_QUEUE,
    SES_EVENTS_DLQ,
    GET_USERS_FUNCTION,
    CREATE_EMAILS_FUNCTION,
    SEND_EMAIL_FUNCTION,
    RATE_CONTROL_FUNCTION,
    EVENT_SOURCE_MAPPINGS,
    GET_USERS_FUNCTION_ARN,
    DEFINITION_SCHEDULE_GROUP,
    SCHEDULER_ROLE,
    SCHEDULE_DLQ,
];

impl StackOutput {
    /// The variable's value, or an error naming the output to export.
    pub fn read(self) -> Result<String> {
        std::env::var(self.var).with_context(|| {
            format!(
                "{} is not set: export the stack's {} output (see docs/operating.md), or pass --prefix for a local stack",
                self.var, self.output
            )
        })
    }

    /// `export VAR=value`, as `mailctl provision` prints it.
    pub fn export(self, value: &str) -> String {
        format!("export {}={value}", self.var)
    }
}

#[cfg(test)]
mod tests {
    use super::ALL;

    fn read(file: &str) -> String {
        std::fs::read_to_string(crate::repo_root().join(file)).unwrap()
    }

    #[test]
    fn every_output_is_in_the_template() {
        let template = read("template.yaml");
        let outputs = &template[template.find("\nOutputs:").expect("template has Outputs")..];
        for o in ALL {
            assert!(
                outputs.contains(&format!("\n  {}:", o.output)),
                "{} not in template.yaml's Outputs",
                o.output
            );
        }
    }

    #[test]
    fn the_operating_guide_lists_every_variable_with_its_output() {
        let guide = read("docs/operating.md");
        for o in ALL {
            let row = format!("| `{}` | `{}`", o.var, o.output);
            assert!(
                guide.contains(&row),
                "docs/operating.md lacks the row {row}"
            );
        }
    }
}
