//! One step's protocol: plan it locally, agree with the other ranks (errors, the
//! features of the step, the earlier steps' times), decide the engine, run it.
//! `mdl_fetch_batch` takes all of it at once; the steps agreed ahead (`ahead`) share
//! everything but the agreement's timing.

use super::core::Core;
use super::replica::{GroupBatches, ReplicaGroup};
use crate::agree::{Agreed, AgreementBuffers, CALL_AGREEMENT_MIN, Proposal, Setting, agree_in, agree_settings_in};
use crate::backend::Backend;
use crate::engine::{ExchangeShape, KnownBatches, RequestsToOwner, StepContext, copy_local, exchange_shape, fetch_remote};
use crate::error::{Error, Result, mdl_status};
use crate::estimator::model::StepFeatures;
use crate::estimator::features::NodeFeatures;
use crate::estimator::{Decision, Measured, ProbePrediction, Spreads, features};
use crate::memory;
use crate::mpi;
use crate::node;
use crate::plan::BatchPlan;

/// The caller's arguments of one fetch, already checked for NULL pointers.
pub struct FetchArgs<'a> {
    pub ids: &'a [u64],
    pub out: &'a mut [u8],
    /// ids.len() + 1 entries.
    pub out_offsets: &'a mut [u64],
    /// Every rank's ids of this step, when known (the built-in sampler); see
    /// `StepContext::known_batches`.
    pub known_batches: Option<&'a dyn KnownBatches>,
}

/// A step's plan, independent of the buffer it will fill.
pub(super) struct PlannedStep {
    pub(super) plan: BatchPlan,
    pub(super) shape: ExchangeShape,
}

/// A fetch that passed its local checks, ready to run once the ranks agree.
pub(super) struct PreparedFetch<'a> {
    pub(super) plan: BatchPlan,
    pub(super) out: &'a mut [u8],
    /// This rank's part of the collective exchange.
    pub(super) shape: ExchangeShape,
    pub(super) known_batches: Option<&'a dyn KnownBatches>,
}

pub(super) struct PendingMeasurement {
    /// The step's number on this loader (its estimator decisions so far), for the log.
    pub(super) step: u64,
    pub(super) engine: Backend,
    pub(super) features: StepFeatures,
    /// This rank's time; 0 when the step failed here.
    pub(super) seconds: f64,
    /// When this rank started the step's engine (`node::monotonic_seconds`).
    pub(super) arrived: f64,
    /// When this rank left it, on the same clock: `arrived + seconds` would mix the
    /// shared clock with `MPI_Wtime`, which may be another clock (MPICH's may follow
    /// wall time, and a wall clock may be stepped between the two readings).
    pub(super) departed: f64,
    /// For a probe: what was predicted at its decision.
    pub(super) probe: Option<ProbePrediction>,
}

/// The values each rank contributes to a step's agreement: the times of the steps it
/// ran since the last agreement started (the same number on every rank, since all
/// ran the same steps), then the same times negated (the all-reduce's maximum of
/// those is the fastest rank's time), then when it started each of those steps'
/// engines, and the same negated (the last and the first rank's arrival), then when
/// it left them, and the same negated (the last and the first departure), then the
/// step's features (see `estimator::features`). The features start at [`times_len`].
pub(super) fn agreement_values(measured: &[PendingMeasurement], features_len: usize) -> Vec<f64> {
    let n = measured.len();
    let mut values = vec![0.0; times_len(measured) + features_len];
    for (k, m) in measured.iter().enumerate() {
        values[k] = m.seconds;
        values[n + k] = -m.seconds;
        values[2 * n + k] = m.arrived;
        values[3 * n + k] = -m.arrived;
        values[4 * n + k] = m.departed;
        values[5 * n + k] = -m.departed;
    }
    values
}

/// Values per measured step in an agreement (see [`agreement_values`]).
const VALUES_PER_MEASUREMENT: usize = 6;

