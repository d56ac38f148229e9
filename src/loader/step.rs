//! One step's protocol, in one place: plan it locally, propose its agreement (this
//! rank's failure if any, the step's features, the earlier steps' times), settle the
//! agreement (learn the times; fail where any rank failed), decide the engine, run it,
//! publish the statistics.
//!
//! A [`Step`] is what lies between the two halves: [`Step::start`] plans and
//! proposes, [`Step::finish`] settles, decides and runs. `mdl_fetch_batch` does
//! both at once, its agreement blocking; an epoch's steps (`pipeline`) start
//! `MDL_AGREEMENT_LAG` steps before they finish, their agreements nonblocking
//! reductions that complete in between.
//!
//! Everything that may fail on one rank alone (the plan, the output buffer, the
//! exchange's buffers) happens in `Step::start`, before the agreement, so that the
//! failure reaches every rank before any of them communicates for the step.

use super::core::Core;
use super::measurement::{AgreedStep, MEASUREMENTS_PER_AGREEMENT, PendingMeasurement, agreed_steps, agreement_values, times_len};
use super::replica::{GroupBatches, ReplicaGroup};
use crate::agree::{Agreed, AgreementUnderWay, Proposal, agree_in, start_agreement};
use crate::backend::Backend;
use crate::engine::{ExchangeShape, KnownBatches, RequestsToOwner, StepContext, copy_local, exchange_shape, fetch_remote};
use crate::error::{Error, Result, mdl_status};
use crate::estimator::features::{self, NodeFeatures};
use crate::estimator::model::StepFeatures;
use crate::estimator::{Decision, Measured};
use crate::mpi;
use crate::node;
use crate::plan::BatchPlan;

/// The caller's arguments of one `mdl_fetch_batch`, already checked for NULL pointers.
pub struct FetchArgs<'a> {
    pub ids: &'a [u64],
    pub out: &'a mut [u8],
    /// ids.len() + 1 entries.
    pub out_offsets: &'a mut [u64],
}

/// When a step's agreement completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timing {
    /// At once, in a blocking reduction: nothing is left to overlap it with.
    Now,
    /// At [`Step::finish`], steps later: a nonblocking reduction.
    Ahead,
}

/// A step started on this rank: planned (or failed here), its agreement proposed.
pub(super) struct Step {
    /// The plan, or this rank's reason to fail the step (in the agreement).
    planned: Result<BatchPlan>,
    /// The earlier steps whose times this agreement brings.
    measured: Vec<PendingMeasurement>,
    /// Whether the features were encoded for known batches (the sampler's layout).
    known: bool,
    agreement: Agreement,
}

/// A step's plan, and its exchange's shape (which its features describe).
struct PlannedStep {
    plan: BatchPlan,
    shape: ExchangeShape,
}

enum Agreement {
    Reached(Result<Agreed>),
    UnderWay(AgreementUnderWay),
}

impl Step {
    /// Collective (the agreement's start): plan a step of this rank's `ids` and propose
    /// its agreement. `ready`: this rank's reason to fail the step, found before (its
    /// batch, its epoch). `lay_out(plan)` writes the batch's offsets and checks or grows
    /// its output buffer. `known`: every rank's batch of the step (the built-in
    /// sampler's); each rank's features then include the bytes it serves, worked out
    /// from them, so O(1) values at any number of ranks. Without it (`mdl_fetch_batch`,
    /// batches the caller gave), only this rank knows its own, and the features carry
    /// the request matrix up to `MDL_MATRIX_MAX_RANKS` ranks.
    pub(super) fn start(
        core: &mut Core,
        ids: &[u64],
        ready: Result<()>,
        lay_out: impl FnOnce(&BatchPlan) -> Result<()>,
        known: Option<&dyn KnownBatches>,
        timing: Timing,
    ) -> Result<Step> {
        let planned = ready
            .and_then(|()| core.plan_step(ids))
            .and_then(|p| lay_out(&p.plan).map(|()| p))
            .and_then(|p| core.reserve_sends(known, &p.plan).map(|()| p));
        let measured = core.take_measured();
        let at = times_len(&measured);
        let (ranks, me, matrix_max_ranks) = (core.data_comm().size(), core.data_comm().rank(), core.matrix_max_ranks());
        let features_len = if known.is_some() { features::KNOWN_LEN } else { features::encoded_len(ranks, matrix_max_ranks) };
        let mut maxima = agreement_values(&measured, features_len);
        if let Ok(PlannedStep { plan, shape }) = &planned {
            let values = &mut maxima[at..];
            match known {
                Some(known) => values.copy_from_slice(&features::encode_known(plan, shape, core.served_bytes(known, plan))),
                None => features::encode(plan, shape, me, matrix_max_ranks, core.buffers.borrow().room(), values),
            }
        }
        let error = planned.as_ref().err().cloned();
        let proposal = Proposal { error, backend: core.backend, maxima, same: core.estimator.fingerprint() };
        let mut buffers = core.take_agreement_buffers();
        let agreement = match timing {
            Timing::Now => {
                let agreed = agree_in(&core.comm, &proposal, &mut buffers);
                core.give_back_agreement_buffers(buffers);
                Agreement::Reached(agreed)
            }
            Timing::Ahead => Agreement::UnderWay(start_agreement(&core.comm, &proposal, buffers)?),
        };
        Ok(Step { planned: planned.map(|p| p.plan), measured, known: known.is_some(), agreement })
    }

