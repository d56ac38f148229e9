//! The loader's core: the communicator, the store, both engines and the estimator;
//! everything a fetch needs. The sampler's prefetch thread runs fetches on it too.
//!
//! Every collective entry point follows the same pattern: do all local checks and
//! planning, agree with the other ranks (one small all-reduce), and only then
//! communicate. See `agree.rs`.

use super::epoch::Batch;
use super::published::Published;
use super::replica::{GroupBatches, GroupSpec, ReplicaGroup, ReplicaInfo};
use crate::agree::{
    Agreed, AgreementBuffers, AgreementUnderWay, Proposal, Setting, agree_identical, agree_in, agree_on_checks, agree_settings,
    start_agreement,
};
use crate::config::{Backend, Calibration as CalibrationMode, Config, Progress, Wait};
use crate::engine::{ExchangeBuffers, ExchangeShape, KnownBatches, RequestsToOwner, StepContext, copy_local, exchange_shape, fetch_remote};
use crate::error::{Error, Result, mdl_status};
use crate::estimator::calibrate::{self, Calibration, CalibrationSettings};
use crate::estimator::model::{CostParams, StepFeatures};
use crate::estimator::features::NodeFeatures;
use crate::estimator::{Measured, Decision, Estimator, EstimatorCounters, Settings, features};
use crate::memory;
use crate::mpi::{self, Comm, GetLimits, ProgressThread, WaitPolicy};
use crate::node;
use crate::plan::BatchPlan;
use crate::sampler::Epoch;
use crate::stats::{JobStats, Stats};
use crate::store::{ShardView, Store, StoreSettings};
use mpi_sys::MPI_Comm;
use std::cell::RefCell;
use std::sync::Arc;

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

pub struct Core {
    /// Drives MPI's progress between calls where gets need it (`mpi::ProgressThread`).
    /// First, so that it stops before anything it uses is freed.
    progress: Option<ProgressThread>,
    /// Agreed: one-sided steps end in a barrier, because some rank serves gets with
    /// neither a progress thread nor a guarantee that it stays in MPI (see
    /// [`Core::agree_on_lingering`]).
    gets_end_in_barrier: bool,
    /// The host's ranks (a duplicate): agreements, the sampler's split, job statistics.
    comm: Comm,
    /// This rank's replica group, when the host is split into several
    /// (`mdl_init_replicated`): the store and the engines live on it. None: the host.
    group: Option<ReplicaGroup>,
    config: Config,
    backend: Backend,
    store: Option<Store>,
    /// What local calls read without the step lock (index, statistics).
    published: Arc<Published>,
    /// The collective engine's buffers, reused from step to step.
    buffers: RefCell<ExchangeBuffers>,
    /// The sampler's batch buffers between epochs, kept for their capacity: an epoch
    /// of a few steps would otherwise grow (and zero) new ones each time.
    spare_batches: Vec<Batch>,
    estimator: Estimator,
    calibration: Calibration,
    stats: Stats,
    /// The steps run since the last agreement started, whose slowest-rank times the
    /// next agreements bring (at most `MEASUREMENTS_PER_AGREEMENT` each).
    pending: Vec<PendingMeasurement>,
    /// Buffers for the steps' agreements, reserved ahead (see
    /// [`Core::reserve_agreements`]) and used again from step to step.
    agreement_buffers: Vec<AgreementBuffers>,
    /// Samples fetched on this rank since the last summary line in the log.
    samples_since_summary: u64,
    /// The statistics and the estimator's counters at the last summary line.
    summarised: (Stats, EstimatorCounters),
}

/// A sampler step planned ahead, whose agreement is under way (see `loader::pipeline`).
pub struct StepAhead {
    /// The plan, or this rank's reason to fail the step (agreed with the others).
    prepared: Result<PlannedStep>,
    /// The earlier steps whose slowest-rank times this agreement brings.
    measured: Vec<PendingMeasurement>,
    agreement: AgreementUnderWay,
}

/// A step's plan, independent of the buffer it will fill.
struct PlannedStep {
    plan: BatchPlan,
    shape: ExchangeShape,
}

