//! Steps agreed ahead (the built-in sampler's, `loader::pipeline`): a step's plan and
//! its nonblocking agreement start steps before it runs, so no rank waits for the
//! others in between.

use super::core::Core;
use super::step::{PendingMeasurement, PlannedStep, PreparedFetch, agreement_values, times_len};
use crate::agree::{AgreementUnderWay, Proposal, start_agreement};
use crate::engine::KnownBatches;
use crate::error::Result;
use crate::estimator::features;
use crate::plan::BatchPlan;
use crate::sampler::Epoch;

/// A sampler step planned ahead, whose agreement is under way (see `loader::pipeline`).
pub struct StepAhead {
    /// The plan, or this rank's reason to fail the step (agreed with the others).
    prepared: Result<PlannedStep>,
    /// The earlier steps whose slowest-rank times this agreement brings.
    measured: Vec<PendingMeasurement>,
    agreement: AgreementUnderWay,
}

impl Core {
    /// Collective (nonblocking): plan an epoch's step for an output buffer (or the
    /// reason it has none) and start its agreement. [`Core::finish_step_ahead`] runs
    /// it, steps later: no rank waits for the others in between. Every input of the
    /// decision rides this agreement, with the time of the last step this rank ran.
    /// `known`: every rank's batch of the step (the built-in sampler's): each rank's
    /// features include the bytes it serves, worked out from them, so O(1) values at
    /// any number of ranks. Without it (batches the caller gave, mdl_epoch_begin_ids:
    /// only this rank knows its own), the features are `mdl_fetch_batch`'s, with the
    /// request matrix up to `MDL_MATRIX_MAX_RANKS` ranks.
    /// `size_out(bytes)` grows the step's output buffer to the planned batch's bytes (the
    /// plan reads each sample's length from the index once).
    pub fn start_step_ahead(
        &mut self,
        ids: &[u64],
        ready: Result<()>,
        size_out: impl FnOnce(u64) -> Result<()>,
        known: Option<&dyn KnownBatches>,
    ) -> Result<StepAhead> {
        let prepared = ready
            .and_then(|()| self.plan_step(ids))
            .and_then(|p| size_out(p.plan.total_bytes()).map(|()| p))
            .and_then(|p| self.reserve_sends(known, &p.plan).map(|()| p));
        let measured = self.take_measured();
        let at = times_len(&measured);
        let (ranks, me, matrix_max_ranks) = (self.data_comm().size(), self.data_comm().rank(), self.matrix_max_ranks());
        let features_len = if known.is_some() { features::KNOWN_LEN } else { features::encoded_len(ranks, matrix_max_ranks) };
        let mut maxima = agreement_values(&measured, features_len);
        if let Ok(p) = &prepared {
            let values = &mut maxima[at..];
            match known {
                Some(known) => values.copy_from_slice(&features::encode_known(&p.plan, &p.shape, self.served_bytes(known, &p.plan))),
                None => features::encode(&p.plan, &p.shape, me, matrix_max_ranks, self.buffers.borrow().room(), values),
            }
        }
        let error = prepared.as_ref().err().cloned();
        let same = self.estimator.fingerprint();
        let buffers = self.take_agreement_buffers();
        let agreement = start_agreement(&self.comm, &Proposal { error, backend: self.backend, maxima, same }, buffers)?;
        Ok(StepAhead { prepared, measured, agreement })
    }

    /// With every batch `known`, an owner knows before the agreement what it will send in
    /// the collective exchange (at most what it serves, and at most the message limit in
    /// a round): its send buffer is reserved now, so that running out of memory fails
    /// every rank together, not this one alone in the exchange.
    fn reserve_sends(&self, known: Option<&dyn KnownBatches>, plan: &BatchPlan) -> Result<()> {
        let Some(known) = known.filter(|_| self.owned_ids().is_some()) else { return Ok(()) };
        let sends = self.served_bytes(known, plan).min(self.config.max_message_bytes);
        self.buffers.borrow_mut().reserve_packed(sends)
    }

    /// Bytes this rank serves to the others in a step whose batches are `known`. When
    /// the one-sided engine is forced, the engine needs no estimate: the rank's own
    /// remote bytes stand in (as without the request matrix).
    fn served_bytes(&self, known: &dyn KnownBatches, plan: &BatchPlan) -> u64 {
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

    /// Collective: wait for the agreement of a step started by
    /// [`Core::start_step_ahead`] (with the same `known`), then run it into `out` and
    /// `out_offsets`.
    pub fn finish_step_ahead(
        &mut self,
        ahead: StepAhead,
        out: &mut [u8],
        out_offsets: &mut [u64],
        known: Option<&dyn KnownBatches>,
    ) -> Result<()> {
        let StepAhead { prepared, measured, agreement } = ahead;
        let (agreed, buffers) = agreement.finish()?;
        self.give_back_agreement_buffers(buffers);
        let at = times_len(&measured);
        self.settle(measured, &agreed, prepared.as_ref().err().cloned())?;
        let PlannedStep { plan, shape } = prepared.expect("agreed that every rank planned its step");
        let values = &agreed.maxima[at..];
        let (step_features, node, requests_to_me) = match known {
            Some(_) => {
                let max_message = self.config.max_message_bytes;
                (features::decode_known(values, max_message), features::decode_known_node(values), None)
            }
            None => self.agreed_features(values),
        };
        let decision = self.decide(&step_features, node, agreed.backend_max);
        out_offsets.copy_from_slice(&plan.out_offsets);
        let prepared = PreparedFetch { plan, out, shape, known_batches: known };
        self.run(decision.as_ref(), prepared, step_features, requests_to_me.as_ref()).map(|_| ())
    }

    /// Collective: complete the agreement of a step that will not run (its epoch
    /// stopped first, on every rank alike), keeping what it measured.
    pub fn abandon_step_ahead(&mut self, ahead: StepAhead) -> Result<()> {
        let (agreed, buffers) = ahead.agreement.finish()?;
        self.give_back_agreement_buffers(buffers);
        let at = times_len(&ahead.measured);
        self.learn(ahead.measured, &agreed.maxima[..at]);
        Ok(())
    }
}