    /// Collective: complete a started step's agreement, then decide its engine and run
    /// it into `out` (laid out at its start); returns the samples fetched. `known` is
    /// what the step started with.
    pub(super) fn finish(self, core: &mut Core, out: &mut [u8], known: Option<&dyn KnownBatches>) -> Result<u64> {
        let Step { planned, measured, known: started_known, agreement } = self;
        debug_assert_eq!(started_known, known.is_some(), "a step finishes with the batches it started with");
        let blocking = matches!(agreement, Agreement::Reached(_));
        let agreed = match core.complete(agreement) {
            Ok(agreed) => agreed,
            Err(err) => {
                if blocking && err.status == mdl_status::MDL_ERR_CALL_MISMATCH {
                    // Nothing was done, on any rank: the measurements go with the next step.
                    core.pending.splice(0..0, measured);
                }
                return Err(err);
            }
        };
        let at = times_len(&measured);
        core.settle(measured, &agreed, planned.as_ref().err().cloned())?;
        let plan = planned.expect("agreed that every rank planned its step");
        let (step_features, node, requests_to_me) = core.agreed_features(&agreed.maxima[at..], known.is_some());
        let decision = core.decide(&step_features, node, agreed.backend_max);
        core.run(decision.as_ref(), &plan, out, known, step_features, requests_to_me.as_ref())
    }

    /// Collective: complete the agreement of a step that will not run (its epoch
    /// stopped first, on every rank alike), keeping what it measured.
    pub(super) fn abandon(self, core: &mut Core) -> Result<()> {
        let at = times_len(&self.measured);
        let agreed = core.complete(self.agreement)?;
        core.learn(self.measured, &agreed.maxima[..at]);
        Ok(())
    }
}

impl Core {
    /// Collective: fetch a batch into the caller's buffer (`mdl_fetch_batch`): a step
    /// started and finished at once.
    pub fn fetch_batch(&mut self, args: Result<FetchArgs>) -> Result<()> {
        let (ids, ready, out, out_offsets) = match args {
            Ok(FetchArgs { ids, out, out_offsets }) => (ids, Ok(()), out, Some(out_offsets)),
            Err(err) => (&[][..], Err(err), &mut [][..], None),
        };
        let out_len = out.len();
        let lay_out = |plan: &BatchPlan| {
            // Written even when the buffer is too small: out_offsets[n] tells the size
            // needed, on every rank of a step some rank refused.
            if let Some(out_offsets) = out_offsets {
                out_offsets.copy_from_slice(&plan.out_offsets);
            }
            fits(plan, out_len)
        };
        let step = Step::start(self, ids, ready, lay_out, None, Timing::Now)?;
        let samples = step.finish(self, out, None)?;
        self.log_summary_every_epoch(samples);
        Ok(())
    }

    fn complete(&mut self, agreement: Agreement) -> Result<Agreed> {
        match agreement {
            Agreement::Reached(agreed) => agreed,
            Agreement::UnderWay(under_way) => {
                let (agreed, buffers) = under_way.finish()?;
                self.give_back_agreement_buffers(buffers);
                Ok(agreed)
            }
        }
    }

    /// What every step does with its agreement first: learn the earlier steps' times it
    /// carries, then fail where any rank failed or the backends differ.
    fn settle(&mut self, measured: Vec<PendingMeasurement>, agreed: &Agreed, error: Option<Error>) -> Result<()> {
        let at = times_len(&measured);
        self.learn(measured, &agreed.maxima[..at]);
        agreed.outcome(error)?;
        Self::refuse_differing_backends(agreed)
    }