/// A fetch that passed its local checks, ready to run once the ranks agree.
struct PreparedFetch<'a> {
    plan: BatchPlan,
    out: &'a mut [u8],
    /// This rank's part of the collective exchange.
    shape: ExchangeShape,
    known_batches: Option<&'a dyn KnownBatches>,
}

struct PendingMeasurement {
    /// The step's number on this loader (its estimator decisions so far), for the log.
    step: u64,
    engine: Backend,
    features: StepFeatures,
    /// This rank's time; 0 when the step failed here.
    seconds: f64,
    /// For a probe: the corrected prediction of the engine it stood in for.
    probe_instead_of: Option<f64>,
}

/// The values each rank contributes to a step's agreement: the times of the steps it
/// ran since the last agreement started (the same number on every rank, since all
/// ran the same steps), then the same times negated (the all-reduce's maximum of
/// those is the fastest rank's time), then the step's features (see
/// `estimator::features`). The features start at [`times_len`].
fn agreement_values(measured: &[PendingMeasurement], features_len: usize) -> Vec<f64> {
    let n = measured.len();
    let mut values = vec![0.0; times_len(measured) + features_len];
    for (k, m) in measured.iter().enumerate() {
        values[k] = m.seconds;
        values[n + k] = -m.seconds;
    }
    values
}

fn times_len(measured: &[PendingMeasurement]) -> usize {
    2 * measured.len()
}

/// The most measured steps one agreement brings: its buffers are reserved ahead for a
/// bounded number of values. Each step adds one measurement and each agreement takes up
/// to this many, so the ones left (after an epoch's last steps, which start no
/// agreement) come with the next agreements.
const MEASUREMENTS_PER_AGREEMENT: usize = 4;

impl Core {
    /// Collective: duplicate `host`, read the configuration and agree on it (every
    /// setting identical on every rank, and one wait policy). `local_check` carries an
    /// argument error found by the caller, so that every rank fails together.
    /// `group_size` is `mdl_init_replicated`'s (None for `mdl_init`: the whole host):
    /// checked and agreed with the configuration, then the host is split into groups.
    pub fn init(host: MPI_Comm, local_check: Result<()>, group_size: Option<i64>) -> Result<Core> {
        let mut comm = Comm::duplicate(host)?;
        let spec = group_size.map_or(Ok(GroupSpec::Whole), |size| GroupSpec::from_arg(size, comm.size()));
        let agreed = Self::agree_on_config(&comm, local_check, spec);
        let (config, policy, spec) = match agreed {
            Ok(agreed) => agreed,
            Err(err) => {
                comm.free()?;
                return Err(err);
            }
        };
        comm.set_wait_policy(policy);
        let group = ReplicaGroup::split(&comm, spec, config.node_key)?;
        log::debug!(
            "loader rank {}/{}: backend {}, max message {} bytes, waits {}",
            comm.rank(),
            comm.size(),
            config.backend.name(),
            config.max_message_bytes,
            if policy.yield_between_tests { "yield (more ranks than cores)" } else { "spin" }
        );
        let replicas = group.as_ref().map_or(ReplicaInfo::whole(comm.rank(), comm.size()), ReplicaGroup::info);
        if replicas.groups > 1 {
            log::debug!("replica group {} of {}: rank {} of {}", replicas.group, replicas.groups, replicas.rank_in_group, replicas.group_size);
        }
        let published = Arc::new(Published::new(comm.rank(), comm.size(), config.backend, replicas));
        Ok(Core {
            backend: config.backend,
            comm,
            group,
            config,
            store: None,
            published,
            buffers: RefCell::default(),
            spare_batches: Vec::new(),
            progress: None,
            gets_end_in_barrier: false,
            estimator: Estimator::new(CostParams::default(), Settings { probe_interval: 0, hysteresis: 0.0, probe_budget: 0.0 }),
            calibration: Calibration::default_params("default"),
            stats: Stats::default(),
            pending: Vec::new(),
            agreement_buffers: Vec::new(),
            samples_since_summary: 0,
            summarised: Default::default(),
        })
    }

