//! What this rank serves the others when every rank's batches are known (the built-in
//! sampler's epochs): worked out from the epoch instead of told in the step's
//! agreement, so that the agreement stays O(1) values at any number of ranks.

use super::core::Core;
use crate::engine::KnownBatches;
use crate::error::Result;
use crate::plan::BatchPlan;
use crate::sampler::Epoch;

impl Core {
    /// With every batch `known`, an owner knows before the agreement what it will send in
    /// the collective exchange (at most what it serves, and at most the message limit in
    /// a round): its send buffer is reserved now, so that running out of memory fails
    /// every rank together, not this one alone in the exchange.
    pub(super) fn reserve_sends(&self, known: Option<&dyn KnownBatches>, plan: &BatchPlan) -> Result<()> {
        let Some(known) = known.filter(|_| self.owned_ids().is_some()) else { return Ok(()) };
        let sends = self.served_bytes(known, plan).min(self.config.max_message_bytes);
        self.buffers.borrow_mut().reserve_packed(sends)
    }

    /// Bytes this rank serves to the others in a step whose batches are `known`. When
    /// the one-sided engine is forced, the engine needs no estimate: the rank's own
    /// remote bytes stand in (as without the request matrix).
    pub(super) fn served_bytes(&self, known: &dyn KnownBatches, plan: &BatchPlan) -> u64 {
        self.owned_ids().map_or(plan.remote_bytes(), |owned| known.served_bytes(owned))
    }

    /// Prepare `epoch` for the collective engine's owners and for the bytes this rank
    /// serves: where its samples sit in the epoch, built (fallibly) once per epoch,
    /// before a step's agreement. Nothing to do when the one-sided engine is forced.
    pub fn prepare_epoch(&self, epoch: &Epoch) -> Result<()> {
        let (Some(owned), Ok(store)) = (self.owned_ids(), self.store()) else { return Ok(()) };
        // The sampler's ranks are the host's; only this rank's group asks it for its
        // samples (every group holds its own copy of the same ids).
        let in_group = |host_rank: usize| match &self.group {
            Some(group) => group.rank_of(host_rank),
            None => Some(host_rank),
        };
        let me = self.data_comm().rank();
        let asks = |host_rank: usize| in_group(host_rank).is_some();
        // Not itself, nor (node-local path) the ranks of its node, which copy its samples.
        let serves = |host_rank: usize| {
            in_group(host_rank).is_some_and(|rank| rank != me && !(store.topology.is_shared() && store.topology.shares(rank, me)))
        };
        epoch.prepare_owned(owned, &asks, &serves, &|id| store.index.len_of(id).unwrap_or(0))
    }
}