/// One earlier step as the ranks agreed on it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct AgreedStep {
    /// The slowest and the fastest rank's engine time.
    slowest: f64,
    fastest: f64,
    /// When the last rank started the engine, less when the first did, and the same
    /// for when they left it (on one clock).
    spreads: Spreads,
}

/// The `n` measured steps of an agreement, from the maxima of every rank's
/// [`agreement_values`] (its first [`times_len`] values).
fn agreed_steps(maxima: &[f64], n: usize) -> impl Iterator<Item = AgreedStep> + '_ {
    let column = move |c: usize, k: usize| maxima[c * n + k];
    (0..n).map(move |k| AgreedStep {
        slowest: column(0, k),
        fastest: -column(1, k),
        spreads: Spreads {
            arrivals: (column(2, k) + column(3, k)).max(0.0),
            departures: (column(4, k) + column(5, k)).max(0.0),
        },
    })
}

pub(super) fn times_len(measured: &[PendingMeasurement]) -> usize {
    VALUES_PER_MEASUREMENT * measured.len()
}

/// The most measured steps one agreement brings: its buffers are reserved ahead for a
/// bounded number of values. Each step adds one measurement and each agreement takes up
/// to this many, so the ones left (after an epoch's last steps, which start no
/// agreement) come with the next agreements.
const MEASUREMENTS_PER_AGREEMENT: usize = 4;

impl Core {
    /// Collective: fetch a batch into the caller's buffer.
    pub fn fetch_batch(&mut self, args: Result<FetchArgs>) -> Result<()> {
        let prepared = args.and_then(|args| self.prepare(args));
        let (ranks, me) = (self.data_comm().size(), self.data_comm().rank());
        let matrix_max_ranks = self.matrix_max_ranks();
        let measured = self.take_measured();
        let at = times_len(&measured);
        let mut maxima = agreement_values(&measured, features::encoded_len(ranks, matrix_max_ranks));
        if let Ok(p) = &prepared {
            features::encode(&p.plan, &p.shape, me, matrix_max_ranks, self.buffers.borrow().room(), &mut maxima[at..]);
        }
        let error = prepared.as_ref().err().cloned();
        let same = self.estimator.fingerprint();
        let mut buffers = self.take_agreement_buffers();
        let agreed = agree_in(&self.comm, &Proposal { error: error.clone(), backend: self.backend, maxima, same }, &mut buffers);
        self.give_back_agreement_buffers(buffers);
        let agreed = match agreed {
            Ok(agreed) => agreed,
            Err(err) => {
                if err.status == mdl_status::MDL_ERR_CALL_MISMATCH {
                    // Nothing was done, on any rank: the measurements go with the next step.
                    self.pending.splice(0..0, measured);
                }
                return Err(err);
            }
        };
        self.settle(measured, &agreed, error)?;
        let prepared = prepared.expect("agreed that every rank prepared its fetch");
        let (step_features, node, requests_to_me) = self.agreed_features(&agreed.maxima[at..]);
        let decision = self.decide(&step_features, node, self.backend);
        let samples = self.run(decision.as_ref(), prepared, step_features, requests_to_me.as_ref())?;
        self.log_summary_every_epoch(samples);
        Ok(())
    }

    /// What every step does with its agreement first: learn the earlier steps' times it
    /// carries, then fail where any rank failed or the backends differ.
    pub(super) fn settle(&mut self, measured: Vec<PendingMeasurement>, agreed: &Agreed, error: Option<Error>) -> Result<()> {
        let at = times_len(&measured);
        self.learn(measured, &agreed.maxima[..at]);
        agreed.outcome(error)?;
        Self::refuse_differing_backends(agreed)
    }

    /// The step's features, its node's, and (with the request matrix) what the others
    /// ask of this rank, from the agreed values that follow the times.
    pub(super) fn agreed_features(&self, values: &[f64]) -> (StepFeatures, NodeFeatures, Option<RequestsToOwner>) {
        let (ranks, me, matrix_max_ranks) = (self.data_comm().size(), self.data_comm().rank(), self.matrix_max_ranks());
        let max_message = self.config.max_message_bytes;
        (
            features::decode(values, ranks, matrix_max_ranks, max_message),
            features::decode_node(values),
            features::requests_to(values, ranks, matrix_max_ranks, me, max_message),
        )
    }