    /// Collective: the configuration every rank read, checked identical, and the wait
    /// policy. `MDL_WAIT=auto` yields between tests on MPICH when a node's ranks
    /// outnumber its cores (its blocking calls busy-poll); nodes may differ, and a
    /// blocking collective never matches a nonblocking one, so if any node is
    /// oversubscribed every rank yields. Open MPI's blocking calls yield by themselves
    /// when oversubscribed (and beat test-and-yield 2-3x there, measured).
    fn agree_on_config(comm: &Comm, local_check: Result<()>, spec: Result<GroupSpec>) -> Result<(Config, WaitPolicy, GroupSpec)> {
        let read = Config::from_env();
        // A rank whose environment is invalid still sends a full set of values, so
        // that every rank's all-reduce has the same length.
        let mut settings = read.as_ref().map_or_else(|_| Config::default().settings(), Config::settings);
        let group_size = spec.as_ref().map_or(0, |s| s.agreed_value(comm.size()));
        settings.push(Setting::identical("group_size (mdl_init_replicated; mdl_init is the whole communicator)", group_size));
        let checks = local_check.and(spec.as_ref().map(|_| ()).map_err(Clone::clone)).and(read.as_ref().map(|_| ()).map_err(Clone::clone));
        agree_identical(comm, checks, &settings)?;
        let config = read.expect("agreed that every rank read its configuration");
        let spec = spec.expect("agreed that every rank's group_size is valid");
        let yield_between_tests = match config.wait {
            Wait::Spin => false,
            Wait::Yield => true,
            Wait::Auto if !mpi::is_mpich() => false,
            Wait::Auto => {
                let ranks_here = comm.ranks_on_node(node::machine_key());
                let oversubscribed = ranks_here.as_ref().map_or(false, |&n| n > node::online_cores());
                let any = Setting::max("oversubscribed node", oversubscribed as u64);
                agree_settings(comm, ranks_here.map(|_| ()), &[any])?[0] != 0
            }
        };
        let policy = WaitPolicy {
            yield_between_tests,
            trust_flush: !mpi::is_mpich(),
            timeout_seconds: config.timeout_seconds,
        };
        Ok((config, policy, spec))
    }

    /// Collective: copy this rank's shard into the store, build the global index and
    /// calibrate the estimator (or load and agree on the parameters of a file).
    pub fn register_shard(&mut self, shard: Result<ShardView>) -> Result<()> {
        let loaded = match &self.config.calibration {
            CalibrationMode::File(path) => Some(calibrate::load(path)),
            CalibrationMode::Measure | CalibrationMode::Off => None,
        };
        let checks = match (&self.store, &shard, &loaded) {
            (Some(_), _, _) => Err(Error::state("a shard is already registered on this loader")),
            (None, Err(err), _) | (None, Ok(_), Some(Err(err))) => Err(err.clone()),
            (None, Ok(_), _) => Ok(()),
        };
        // A file is read on each rank (its path may be node-local): its parameters must
        // be the same bit for bit, or the ranks would choose different engines.
        let params = match &loaded {
            Some(Ok(c)) => c.params,
            _ => CostParams::default(),
        };
        let named: Vec<(String, f64)> = params.named().into_iter().map(|(n, v)| (format!("MDL_CALIBRATION file: \"{n}\""), v)).collect();
        let file_settings: Vec<Setting> = named.iter().map(|(name, v)| Setting::float(name, *v)).collect();
        // The buffers of mdl_fetch_batch's agreements, reserved where a failure is agreed.
        let checks = checks.and_then(|()| self.reserve_agreements(1));
        agree_identical(&self.comm, checks, &file_settings)?;
        let shard = shard.expect("agreed that every rank's shard is valid");
        let started = mpi::wtime();
        let store = self.register_copy(&shard)?;
        log::info!(
            "registered {} samples ({} bytes) of {} in {:.3} s; {}",
            shard.num_samples(),
            shard.data.len(),
            store.index.num_samples(),
            mpi::wtime() - started,
            store.index.describe()
        );
        self.published.set_index(store.index.clone());
        self.store = Some(store);
        self.calibration = match loaded {
            Some(loaded) => loaded.expect("agreed that every rank loaded its file"),
            None if self.config.calibration == CalibrationMode::Off => Calibration::default_params("default"),
            None => self.measure_calibration()?,
        };
        self.estimator = Estimator::new(
            perturbed_for_tests(self.calibration.params),
            Settings {
                probe_interval: self.config.probe_interval,
                hysteresis: self.config.hysteresis,
                probe_budget: self.config.probe_budget,
            },
        );
        self.published.set_calibration(&self.calibration);
        self.publish();
        self.progress = self.start_progress();
        self.gets_end_in_barrier = self.agree_on_lingering()?;
        Ok(())
    }

