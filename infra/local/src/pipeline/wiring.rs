//! The pipeline's functions built as Lambda runs them: each from the environment
//! template.yaml gives it (so config wiring is exercised), signing with its role's key, and
//! SendEmail once per execution environment of its event source.

use super::{concurrency, releases, LocalPipeline, PipelineOptions};
use super::{CREATE_EMAILS, GET_USERS, SEND_EMAIL, SES_EVENTS};
use crate::names;
use crate::scheduler::{LocalScheduler, SimClock};
use crate::stack::Stack;
use anyhow::Result;
use mailflow::assemble;
use mailflow::config::{CreateEmailsConfig, GetUsersConfig, SendEmailConfig, SesEventsConfig};
use mailflow::ports::Mailer;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

impl<M: Mailer + Clone + 'static> LocalPipeline<M> {
    /// Builds the stages; `mailer` makes SendEmail's mail service (the real SES adapter, or a
    /// wrapper around it that injects faults).
    pub async fn build(
        stack: Stack,
        options: PipelineOptions,
        mailer: impl FnOnce(&aws_config::SdkConfig, &SendEmailConfig) -> M,
    ) -> Result<Self> {
        let functions_sdk = match &options.aws_endpoint {
            Some(url) => crate::fault_switch::through(&stack.sdk, url),
            None => stack.sdk.clone(),
        };
        // Each function signs with its role's key, so the emulator checks its role's policy.
        let role_sdk = |function| crate::iam::function_sdk(&functions_sdk, &stack, function);
        let env = env_for(&stack, &options, GET_USERS)?;
        let config = GetUsersConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let clock = Arc::new(SimClock::default());
        let get_users = Arc::new(
            assemble::get_users(config, &role_sdk(GET_USERS)?)
                .await?
                .with_clock(clock.clone()),
        );
        let get_users_async =
            releases::get_users_async(&stack, &options, get_users.clone(), clock.clone())?;
        let scheduler = stack
            .names
            .get(names::RELEASE_SCHEDULE_GROUP)
            .map(|group| LocalScheduler::new(&stack.sdk, group));

        let env = env_for(&stack, &options, CREATE_EMAILS)?;
        let config = CreateEmailsConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let create_emails =
            assemble::create_emails(config, &role_sdk(CREATE_EMAILS)?, "create-emails", true)
                .await?;

        let env = env_for(&stack, &options, SEND_EMAIL)?;
        let send_config = SendEmailConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let send_sdk = role_sdk(SEND_EMAIL)?;
        let mailer = mailer(&send_sdk, &send_config);
        let mut send_email = Vec::new();
        for _ in 0..concurrency(&stack, SEND_EMAIL)? {
            let stage = assemble::send_email(send_config.clone(), &send_sdk, mailer.clone());
            send_email.push(Arc::new(stage));
        }

        let env = env_for(&stack, &options, SES_EVENTS)?;
        let config = SesEventsConfig::from_source(&|k: &str| env.get(k).cloned())?;
        let ses_events = assemble::ses_events(config, &role_sdk(SES_EVENTS)?).await?;

        Ok(Self {
            stack,
            get_users,
            create_emails: Arc::new(create_emails),
            send_email,
            send_config,
            ses_events: Arc::new(ses_events),
            totals: Arc::default(),
            clock,
            get_users_async,
            scheduler,
            fired: Mutex::default(),
            firing: tokio::sync::Mutex::new(()),
            releases_fired: Mutex::default(),
            options,
        })
    }
}

/// `function`'s environment on `stack`, with `options`' overrides.
fn env_for(
    stack: &Stack,
    options: &PipelineOptions,
    function: &'static str,
) -> Result<BTreeMap<String, String>> {
    let mut env = stack.env(function)?;
    if let Some(overrides) = options.env.get(function) {
        env.extend(overrides.clone());
    }
    Ok(env)
}
