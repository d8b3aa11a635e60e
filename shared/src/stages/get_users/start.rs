//! A run's first segment: the campaign registered in the campaigns table and settled against
//! what it first started with (`domain::campaign_start`), its local-time delivery recorded,
//! and the window's odd follows reported.

use super::request::Run;
use super::{GetUsers, GetUsersError};
use crate::domain::campaign::Window;
use crate::domain::campaign_start::{StartError, StartRequest};
use crate::domain::definition::pin::{self, PinnedDefinition, Settled};
use crate::domain::digest::OddFollows;
use crate::domain::experiment::ExperimentError;
use crate::ports::{load_pinned, CampaignStates, OutgoingQueue, UserDirectory, WaitingRoom};
use time::OffsetDateTime;

impl From<StartError> for GetUsersError {
    fn from(err: StartError) -> Self {
        match err {
            StartError::Campaign(err) => Self::Campaign(err),
            StartError::Experiment(err) => Self::Experiment(err),
        }
    }
}

impl<D: UserDirectory, Q: OutgoingQueue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Registers the run's campaign (known to `mailctl` and the reputation guard from now
    /// on), settles this start against its record, and records its local-time delivery. A
    /// start refused is refused before anything is enqueued.
    pub(super) async fn first_start(&self, run: &mut Run) -> Result<OddFollows, GetUsersError> {
        // A start is judged, registered and dated by the wall clock (the deadline SendEmail
        // checks is on it); the experiment's wait by the campaign's, as its slots are.
        let now_ms = self.clock.wall_ms();
        let now = OffsetDateTime::from_unix_timestamp_nanos(i128::from(now_ms) * 1_000_000)
            .unwrap_or_else(|_| OffsetDateTime::now_utc());
        // The version named, or the latest, is pinned unless the campaign has one.
        let pin = match &run.definition {
            Some(asked) => Some(PinnedDefinition {
                name: asked.name.clone(),
                version: match asked.version {
                    Some(version) => version,
                    None => self.latest_version(&asked.name).await?,
                },
            }),
            None => None,
        };
        // A definition declares its window (`window_days`, checked at push): the stack's
        // bound is for the digest's and hand-named windows.
        let max_window = match &pin {
            Some(pin) => {
                let loaded = self.definitions.load(&pin.name, pin.version).await?;
                let days = std::time::Duration::from_secs(
                    u64::from(loaded.definition.window_days) * 86_400,
                );
                self.config.max_window.max(days)
            }
            None => self.config.max_window,
        };
        run.campaign.may_start(now, max_window)?;
        self.check_experiment(run, pin.as_ref()).await?;
        if run.experiment.is_some() && !self.config.track_opens_and_clicks {
            return Err(ExperimentError::NoConsent(run.campaign.id.clone()).into());
        }
        let states = self.campaigns.states();
        let defaults = self.config.guardrails;
        // Read only when there are defaults a campaign started before guardrails would
        // decline.
        let started_without_guardrails = defaults != Default::default()
            && states
                .state(run.campaign.id.as_str())
                .await
                .map_err(|e| GetUsersError::Campaigns(e.to_string()))?
                .started_without_guardrails;
        let start = StartRequest {
            guardrails: &run.guardrails,
            experiment: run.experiment.as_deref(),
            delivery: run.delivery.as_ref(),
            quiet_hours: self.config.quiet_hours,
        };
        let registration = start.registration(
            &run.campaign.id,
            defaults,
            started_without_guardrails,
            now_ms,
            self.clock.now_ms(),
        )?;
        let recorded = states
            .register(
                &run.campaign,
                &registration.guardrails,
                registration.experiment.as_ref(),
                pin.as_ref(),
                now_ms as u64,
            )
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let pinned = settle_definition(run, recorded.definition.as_ref(), pin.as_ref())?;
        let settled = start.settle(
            &mut run.campaign,
            run.topic_named,
            &registration,
            &recorded,
            now_ms,
        )?;
        run.pinned = pinned;
        if let Some(moved) = settled.moved {
            states
                .move_deadline(
                    &run.campaign.id,
                    &moved,
                    settled.guardrails.deadline_ms,
                    now_ms as u64,
                )
                .await
                .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
            tracing::warn!(campaign = %run.campaign.id, from = ?settled.guardrails.deadline_ms, to = ?moved.deadline_ms, "the campaign's deadline is moved by this start");
        }
        if let Some(delivery) = &mut run.delivery {
            // The window as settled (a campaign already started keeps its own).
            delivery.window_until_ms = Some(run.campaign.window.until.unix_timestamp() * 1000);
            self.waiting
                .record_delivery(&run.campaign.id, delivery)
                .await
                .map_err(|e| GetUsersError::Waiting(e.to_string()))?;
        }
        // The digest's follows; a definition's audience is its own.
        match run.pinned {
            Some(_) => Ok(OddFollows::default()),
            None => self.report_odd_follows(&run.campaign.window).await,
        }
    }

    /// The experiment this start runs with (the one given, else a repin's recorded one)
    /// checked against the templates that will render it: the version the campaign's record
    /// pins (or this start repins, or a first start pins: `latest`), else the bundled
    /// digest's.
    /// Refused before anything is written.
    async fn check_experiment(
        &self,
        run: &Run,
        latest: Option<&PinnedDefinition>,
    ) -> Result<(), GetUsersError> {
        if run.experiment.is_none() && !run.repin {
            return Ok(());
        }
        let state = (self.campaigns.states())
            .state(run.campaign.id.as_str())
            .await
            .map_err(|e| GetUsersError::Campaigns(e.to_string()))?;
        let Some(experiment) = run.experiment.as_deref().or(state.experiment.as_deref()) else {
            return Ok(());
        };
        let settled = pin::settle(
            run.campaign.id.as_str(),
            state.definition.as_ref(),
            run.definition.as_ref(),
            run.repin,
        )?;
        let version = match settled {
            Settled::BuiltIn => None,
            Settled::Latest(_) => latest.cloned(),
            Settled::Use(pinned) | Settled::Repin { to: pinned, .. } => Some(pinned),
        };
        let loaded = load_pinned(self.definitions.as_ref(), version.as_ref()).await?;
        crate::domain::definition::render::check_experiment(
            experiment,
            &loaded.definition,
            &loaded.files,
        )
        .map_err(GetUsersError::BadRequest)
    }

    /// Logs the window's follows whose followeeId or followerId no user can have, and counts
    /// them.
    async fn report_odd_follows(&self, window: &Window) -> Result<OddFollows, GetUsersError> {
        let odd = self.directory.odd_follows(window, 20).await?;
        for follow in &odd.described {
            tracing::warn!(detail = %follow.reason, "follow skipped: no user can be found through it");
        }
        if odd.followees > odd.described.len() as u64 {
            tracing::warn!(
                count = odd.followees,
                "follows skipped in all: their followeeId is not a usable user id"
            );
        }
        if odd.followers > 0 {
            tracing::warn!(
                count = odd.followers,
                "follows skipped: their followerId is not a usable user id, so they make nobody a new follower"
            );
        }
        Ok(odd)
    }
}

/// The definition version `run` uses (None: the built-in digest), settled against the one
/// the campaign's record pins; `latest` is what a first start naming no version pinned.
/// Refused before anything is enqueued.
fn settle_definition(
    run: &Run,
    recorded: Option<&PinnedDefinition>,
    latest: Option<&PinnedDefinition>,
) -> Result<Option<PinnedDefinition>, GetUsersError> {
    let id = run.campaign.id.as_str();
    Ok(
        match pin::settle(id, recorded, run.definition.as_ref(), run.repin)? {
            Settled::BuiltIn => None,
            Settled::Latest(_) => latest.cloned(),
            Settled::Use(pinned) => Some(pinned),
            Settled::Repin { from, to } => {
                tracing::warn!(campaign = %run.campaign.id, definition = %to.name, from = from.version, to = to.version, "this run uses another definition version than the campaign's pin, as asked");
                Some(to)
            }
        },
    )
}