    /// Collective: whether some rank serves one-sided gets without a progress thread
    /// (no `MPI_THREAD_MULTIPLE` on it, as Open MPI's pt2pt one-sided component
    /// demands). Such a rank serves a peer's get only while it is inside MPI; leaving a
    /// step for another library's collective (DDP's gloo all-reduce) while a peer still
    /// reads from it would hang both. Every one-sided step then ends in a barrier on
    /// every rank, so no rank leaves MPI before the last get of the step has been
    /// served; it costs the ranks' skew, which the estimator then sees in the one-sided
    /// engine's times. `MDL_PROGRESS=off` on a rank keeps it out of this (the user
    /// takes the risk, as with the thread).
    fn agree_on_lingering(&self) -> Result<bool> {
        let wanted = self.config.progress != Progress::Off && self.gets_made() && self.progress.is_none();
        let agreed = self.comm.allreduce_max(&[wanted as u8])?[0] != 0;
        if agreed {
            log::info!(
                "one-sided steps end in a barrier: a rank serves gets without a progress thread \
                 (MPI_THREAD_MULTIPLE missing), and would otherwise serve them only while inside MPI"
            );
        }
        Ok(agreed)
    }

    /// Whether any get is ever made (one node whose samples are all copies makes none).
    fn gets_made(&self) -> bool {
        let one_node = self.store.as_ref().is_some_and(|store| store.topology.is_one_node());
        self.data_comm().size() > 1 && !one_node
    }

    /// Stop the progress thread (a loader about to be leaked after a failure).
    pub fn stop_progress(&mut self) {
        self.progress = None;
    }

    /// The progress thread, where `MDL_PROGRESS` asks for it and MPI allows it. Local:
    /// it changes no communication, so the ranks need not agree.
    fn start_progress(&self) -> Option<ProgressThread> {
        let gets_made = self.gets_made();
        let wanted = match self.config.progress {
            Progress::Off => false,
            Progress::On => true,
            // Not MPICH alone: Open MPI's one-sided components over TCP (pt2pt, ucx's
            // emulation) also need the target's progress, and a poke every 20 ms
            // costs nothing measurable where they do not.
            Progress::Auto => gets_made,
        };
        if !wanted {
            return None;
        }
        if !mpi::thread_multiple() {
            let why = "the progress thread needs MPI initialised with MPI_THREAD_MULTIPLE";
            if self.config.progress == Progress::On {
                log::warn!("MDL_PROGRESS=on: {why}; not started");
            } else {
                log::info!("{why}; not started (a one-sided get then waits for its target to call MPI)");
            }
            return None;
        }
        let interval = std::time::Duration::from_micros(self.config.progress_interval_us);
        match ProgressThread::start(self.data_comm(), interval) {
            Ok(thread) => {
                log::info!("progress thread started (MPI_Iprobe every {} us)", self.config.progress_interval_us);
                Some(thread)
            }
            Err(err) => {
                log::warn!("{}: one-sided gets may wait for their targets to call MPI", err.message);
                None
            }
        }
    }