    /// The step's features, its node's, and (with the request matrix) what the others
    /// ask of this rank, from the agreed values that follow the times, in the layout
    /// the step proposed them in (`known`: the sampler's batches).
    fn agreed_features(&self, values: &[f64], known: bool) -> (StepFeatures, NodeFeatures, Option<RequestsToOwner>) {
        let max_message = self.config.max_message_bytes;
        if known {
            return (features::decode_known(values, max_message), features::decode_known_node(values), None);
        }
        let (ranks, me, matrix_max_ranks) = (self.data_comm().size(), self.data_comm().rank(), self.matrix_max_ranks());
        (
            features::decode(values, ranks, matrix_max_ranks, max_message),
            features::decode_node(values),
            features::requests_to(values, ranks, matrix_max_ranks, me, max_message),
        )
    }

    /// Plan a fetch of `ids` and reserve what its exchange needs.
    fn plan_step(&self, ids: &[u64]) -> Result<PlannedStep> {
        let store = self.store()?;
        let data = self.data_comm();
        let plan = BatchPlan::on_node(&store.index, data.rank(), ids, &store.topology)?;
        let ranks = data.size();
        let shape = exchange_shape(&plan.remote, ranks, self.config.max_message_bytes);
        // A round of the collective engine receives at most this (all exchanged samples
        // in the single round of a step that fits MDL_MAX_MESSAGE_BYTES, else the per-rank
        // budget of a round: see `features::agreed_rounds` and the engine's whole-step
        // count); reserved now, before the agreement, so that running out of memory
        // fails every rank together.
        let max_message = self.config.max_message_bytes;
        let exchanged = shape.exchanged_bytes;
        let round_bytes = if exchanged <= max_message { exchanged } else { max_message / ranks as u64 };
        self.buffers.borrow_mut().reserve_received(round_bytes)?;
        Ok(PlannedStep { plan, shape })
    }

    /// Learn earlier steps' times as agreed (`times`: the slowest rank's, the fastest
    /// rank's negated, the last arrival, the first arrival negated, the last departure,
    /// see `agreement_values`). Every rank has the same
    /// earlier steps (all ran them), so all learn the same.
    fn learn(&mut self, measured: Vec<PendingMeasurement>, times: &[f64]) {
        let agreed = agreed_steps(times, measured.len());
        for (previous, AgreedStep { slowest, fastest, spreads }) in measured.into_iter().zip(agreed) {
            // With replica groups every group runs its own exchange: the slowest and
            // fastest ranks may be of different groups, and their spread no skew. The
            // arrivals compare only on one clock.
            let fastest = if self.group.is_some() { slowest } else { fastest };
            let spreads = (self.one_clock && self.group.is_none()).then_some(spreads);
            log::trace!(
                "step {}: measured {} {:.1} us (slowest rank), {:.1} us (fastest), arrivals and span {}",
                previous.step,
                previous.engine.name(),
                slowest * 1e6,
                fastest * 1e6,
                spreads.map_or("not known".to_string(), |s| format!("{:.1} and {:.1} us", s.arrivals * 1e6, s.span * 1e6))
            );
            let times = Measured { slowest, fastest, spreads };
            self.estimator.observe(previous.engine, &previous.features, times, previous.probe);
            let stats = self.stats.engine_mut(previous.engine);
            stats.measured_slowest_seconds += slowest;
            stats.measured_steps += 1;
            if let Some(probe) = previous.probe {
                let probes = &mut self.stats.probes;
                probes.steps += 1;
                probes.seconds += slowest;
                probes.excess_seconds += slowest - probe.preferred;
            }
        }
    }

    fn refuse_differing_backends(agreed: &Agreed) -> Result<()> {
        if agreed.backends_differ() {
            return Err(Error::invalid(format!(
                "the backend is set differently across ranks ({} and {}); call mdl_set_backend \
                 with the same value on every rank",
                agreed.backend_min.name(),
                agreed.backend_max.name()
            )));
        }
        if agreed.same_differs {
            // Every input of the model is agreed and its arithmetic portable, so this is
            // a defect (or a rank built differently): never enter a step the ranks might
            // run with different engines.
            return Err(Error::new(
                mdl_status::MDL_ERR_STATE,
                "the ranks' engine models differ (their fingerprints in the step's agreement): they could \
                 choose different engines for one step; the step is refused on every rank (a defect: \
                 please report it, with MDL_LOG=debug)",
            ));
        }
        Ok(())
    }