    /// Local part of a fetch: plan it, lay out the output, check the capacity.
    fn prepare<'a>(&self, args: FetchArgs<'a>) -> Result<PreparedFetch<'a>> {
        let PlannedStep { plan, shape } = self.plan_step(args.ids)?;
        // Filled even when the buffer is too small: out_offsets[n] tells the size needed.
        args.out_offsets.copy_from_slice(&plan.out_offsets);
        fits(&plan, args.out.len())?;
        Ok(PreparedFetch { plan, out: args.out, shape, known_batches: args.known_batches })
    }

    /// Plan a fetch of `ids` and reserve what its exchange needs.
    pub(super) fn plan_step(&self, ids: &[u64]) -> Result<PlannedStep> {
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
    /// the first departure negated, see `agreement_values`). Every rank has the same
    /// earlier steps (all ran them), so all learn the same.
    pub(super) fn learn(&mut self, measured: Vec<PendingMeasurement>, times: &[f64]) {
        let agreed = agreed_steps(times, measured.len());
        for (previous, AgreedStep { slowest, fastest, spreads }) in measured.into_iter().zip(agreed) {
            // With replica groups every group runs its own exchange: the slowest and
            // fastest ranks may be of different groups, and their spread no skew. The
            // arrivals compare only on one clock.
            let fastest = if self.group.is_some() { slowest } else { fastest };
            let spreads = (self.one_clock && self.group.is_none()).then_some(spreads);
            log::trace!(
                "step {}: measured {} {:.1} us (slowest rank), {:.1} us (fastest), arrivals {} apart",
                previous.step,
                previous.engine.name(),
                slowest * 1e6,
                fastest * 1e6,
                spreads.map_or("not known".to_string(), |s| format!("{:.1} us", s.arrivals * 1e6))
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

    pub(super) fn refuse_differing_backends(agreed: &Agreed) -> Result<()> {
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
    pub(super) fn decide(&mut self, features: &StepFeatures, node: NodeFeatures, backend: Backend) -> Option<Decision> {
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
    pub(super) fn take_measured(&mut self) -> Vec<PendingMeasurement> {
        let carried = self.pending.len().min(MEASUREMENTS_PER_AGREEMENT);
        self.pending.drain(..carried).collect()
    }

    /// The most values (besides the header) any step's agreement proposes (its
    /// measured steps and the larger of the two feature layouts), and at least as many
    /// as any other call's first agreement: every agreement through the reserved
    /// buffers is padded to this, so that ranks in different calls meet reductions of
    /// one length and are told so (see `agree`).
    fn agreement_values_max(&self) -> usize {
        let (ranks, matrix_max_ranks) = (self.data_comm().size(), self.matrix_max_ranks());
        let step = VALUES_PER_MEASUREMENT * MEASUREMENTS_PER_AGREEMENT
            + features::encoded_len(ranks, matrix_max_ranks).max(features::KNOWN_LEN);
        step.max(CALL_AGREEMENT_MIN)
    }

    /// Collective: agree on `checks` and `settings` as the first agreement of a call
    /// that is not a step (an epoch's start, the job's statistics, finalize), padded
    /// like the steps' agreements (see [`Core::agreement_values_max`]).
    pub fn agree_call(&mut self, checks: Result<()>, settings: &[Setting]) -> Result<Vec<u64>> {
        let mut buffers = self.take_agreement_buffers();
        let reserved = buffers.is_reserved();
        // Unreserved: the agreement of a few values on the stack, which cannot fail alone.
        let agreed = agree_settings_in(&self.comm, checks, settings, reserved.then_some(&mut buffers));
        self.give_back_agreement_buffers(buffers);
        agreed
    }

    /// Buffers for a step's or a call's first agreement: once the loader is registered
    /// (on every rank alike), reserved ones, which pad it to one length; before, or
    /// where none is left, unreserved ones, on every rank alike too (the reserved
    /// buffers are taken and given back in the same order everywhere).
    pub(super) fn take_agreement_buffers(&mut self) -> AgreementBuffers {
        match self.store {
            Some(_) => self.agreement_buffers.pop().unwrap_or_default(),
            None => AgreementBuffers::default(),
        }
    }

    pub(super) fn give_back_agreement_buffers(&mut self, buffers: AgreementBuffers) {
        if buffers.is_reserved() {
            self.agreement_buffers.push(buffers);
        }
    }

    /// Reserve buffers for `under_way` step agreements at once, before an agreement
    /// that carries the failure to every rank (registration: one, for
    /// `mdl_fetch_batch`; an epoch's start: its steps agreed ahead): no step's
    /// agreement then allocates, where a failure on one rank would leave the others
    /// waiting in the reduction.
    pub fn reserve_agreements(&mut self, under_way: usize) -> Result<()> {
        let values = self.agreement_values_max();
        while self.agreement_buffers.len() < under_way {
            memory::reserve(&mut self.agreement_buffers, 1)?;
            self.agreement_buffers.push(AgreementBuffers::reserve(values)?);
        }
        Ok(())
    }

    /// Run a step: copy the local and node-local samples, then move the remote ones
    /// with the decided engine (none when no rank has any); returns the samples
    /// fetched. The estimator learns from the engine's time alone: the copies cost the
    /// same whichever engine runs.
    pub(super) fn run(
        &mut self,
        decision: Option<&Decision>,
        prepared: PreparedFetch,
        features: StepFeatures,
        requests_to_me: Option<&RequestsToOwner>,
    ) -> Result<u64> {
        let PreparedFetch { plan, out, known_batches, .. } = prepared;
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
            plan: &plan,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `departed` is not `arrived + seconds` here: the departure is read on its own, on
    /// the arrivals' clock, after the engine.
    fn measurement(seconds: f64, arrived: f64, departed: f64) -> PendingMeasurement {
        let features = StepFeatures { gets: 1.0, samples: 1.0, bytes: 1.0, rounds: 1.0, served: 1.0 };
        PendingMeasurement { step: 0, engine: Backend::OneSided, features, seconds, arrived, departed, probe: None }
    }

    /// What each rank proposes, combined as the agreement's all-reduce does (maximum),
    /// reads back as the slowest and fastest rank's times and the arrivals' spread.
    #[test]
    fn the_agreement_brings_each_steps_extremes() {
        let ranks = [
            vec![measurement(3e-6, 100.000_010, 100.000_020), measurement(9e-6, 100.000_500, 100.000_600)],
            vec![measurement(5e-6, 100.000_002, 100.000_012), measurement(4e-6, 100.000_900, 100.000_950)],
            vec![measurement(1e-6, 100.000_004, 100.000_009), measurement(6e-6, 100.000_800, 100.000_820)],
        ];
        let proposals: Vec<Vec<f64>> = ranks.iter().map(|m| agreement_values(m, 3)).collect();
        assert_eq!(proposals[0].len(), 6 * 2 + 3, "six values per step, then the features");
        let maxima: Vec<f64> = (0..proposals[0].len()).map(|i| proposals.iter().map(|p| p[i]).fold(f64::MIN, f64::max)).collect();
        let agreed: Vec<AgreedStep> = agreed_steps(&maxima[..times_len(&ranks[0])], 2).collect();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert_eq!((agreed[0].slowest, agreed[0].fastest), (5e-6, 1e-6));
        assert_eq!((agreed[1].slowest, agreed[1].fastest), (9e-6, 4e-6));
        assert!(close(agreed[0].spreads.arrivals, 8e-6), "{:?}", agreed[0]);
        assert!(close(agreed[1].spreads.arrivals, 400e-6), "{:?}", agreed[1]);
        // The departures as read (arrival + time would give 8 and 395 us).
        assert!(close(agreed[0].spreads.departures, 11e-6), "{:?}", agreed[0]);
        assert!(close(agreed[1].spreads.departures, 350e-6), "{:?}", agreed[1]);
    }
}