    /// Collective: the store of this rank's group (the host, without groups), checked
    /// to hold the same dataset as every other group: the same number of samples and
    /// the same lengths (a checksum; the bytes themselves are the caller's promise). A
    /// group that fails fails every group.
    fn register_copy(&self, shard: &ShardView) -> Result<Store> {
        let Some(group) = &self.group else { return Store::register(&self.comm, shard, &self.store_settings()) };
        let settings = self.store_settings();
        let registered = self
            .comm
            .one_part_per_node_at_a_time(group.info().group as u64, || Store::register(group.comm(), shard, &settings))?;
        let (samples, lengths) = match &registered {
            Ok(store) => {
                let first_id = store.index.first_ids()[group.comm().rank()];
                (store.index.num_samples(), group.comm().allreduce_sum(&[shard.lengths_checksum(first_id)])?[0])
            }
            Err(_) => (0, 0),
        };
        let same_dataset = [
            Setting::identical("the number of samples a replica group holds", samples),
            Setting::identical("the sample lengths a replica group holds (a checksum)", lengths),
        ];
        match agree_identical(&self.comm, registered.as_ref().map(|_| ()).map_err(Clone::clone), &same_dataset) {
            Ok(()) => registered,
            Err(err) => {
                registered.map_or(Ok(()), Store::free)?;
                Err(err)
            }
        }
    }

    /// Collective: the cost model's parameters. With replica groups only the group of
    /// host rank 0 measures (on its own ranks, as every group fetches), and every rank
    /// of the job takes its figures, so that all decide alike; the other groups wait.
    /// Measuring in one group also keeps groups of one node from creating windows at
    /// once (see `Comm::one_part_per_node_at_a_time`).
    fn measure_calibration(&self) -> Result<Calibration> {
        let settings = CalibrationSettings {
            budget_seconds: self.config.calibration_seconds,
            matrix_max_ranks: self.config.matrix_max_ranks,
            // The scratch store's windows are of the kind the registered store's are.
            store: StoreSettings { placement: self.store.as_ref().map(|s| s.placement), ..self.store_settings() },
            topology: self.store.as_ref().map(|s| s.topology.clone()).unwrap_or_default(),
        };
        let Some(group) = &self.group else { return calibrate::measure(&self.comm, &settings) };
        let measures = group.info().group == 0;
        let measured = if measures { calibrate::measure(group.comm(), &settings) } else { Ok(Calibration::default_params("default")) };
        agree_on_checks(&self.comm, measured.as_ref().map(|_| ()).map_err(Clone::clone))?;
        let mut measured = measured.expect("agreed that the measuring group succeeded");
        let mut figures: Vec<f64> = measured.params.named().iter().map(|(_, v)| *v).collect();
        let was_measured = f64::from(u8::from(measured.source == "measured"));
        figures.extend([measured.seconds, measured.points[0] as f64, measured.points[1] as f64, was_measured]);
        self.comm.bcast_into(0, &mut figures)?;
        let named: Vec<(String, f64)> = measured.params.named().iter().zip(&figures).map(|((n, _), v)| (n.to_string(), *v)).collect();
        let [seconds, one_sided, collective, was_measured] = figures[named.len()..] else {
            unreachable!("four figures follow the parameters")
        };
        measured.params = CostParams::from_named(&named).expect("the same names");
        measured.seconds = seconds;
        measured.points = [one_sided as usize, collective as usize];
        measured.source = if was_measured == 1.0 { "measured" } else { "default" };
        Ok(measured)
    }

    /// The communicator the store and the engines use: the group's, or the host's.
    fn data_comm(&self) -> &Comm {
        self.group.as_ref().map_or(&self.comm, ReplicaGroup::comm)
    }

    /// `MDL_MATRIX_MAX_RANKS`, or 0 with replica groups: the request matrix would be
    /// combined across groups (the agreement is the host's), where it means nothing.
    fn matrix_max_ranks(&self) -> usize {
        if self.group.is_some() { 0 } else { self.config.matrix_max_ranks }
    }

    fn store_settings(&self) -> StoreSettings {
        StoreSettings {
            limits: self.limits(),
            warm_up_gets: self.config.warm_up_gets,
            shared_index: self.config.shared_index,
            node_local: self.config.node_local,
            node_key: self.config.node_key,
            shm_dir: self.config.shm_dir.clone(),
            shm_reserve: self.config.shm_reserve,
            placement: None,
        }
    }

    fn limits(&self) -> GetLimits {
        GetLimits { max_message: self.config.max_message_bytes, max_in_flight: self.config.max_gets_in_flight }
    }

    /// Hand the statistics to local calls (`mdl_stats_json`), which do not take the
    /// step lock.
    fn publish(&self) {
        self.published.set_stats(&self.stats, self.backend, self.estimator.counters());
    }