    /// The engine of a step whose agreed features are `features`, the same on every
    /// rank; None, with the node-local path on, when no rank has a remote sample (the
    /// copies are the whole step). With it off every step runs its engine, as before.
    fn decide(&mut self, features: &StepFeatures, node: NodeFeatures, backend: Backend) -> Option<Decision> {
        if (self.config.node_local || self.group.is_some()) && !features.needs_engine() {
            log::trace!("{features:?}, node-local {node:?}: no remote sample on any rank, no engine");
            return None;
        }
        let decision = self.estimator.decide(features, backend);
        self.log_decision(features, node, &decision);
        Some(decision)
    }

    fn log_decision(&self, features: &StepFeatures, node: NodeFeatures, decision: &Decision) {
        log::trace!(
            "step {}: {:?}, node-local {:?}: predicted one-sided {:.1} us, collective {:.1} us -> {}{}",
            self.estimator.counters().decisions,
            features,
            node,
            decision.predicted_onesided * 1e6,
            decision.predicted_collective * 1e6,
            decision.engine.name(),
            if decision.probe { " (probe)" } else { "" }
        );
    }

    /// The oldest measured steps, as many as one agreement brings.
    fn take_measured(&mut self) -> Vec<PendingMeasurement> {
        let carried = self.pending.len().min(MEASUREMENTS_PER_AGREEMENT);
        self.pending.drain(..carried).collect()
    }

    /// Run a step: copy the local and node-local samples, then move the remote ones
    /// with the decided engine (none when no rank has any); returns the samples
    /// fetched. The estimator learns from the engine's time alone: the copies cost the
    /// same whichever engine runs.
    fn run(
        &mut self,
        decision: Option<&Decision>,
        plan: &BatchPlan,
        out: &mut [u8],
        known_batches: Option<&dyn KnownBatches>,
        features: StepFeatures,
        requests_to_me: Option<&RequestsToOwner>,
    ) -> Result<u64> {
        let store = self.store.as_ref().expect("prepared fetches have a store");
        let in_group = match (&self.group, known_batches) {
            (Some(group), Some(all)) => Some(GroupBatches { all, group }),
            _ => None,
        };
        let known_batches = in_group.as_ref().map_or(known_batches, |b| Some(b as &dyn KnownBatches));
        let step = StepContext {
            // Not data_comm(): the statistics are borrowed mutably below.
            comm: self.group.as_ref().map_or(&self.comm, ReplicaGroup::comm),
            store,
            plan,
            limits: self.limits(),
            buffers: &self.buffers,
            collective_rounds: features.rounds as u64,
            requests_to_me,
            most_exchanged_bytes: features.most_exchanged_bytes(),
            known_batches,
            gets_end_in_barrier: self.gets_end_in_barrier,
        };
        let started = mpi::wtime();
        copy_local(&step, out);
        let copied = mpi::wtime();
        let arrived = node::monotonic_seconds();
        self.stats.node_local.record(plan.node_bytes, plan.node_samples, copied - started);
        if let Some(decision) = decision {
            let result = fetch_remote(&step, decision.engine, out);
            let seconds = mpi::wtime() - copied;
            let departed = node::monotonic_seconds();
            self.pending.push(PendingMeasurement {
                step: self.estimator.counters().decisions,
                engine: decision.engine,
                features,
                seconds: if result.is_ok() { seconds } else { 0.0 },
                arrived,
                departed,
                probe: decision.probe_prediction(),
            });
            self.stats.exchange_rounds += self.buffers.borrow_mut().take_rounds();
            result?;
            let engine_stats = self.stats.engine_mut(decision.engine);
            engine_stats.steps += 1;
            engine_stats.seconds += seconds;
            engine_stats.predicted_seconds += decision.predicted(decision.engine);
            engine_stats.predicted_other_seconds += decision.predicted(decision.engine.other());
        } else {
            self.stats.engine_free_steps += 1;
        }
        let samples = plan.out_offsets.len() as u64 - 1;
        self.stats.samples += samples;
        self.stats.bytes_local += plan.local_bytes() - plan.node_bytes;
        self.stats.bytes_remote += plan.remote_bytes();
        self.publish();
        Ok(samples)
    }
}

/// Whether a batch planned as `plan` fits an output buffer of `out_len` bytes.
fn fits(plan: &BatchPlan, out_len: usize) -> Result<()> {
    if plan.total_bytes() > out_len as u64 {
        return Err(Error::new(
            mdl_status::MDL_ERR_BUFFER_TOO_SMALL,
            format!(
                "the batch needs {} bytes, out_cap is {} (out_offsets[n] holds the size needed)",
                plan.total_bytes(),
                out_len
            ),
        ));
    }
    Ok(())
}
