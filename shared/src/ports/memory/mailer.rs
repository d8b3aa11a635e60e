//! A mailer that answers from a script.

use crate::ports::{Mailer, OutgoingEmail, SendError};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Answers each send with the next scripted result (then accepts), counting the calls.
#[derive(Default)]
pub struct ScriptedMailer {
    script: Mutex<VecDeque<Result<String, SendError>>>,
    pub calls: Mutex<Vec<OutgoingEmail>>,
}

impl ScriptedMailer {
    pub fn answering(results: impl IntoIterator<Item = Result<String, SendError>>) -> Self {
        Self {
            script: Mutex::new(results.into_iter().collect()),
            calls: Mutex::default(),
        }
    }

    pub fn calls(&self) -> Vec<OutgoingEmail> {
        crate::runtime::lock(&self.calls).clone()
    }
}

impl Mailer for ScriptedMailer {
    async fn send(&self, email: &OutgoingEmail) -> Result<String, SendError> {
        crate::runtime::lock(&self.calls).push(email.clone());
        let next = crate::runtime::lock(&self.script).pop_front();
        next.unwrap_or_else(|| Ok("ses-message-id".into()))
    }
}