    /// `MDL_AGREEMENT_LAG`, agreed at init.
    /// A batch buffer an earlier epoch left, if any.
    pub fn take_spare_batch(&mut self) -> Option<Batch> {
        self.spare_batches.pop()
    }

    /// Keep an epoch's batch buffers for the next epoch.
    pub fn keep_spare_batches(&mut self, batches: impl IntoIterator<Item = Batch>) {
        self.spare_batches.extend(batches);
    }

    pub fn agreement_lag(&self) -> u64 {
        self.config.agreement_lag
    }

    pub fn published(&self) -> &Arc<Published> {
        &self.published
    }

    fn store(&self) -> Result<&Store> {
        self.store.as_ref().ok_or_else(|| Error::state("no shard registered yet (call mdl_register_shard first)"))
    }

    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn num_samples(&self) -> Result<u64> {
        Ok(self.store()?.index.num_samples())
    }

    /// This rank's global ids (its group's, with replica groups), when the collective
    /// engine may run (not forced one-sided).
    pub fn owned_ids(&self) -> Option<std::ops::Range<u64>> {
        let first = self.store.as_ref()?.index.first_ids();
        let me = self.data_comm().rank();
        (self.backend != Backend::OneSided).then(|| first[me]..first[me + 1])
    }

    pub fn set_backend(&mut self, backend: Backend) {
        self.backend = backend;
        self.publish();
    }

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
        let mut buffers = self.agreement_buffers.pop().unwrap_or_default();
        let agreed = agree_in(&self.comm, &Proposal { error: error.clone(), backend: self.backend, maxima, same }, &mut buffers);
        self.agreement_buffers.push(buffers);
        let agreed = agreed?;
        self.learn(measured, &agreed.maxima[..at]);
        agreed.outcome(error)?;
        Self::refuse_differing_backends(&agreed)?;
        let prepared = prepared.expect("agreed that every rank prepared its fetch");
        let step_features = features::decode(&agreed.maxima[at..], ranks, matrix_max_ranks, self.config.max_message_bytes);
        let requests_to_me = features::requests_to(&agreed.maxima[at..], ranks, matrix_max_ranks, me, self.config.max_message_bytes);
        let node = features::decode_node(&agreed.maxima[at..]);
        let decision = self.decide(&step_features, node, self.backend);
        let samples = self.run(decision.as_ref(), prepared, step_features, requests_to_me.as_ref())?;
        self.log_summary_every_epoch(samples);
        Ok(())
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
    fn plan_step(&self, ids: &[u64]) -> Result<PlannedStep> {
        let store = self.store()?;
        let data = self.data_comm();
        let plan = BatchPlan::on_node(&store.index, data.rank(), ids, &store.topology)?;
        let ranks = data.size();
        let shape = exchange_shape(&plan.remote, ranks, self.config.max_message_bytes);
        // A round of the collective engine receives at most this (all exchanged samples
        // in the single round of a step that fits the MPI's counts, else the per-rank
        // budget of a round: see `features::agreed_rounds` and the engine's whole-step
        // count); reserved now, before the agreement, so that running out of memory
        // fails every rank together.
        let max_message = self.config.max_message_bytes;
        let exchanged = shape.exchanged_bytes;
        let round_bytes = if exchanged <= max_message { exchanged } else { max_message / ranks as u64 };
        self.buffers.borrow_mut().reserve_received(round_bytes)?;
        Ok(PlannedStep { plan, shape })
    }

