//! An A/B experiment's results, read from the send records when it is decided.

use crate::domain::campaign::CampaignId;
use crate::domain::experiment::{Experiment, Tally};
use crate::domain::ledger::LedgerError;
use futures::future::BoxFuture;

/// An experiment's results so far: each variant's tally from its send records. Boxed (a
/// trait object): GetUsers is given one without another type parameter.
pub trait ExperimentResults: Send + Sync {
    /// The test group's tallies (the rest is sent the winner, not tested).
    fn tallies<'a>(
        &'a self,
        campaign: &'a CampaignId,
        experiment: &'a Experiment,
    ) -> BoxFuture<'a, Result<std::collections::BTreeMap<String, Tally>, LedgerError>>;
}
