//! A run segment's audience loop: each member read from MongoDB is placed by the delivery
//! rule (`domain::delivery`) and put in the outbox, whose batches go onto the users queue
//! or into the waiting room, a bounded number at once, until the audience ends, the
//! invocation's time runs short, or the campaign is paused or cancelled.

use super::experiment::ExperimentRun;
use super::outbox::{Batch, Outbox};
use super::read_ahead::ReadAhead;
use super::request::Run;
use super::{GetUsers, GetUsersError, Pending, Queue};
use crate::domain::campaign::Campaign;
use crate::domain::campaign_state::Hold;
use crate::domain::delivery::{self, Place, Recipient, Rules};
use crate::domain::local_time::{Due, LocalTimeCounts};
use crate::domain::messages::UserMessage;
use crate::domain::topics::{ExclusionCounts, Topics};
use crate::domain::user_id::{check_travels, UserId};
use crate::ports::{
    AudienceMember, AudienceScan, CampaignStates, DefinitionCampaign, SendReport, UserDirectory,
    WaitingRoom,
};
use crate::runtime::Invocation;
use futures::stream::{FuturesUnordered, StreamExt};

/// Batches enqueued between two looks at the campaign's state (a pause or a cancellation
/// stops the fan-out within about this many batches).
const STATE_CHECK_EVERY: usize = 50;

/// What a segment's loop did.
pub(super) struct Segment {
    pub counts: LocalTimeCounts,
    /// The last user id enqueued or held: the checkpoint.
    pub last: Option<String>,
    pub report: SendReport,
    /// False: stopped before the audience ended.
    pub complete: bool,
    pub hold: Option<Hold>,
    pub refused: usize,
    pub excluded: ExclusionCounts,
}

impl<D: UserDirectory, Q: Queue, S: CampaignStates, W: WaitingRoom> GetUsers<D, Q, S, W> {
    /// Enqueues or holds the audience after `after` until it ends or the deadline nears.
    pub(super) async fn fan_out(
        &self,
        run: &Run,
        definition: &DefinitionCampaign,
        after: Option<UserId>,
        invocation: &Invocation,
    ) -> Result<Segment, GetUsersError> {
        let campaign = &run.campaign;
        let mut experiment = self.experiment_run(&campaign.id).await?;
        // A topic a deploy removed while a run was under way: nothing is sent under it.
        Topics::builtin().get(campaign.topic.as_str())?;
        let mut audience = ReadAhead::new(self.directory.definition_audience(definition, after));
        let mut in_flight: FuturesUnordered<Pending<'_>> = FuturesUnordered::new();
        let mut outbox = Outbox::default();
        let mut segment = Segment {
            counts: LocalTimeCounts::default(),
            last: run.after.clone(),
            report: SendReport::default(),
            complete: true,
            hold: self.hold(campaign).await,
            refused: 0,
            excluded: ExclusionCounts::default(),
        };
        let (mut batches, mut checked) = (0usize, 0usize);
        while segment.hold.is_none() {
            // At least one user per invocation, so a slow start can never checkpoint the
            // same place forever.
            let progressed = segment.last != run.after;
            if progressed && invocation.remaining() <= self.config.deadline_margin {
                segment.complete = false;
                break;
            }
            if !self
                .decided_in_time(campaign, &mut experiment, &mut segment)
                .await?
            {
                break;
            }
            let Some(member) = next_member(&mut audience, &mut in_flight, &mut segment).await?
            else {
                break;
            };
            let user_id = member.id.to_string();
            if let Err(reason) = check_travels(&user_id) {
                tracing::warn!(bytes = user_id.len(), %reason, "user refused: their id cannot travel in a queue message");
                segment.refused += 1;
                // Not a checkpoint either (one is parsed as a user id): a continuation
                // starts after the last id that travelled.
                continue;
            }
            segment.last = Some(user_id.clone());
            let (place, body) = self.place(run, experiment.as_ref(), &member, &mut segment);
            // The slot's schedule exists before its first user is held: a segment that dies
            // part-way leaves no user without a release.
            if let Place::Slot(at_ms) = place {
                if outbox.first_for_slot(at_ms) {
                    self.schedule_slot(&campaign.id, at_ms, invocation).await?;
                }
            }
            let full = outbox.put(place, user_id, body);
            // A partial batch whose instant is near goes now rather than wait for company.
            for batch in full.into_iter().chain(outbox.near(self.clock.now_ms())) {
                in_flight.push(self.start(campaign, batch));
                batches += 1;
            }
            // Every batch on its way (enqueued or held) counts towards the next look.
            if batches >= checked + STATE_CHECK_EVERY {
                checked = batches;
                segment.hold = self.hold(campaign).await;
            }
            while in_flight.len() >= self.config.enqueue_concurrency {
                add(&mut segment.report, in_flight.next().await)?;
            }
        }
        // What was taken is decided: the read-ahead stops reading now, not after the drain.
        segment.excluded = audience.excluded().clone();
        drop(audience);
        in_flight.extend(outbox.rest().into_iter().map(|b| self.start(campaign, b)));
        while !in_flight.is_empty() {
            add(&mut segment.report, in_flight.next().await)?;
        }
        Ok(segment)
    }