    /// Learn earlier steps' times as agreed (`times`: the slowest rank's, then the
    /// fastest rank's negated, see `agreement_values`). Every rank has the same earlier
    /// steps (all ran them), so all learn the same.
    fn learn(&mut self, measured: Vec<PendingMeasurement>, times: &[f64]) {
        let (slowest, negated_fastest) = times.split_at(measured.len());
        for ((previous, &slowest), &negated_fastest) in measured.into_iter().zip(slowest).zip(negated_fastest) {
            let fastest = -negated_fastest;
            log::trace!(
                "step {}: measured {} {:.1} us (slowest rank), {:.1} us (fastest)",
                previous.step,
                previous.engine.name(),
                slowest * 1e6,
                fastest * 1e6
            );
            // With replica groups every group runs its own exchange: the slowest and
            // fastest ranks may be of different groups, and their spread no skew.
            let fastest = if self.group.is_some() { slowest } else { fastest };
            let times = Measured { slowest, fastest };
            self.estimator.observe(previous.engine, &previous.features, times, previous.probe_instead_of);
            let stats = self.stats.engine_mut(previous.engine);
            stats.measured_slowest_seconds += slowest;
            stats.measured_steps += 1;
            if let Some(preferred) = previous.probe_instead_of {
                let probes = &mut self.stats.probes;
                probes.steps += 1;
                probes.seconds += slowest;
                probes.excess_seconds += slowest - preferred;
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
        let buffers = self.agreement_buffers.pop().unwrap_or_default();
        let agreement = start_agreement(&self.comm, &Proposal { error, backend: self.backend, maxima, same }, buffers)?;
        Ok(StepAhead { prepared, measured, agreement })
    }

    /// The oldest measured steps, as many as one agreement brings.
    fn take_measured(&mut self) -> Vec<PendingMeasurement> {
        let carried = self.pending.len().min(MEASUREMENTS_PER_AGREEMENT);
        self.pending.drain(..carried).collect()
    }

    /// The most values (besides the header) any step's agreement proposes: its
    /// measured steps and the larger of the two feature layouts.
    fn agreement_values_max(&self) -> usize {
        let (ranks, matrix_max_ranks) = (self.data_comm().size(), self.matrix_max_ranks());
        2 * MEASUREMENTS_PER_AGREEMENT + features::encoded_len(ranks, matrix_max_ranks).max(features::KNOWN_LEN)
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
        self.agreement_buffers.push(buffers);
        let at = times_len(&measured);
        self.learn(measured, &agreed.maxima[..at]);
        agreed.outcome(prepared.as_ref().err().cloned())?;
        Self::refuse_differing_backends(&agreed)?;
        let PlannedStep { plan, shape } = prepared.expect("agreed that every rank planned its step");
        let values = &agreed.maxima[at..];
        let max_message = self.config.max_message_bytes;
        let (step_features, node, requests_to_me) = match known {
            Some(_) => (features::decode_known(values, max_message), features::decode_known_node(values), None),
            None => {
                let (ranks, me, matrix_max_ranks) = (self.data_comm().size(), self.data_comm().rank(), self.matrix_max_ranks());
                let requests = features::requests_to(values, ranks, matrix_max_ranks, me, max_message);
                (features::decode(values, ranks, matrix_max_ranks, max_message), features::decode_node(values), requests)
            }
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
        self.agreement_buffers.push(buffers);
        let at = times_len(&ahead.measured);
        self.learn(ahead.measured, &agreed.maxima[..at]);
        Ok(())
    }

    /// Run a step: copy the local and node-local samples, then move the remote ones
    /// with the decided engine (none when no rank has any); returns the samples
    /// fetched. The estimator learns from the engine's time alone: the copies cost the
    /// same whichever engine runs.
    fn run(
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
            known_batches,
            gets_end_in_barrier: self.gets_end_in_barrier,
        };
        let started = mpi::wtime();
        copy_local(&step, out);
        let copied = mpi::wtime();
        self.stats.node_local.record(plan.node_bytes, plan.node_samples, copied - started);
        if let Some(decision) = decision {
            let result = fetch_remote(&step, decision.engine, out);
            let seconds = mpi::wtime() - copied;
            self.pending.push(PendingMeasurement {
                step: self.estimator.counters().decisions,
                engine: decision.engine,
                features,
                seconds: if result.is_ok() { seconds } else { 0.0 },
                probe_instead_of: decision.probe.then(|| decision.predicted(other_engine(decision.engine))),
            });
            self.stats.exchange_rounds += self.buffers.borrow_mut().take_rounds();
            result?;
            let engine_stats = self.stats.engine_mut(decision.engine);
            engine_stats.steps += 1;
            engine_stats.seconds += seconds;
            engine_stats.predicted_seconds += decision.predicted(decision.engine);
            engine_stats.predicted_other_seconds += decision.predicted(other_engine(decision.engine));
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

    /// After a `mdl_fetch_batch`: a summary line each time this rank has fetched about
    /// an epoch's worth of samples (its share of the dataset).
    fn log_summary_every_epoch(&mut self, samples: u64) {
        let share = self.num_samples().unwrap_or(0) / self.comm.size() as u64;
        self.samples_since_summary += samples;
        if share > 0 && self.samples_since_summary >= share {
            self.log_summary("an epoch's worth of samples");
        }
    }

    /// The next summary line covers what runs from now on.
    pub fn start_summary(&mut self) {
        self.summarised = (self.stats.clone(), self.estimator.counters());
        self.samples_since_summary = 0;
    }

    /// An info line, on the loader's rank 0 (every rank decides alike), of what ran
    /// since the last one and why: the engines' steps, their predicted and measured
    /// times per step, probes and switches.
    pub fn log_summary(&mut self, what: &str) {
        let (stats, counters) = (self.stats.since(&self.summarised.0), self.estimator.counters());
        if self.comm.rank() == 0 {
            let chosen_by = if self.backend == Backend::Auto { "AUTO" } else { "forced (mdl_set_backend or MDL_BACKEND)" };
            log::info!(
                "{what}, engine {chosen_by}: {}; {} probes, {} switches; {}",
                stats.engines_and_why(),
                counters.probes - self.summarised.1.probes,
                counters.switches - self.summarised.1.switches,
                stats.probe_cost()
            );
        }
        self.start_summary();
    }

    /// Collective: the job's statistics as JSON (see `stats::JobStats`): every rank's
    /// numbers summed or maximised, the same text on every rank. `checks` carries an
    /// argument error found by the caller, so that every rank fails together.
    pub fn job_stats_json(&self, checks: Result<()>) -> Result<String> {
        agree_on_checks(&self.comm, checks)?;
        let sums = self.comm.allreduce_sum(&self.stats.summed())?;
        let maxima = self.comm.allreduce_max(&self.stats.maximised())?;
        let job = JobStats { ranks: self.comm.size(), backend: self.backend, counters: self.estimator.counters() };
        Ok(job.to_json(&self.stats, &sums, &maxima))
    }

    /// Collective: free the window and the communicator. The ranks first agree that all
    /// of them are finalizing: the frees are blocking MPI calls, which `MDL_TIMEOUT`
    /// cannot interrupt, while the agreement's wait can give up (then nothing is freed).
    pub fn finalize(mut self) -> Result<()> {
        // Its MPI calls end before the ranks agree: finalize is the last call.
        self.progress = None;
        if let Err(err) = agree_on_checks(&self.comm, Ok(())) {
            log::warn!("finalize could not agree with the other ranks ({}): MPI objects are not freed", err.message);
            std::mem::forget(self); // MPI may still use its buffers
            return Err(err);
        }
        let Core { comm, group, store, stats, published, .. } = self;
        published.clear_index();
        log::info!("finalize after {}", stats.summary());
        let freed_store = store.map_or(Ok(()), Store::free);
        let freed_group = group.map_or(Ok(()), ReplicaGroup::free);
        let freed_comm = comm.free();
        freed_store.and(freed_group).and(freed_comm)
    }
}

/// Whether a batch planned as `plan` fits an output buffer of `out_len` bytes.
/// A test hook, not a setting: `MDL_TEST_PERTURB_MODEL` in a rank's environment at
/// registration moves one parameter of that rank's cost model by one ulp (the next
/// double up: a fitted parameter may be 0), as a rank that computed differently would;
/// the steps' agreements must then refuse every step on every rank
/// (tests/c/errors_test.c).
fn perturbed_for_tests(mut params: CostParams) -> CostParams {
    if std::env::var_os("MDL_TEST_PERTURB_MODEL").is_some() {
        params.a_os = f64::from_bits(params.a_os.to_bits() + 1);
    }
    params
}

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

fn other_engine(engine: Backend) -> Backend {
    if engine == Backend::Collective { Backend::OneSided } else { Backend::Collective }
}
