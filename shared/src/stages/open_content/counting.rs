//! What a request counts, within its bounds: whether the email's reader may still be
//! counted, the clicking person's marks on the pick's sketches (the minute's, the pick's,
//! the campaign's top), and the counts written at the end.

use super::*;

/// What a request counts for the campaign, and how much.
pub(super) type Counts = Vec<(OpenCount, u64)>;

impl<S: OpenContentStore, D: PickDirectory, R: SendRecordNotes> OpenContent<S, D, R> {
    /// The clicking person's mark on the pick's sketches: the minute's first (a repeat
    /// within the minute stops there), then the campaign's; what it adds to the unique
    /// clicks (the pick's new people), and the pick's people if they may top the campaign.
    pub(super) async fn mark_click(&self, slot: &SlotRef, pick: &Pick) -> (Counts, Option<u64>) {
        let campaign = &slot.campaign_id;
        let mark = self.sealer.mark(campaign, &pick.id, &slot.user_id);
        let minute = minute_of(self.now_ms());
        match self
            .store
            .mark_minute(campaign, &pick.id, minute, mark)
            .await
        {
            Ok(true) => {}
            // Counted in this minute already, so in the campaign too.
            Ok(false) => return (Vec::new(), None),
            Err(err) => {
                tracing::warn!(reason = %err, "click minute not recorded");
                return (Vec::new(), None);
            }
        }
        match self.store.mark_total(campaign, &pick.id, mark).await {
            Ok(Some(rise)) if rise.after > rise.before => {
                let top = (rise.after > self.known_top(campaign)).then_some(rise.after);
                (
                    vec![(OpenCount::UniqueClick, rise.after - rise.before)],
                    top,
                )
            }
            Ok(_) => (Vec::new(), None),
            Err(err) => {
                tracing::warn!(reason = %err, "click not added to the pick's people");
                (Vec::new(), None)
            }
        }
    }

    pub(super) fn known_top(&self, campaign: &CampaignId) -> u64 {
        self.tops
            .lock()
            .ok()
            .and_then(|t| t.get(campaign).copied())
            .unwrap_or(0)
    }

    pub(super) fn saw_top(&self, campaign: &CampaignId, people: u64) {
        if let Ok(mut tops) = self.tops.lock() {
            let top = tops.entry(campaign.clone()).or_default();
            *top = (*top).max(people);
        }
    }

    /// Whether this email's reader may still be counted (an unsubscribed or suppressed
    /// person's old email still works, and counts nothing new). When MongoDB cannot say
    /// within `COUNT_TIMEOUT_MS`, nothing is counted.
    pub(super) async fn may_count(&self, slot: &SlotRef, by: Deadline) -> bool {
        let Ok(id) = UserId::parse(&slot.user_id) else {
            return false;
        };
        match tokio::time::timeout(
            by.cap(self.config.count_timeout),
            self.directory.may_count(&id),
        )
        .await
        {
            Ok(Ok(may)) => may,
            Ok(Err(err)) => {
                tracing::warn!(reason = %err, "subscription not read; nothing counted");
                false
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.config.count_timeout.as_millis() as u64,
                    "subscription not read in time; nothing counted"
                );
                false
            }
        }
    }

    /// The request's counting, within `COUNT_TIMEOUT_MS`: `work` decides what to count (it may
    /// write the sketches), then one write adds the counts, and at the same time the send
    /// record is noted (with consent only) and the campaign's top raised.
    pub(super) async fn counted(
        &self,
        slot: &SlotRef,
        by: Deadline,
        work: impl Future<Output = (Counts, Option<Engagement>, Option<u64>)>,
    ) {
        let email = slot.email();
        let all = async {
            let (counts, note, top) = work.await;
            let note = async {
                match note {
                    Some(what) if self.config.track_opens_and_clicks => {
                        if let Err(err) = self.records.note(&email, what, self.now_ms()).await {
                            tracing::warn!(reason = %err, ?what, "not noted on the send record");
                        }
                    }
                    _ => {}
                }
            };
            let top = async {
                if let Some(people) = top {
                    match self.store.raise_top(&slot.campaign_id, people).await {
                        Ok(()) => self.saw_top(&slot.campaign_id, people),
                        Err(err) => tracing::warn!(reason = %err, "campaign's top not raised"),
                    }
                }
            };
            let count = async {
                if !counts.is_empty() {
                    if let Err(err) = self.store.count(&email, &counts).await {
                        tracing::warn!(reason = %err, ?counts, "not counted");
                    }
                }
            };
            tokio::join!(count, note, top);
        };
        if tokio::time::timeout(by.cap(self.config.count_timeout), all)
            .await
            .is_err()
        {
            tracing::warn!(
                timeout_ms = self.config.count_timeout.as_millis() as u64,
                "counting not done in time; the rest is not counted"
            );
        }
    }
}