    /// Whether the segment goes on: the decision's instant came during it, so it is decided
    /// now (the rest goes with the winner from here on); paused or cancelled meanwhile (no
    /// decision then), the segment stops, its checkpoint parked for the resume, which decides
    /// first.
    async fn decided_in_time(
        &self,
        campaign: &Campaign,
        experiment: &mut Option<ExperimentRun>,
        segment: &mut Segment,
    ) -> Result<bool, GetUsersError> {
        let now_ms = self.clock.now_ms();
        let awaits = |e: &Option<ExperimentRun>| {
            e.as_ref().is_some_and(|e| e.view().awaits_decision(now_ms))
        };
        if !awaits(experiment) {
            return Ok(true);
        }
        *experiment = self.experiment_run(&campaign.id).await?;
        if awaits(experiment) {
            segment.hold = self.hold(campaign).await;
            segment.complete = false;
            return Ok(false);
        }
        Ok(true)
    }

    /// Where one member goes, by the delivery rule, counted, and their users-queue message.
    fn place(
        &self,
        run: &Run,
        experiment: Option<&ExperimentRun>,
        member: &AudienceMember,
        segment: &mut Segment,
    ) -> (Place, String) {
        let campaign = &run.campaign;
        let user_id = member.id.to_string();
        let (variant, rest_until_ms) = experiment
            .map(|e| e.view().group(campaign.id.as_str(), &user_id))
            .unwrap_or_default();
        let rules = Rules {
            local_time: run.delivery.as_ref(),
            quiet_hours: self.config.quiet_hours,
            fallback_zone: &self.config.local_time.fallback_zone,
            // The holdout is SendEmail's to record (held_out, in the ledger).
            holdout_bp: 0,
        };
        let user = Recipient {
            campaign_id: campaign.id.as_str(),
            user_id: &user_id,
            zone: &member.zone,
            rest_until_ms,
        };
        let decision = delivery::decide(&rules, &user, self.clock.now_ms());
        decision.count(&mut segment.counts);
        let due = match decision.place {
            Place::Now {
                slot_late_ms: Some(slot_late_ms),
            } => Some(Due {
                slot_late_ms,
                released_at_ms: self.clock.wall_ms(),
            }),
            _ => None,
        };
        let message = UserMessage {
            campaign_id: campaign.id.clone(),
            user_id,
            window: campaign.window,
            topic: campaign.topic.clone(),
            include_failed: run.include_failed,
            include_cancelled: run.include_cancelled,
            due,
            zone: decision.zone_name,
            variant,
            definition: run.pinned.clone(),
        };
        let body = serde_json::to_string(&message).unwrap_or_default();
        (decision.place, body)
    }

    /// A batch on its way: onto the users queue (now or delayed) or into the waiting room.
    fn start<'a>(&'a self, campaign: &'a Campaign, batch: Batch) -> Pending<'a> {
        match batch {
            Batch::Now(bodies) => {
                Box::pin(async move { Ok(self.users.send_batch(&bodies).await?) })
            }
            Batch::Delayed(at_ms, bodies) => self.send_delayed(at_ms, bodies),
            Batch::Held(at_ms, users) => self.hold_users(campaign, at_ms, users),
        }
    }
}

/// The next member of the audience. The batches in flight are driven while it is awaited: a
/// future is only driven when polled, and a SendMessageBatch not yet started when the
/// read-ahead runs dry would wait for it (with MongoDB and SQS 10-20 ms away, 13,800 users/s
/// instead of 16,300 before the read-ahead: `mailctl pipeline`).
async fn next_member(
    audience: &mut ReadAhead,
    in_flight: &mut FuturesUnordered<Pending<'_>>,
    segment: &mut Segment,
) -> Result<Option<AudienceMember>, GetUsersError> {
    let member = {
        let next = audience.next();
        tokio::pin!(next);
        loop {
            tokio::select! {
                biased;
                member = &mut next => break member,
                done = in_flight.next(), if !in_flight.is_empty() => add(&mut segment.report, done)?,
            }
        }
    };
    // A query the definition got wrong fails the same way every time: the run fails once.
    member.map_err(|err| match audience.definition_fault() {
        Some(fault) => GetUsersError::DefinitionQuery(fault.to_owned()),
        None => err.into(),
    })
}

/// Adds a finished batch's report.
pub(super) fn add(
    report: &mut SendReport,
    next: Option<Result<SendReport, GetUsersError>>,
) -> Result<(), GetUsersError> {
    if let Some(result) = next {
        let r = result?;
        report.sent += r.sent;
        report.retried += r.retried;
    }
    Ok(())
}
