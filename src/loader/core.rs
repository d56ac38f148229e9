//! The loader's core: the communicator, the store, both engines and the estimator;
//! everything a fetch needs. The sampler's prefetch thread runs fetches on it too.
//!
//! Every collective entry point follows the same pattern: do all local checks and
//! planning, agree with the other ranks (one small all-reduce), and only then
//! communicate. See `agree.rs`.
//!
//! The rest of `Core` is in its jobs' files: `registration` (the shard, calibration,
//! the progress thread), `step` (one step's protocol, from plan to publish, for
//! `mdl_fetch_batch` and the epochs' steps alike), `agreements` (the buffers every
//! agreement goes through), `served` (what a rank serves in an epoch of known batches)
//! and `summary` (the log's summary lines and the job's statistics).

use super::batch::Batch;
use super::published::Published;
use super::replica::{GroupSpec, ReplicaGroup, ReplicaInfo};
use super::measurement::PendingMeasurement;
use crate::agree::{AgreementBuffers, Fallback, Setting, agree_identical, agree_settings};
use crate::backend::Backend;
use crate::config::{Calibration as CalibrationMode, Config, Wait};
use crate::engine::ExchangeBuffers;
use crate::error::{Error, Result, mdl_status, outcome_of};
use crate::estimator::calibrate::{self, Calibration};
use crate::estimator::model::CostParams;
use crate::estimator::{Estimator, EstimatorCounters, Settings};
use crate::mpi::{self, Comm, GetLimits, ProgressThread, WaitPolicy};
use crate::node;
use crate::stats::Stats;
use crate::store::{Store, StoreSettings};
use mpi_sys::MPI_Comm;
use std::cell::RefCell;
use std::sync::Arc;

/// The largest `node::clock_key`.
const CLOCK_KEY_MAX: u64 = (1 << 52) - 1;

pub struct Core {
    /// Drives MPI's progress between calls where gets need it (`mpi::ProgressThread`).
    /// First, so that it stops before anything it uses is freed.
    pub(super) progress: Option<ProgressThread>,
    /// Agreed: one-sided steps end in a barrier, because some rank serves gets with
    /// neither a progress thread nor a guarantee that it stays in MPI (see
    /// [`Core::agree_on_lingering`]).
    pub(super) gets_end_in_barrier: bool,
    /// Agreed: every rank reads one clock (`node::monotonic_seconds`): one machine, one
    /// time namespace's offsets.
    pub(super) one_clock: bool,
    /// Agreed: where some rank's MPI was initialised below `MPI_THREAD_MULTIPLE`, so
    /// that the library's threads (prefetch, progress) cannot run there; reported by
    /// the lowest such rank alone.
    pub(super) threads_refused: Option<Fallback>,
    /// The host's ranks (a duplicate): agreements, the sampler's split, job statistics.
    pub(super) comm: Comm,
    /// This rank's replica group, when the host is split into several
    /// (`mdl_init_replicated`): the store and the engines live on it. None: the host.
    pub(super) group: Option<ReplicaGroup>,
    pub(super) config: Config,
    pub(super) backend: Backend,
    pub(super) store: Option<Store>,
    /// What local calls read without the step lock (index, statistics).
    pub(super) published: Arc<Published>,
    /// The collective engine's buffers, reused from step to step.
    pub(super) buffers: RefCell<ExchangeBuffers>,
    /// The sampler's batch buffers between epochs, kept for their capacity: an epoch
    /// of a few steps would otherwise grow (and zero) new ones each time.
    pub(super) spare_batches: Vec<Batch>,
    pub(super) estimator: Estimator,
    pub(super) calibration: Calibration,
    pub(super) stats: Stats,
    /// The steps run since the last agreement started, whose slowest-rank times the
    /// next agreements bring (at most `MEASUREMENTS_PER_AGREEMENT` each).
    pub(super) pending: Vec<PendingMeasurement>,
    /// Buffers for the steps' agreements, reserved ahead (see
    /// [`Core::reserve_agreements`]) and used again from step to step.
    pub(super) agreement_buffers: Vec<AgreementBuffers>,
    /// Samples fetched on this rank since the last summary line in the log.
    pub(super) samples_since_summary: u64,
    /// The statistics and the estimator's counters at the last summary line.
    pub(super) summarised: (Stats, EstimatorCounters),
}

impl Core {
    /// Collective: duplicate `host`, read the configuration and agree on it (every
    /// setting identical on every rank, and one wait policy). `local_check` carries an
    /// argument error found by the caller, so that every rank fails together.
    /// `group_size` is `mdl_init_replicated`'s (None for `mdl_init`: the whole host):
    /// checked and agreed with the configuration, then the host is split into groups.
    pub fn init(host: MPI_Comm, local_check: Result<()>, group_size: Option<i64>) -> Result<Core> {
        // This rank's own watchdog until the ranks agree (an invalid setting is agreed
        // below; meanwhile the default).
        let own_watchdog = Config::from_env().map_or(mpi::DEFAULT_WATCHDOG_SECONDS, |c| c.watchdog_seconds);
        let mut comm = Comm::duplicate(host, own_watchdog)?;
        let spec = group_size.map_or(Ok(GroupSpec::Whole), |size| GroupSpec::from_arg(size, comm.size()));
        let agreed = Self::agree_on_config(&comm, local_check, spec);
        let (config, policy, spec, facts) = match agreed {
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
            one_clock: facts.one_clock,
            threads_refused: facts.threads_refused,
            estimator: Estimator::new(CostParams::default(), Settings { probe_interval: 0, hysteresis: 0.0, probe_budget: 0.0, calibration_noise: [0.0; 2] }),
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
    fn agree_on_config(comm: &Comm, local_check: Result<()>, spec: Result<GroupSpec>) -> Result<(Config, WaitPolicy, GroupSpec, JobFacts)> {
        let read = Config::from_env();
        // A rank whose environment is invalid still sends a full set of values, so
        // that every rank's all-reduce has the same length.
        let mut settings = read.as_ref().map_or_else(|_| Config::default().settings(), Config::settings);
        let group_size = spec.as_ref().map_or(0, |s| s.agreed_value(comm.size()));
        settings.push(Setting::identical("group_size (mdl_init_replicated; mdl_init is the whole communicator)", group_size));
        let checks = local_check.and(outcome_of(&spec)).and(outcome_of(&read));
        agree_identical(comm, checks, &settings)?;
        let config = read.expect("agreed that every rank read its configuration");
        let spec = spec.expect("agreed that every rank's group_size is valid");
        // Facts about the machines, agreed: whether some machine has more ranks than
        // cores (the wait policy), and whether every rank reads one clock: one machine
        // and one time namespace's offsets (the highest clock key and the lowest, from
        // the highest of its complement, are equal; 52-bit keys, exact in the
        // agreement). On one clock the steps' arrival times show the job's skew
        // (`Core::learn`). And the lowest rank without MPI_THREAD_MULTIPLE (as
        // size - rank, so that the highest value names it; 0: none), which alone warns
        // that the library's threads cannot run.
        let ranks_here = comm.ranks_on_node(node::machine_key());
        let oversubscribed = ranks_here.as_ref().is_ok_and(|&n| n > node::online_cores());
        let spans_machines = ranks_here.as_ref().map_or(true, |&n| n < comm.size());
        let clock_key = node::clock_key();
        let facts = [
            Setting::max("oversubscribed node", oversubscribed as u64),
            Setting::max("spans machines", spans_machines as u64),
            Setting::max("clock key", clock_key),
            Setting::max("clock key's complement", CLOCK_KEY_MAX - clock_key),
            Setting::max("lowest rank without MPI_THREAD_MULTIPLE", without_thread_multiple(comm)),
        ];
        let facts = agree_settings(comm, ranks_here.map(|_| ()), &facts)?;
        let one_clock = facts[1] == 0 && facts[2] == CLOCK_KEY_MAX - facts[3];
        let threads_refused = threads_refused(comm, facts[4]);
        let yield_between_tests = match config.wait {
            Wait::Spin => false,
            Wait::Yield => true,
            Wait::Auto => mpi::is_mpich() && facts[0] != 0,
        };
        let policy = WaitPolicy {
            yield_between_tests,
            trust_flush: !mpi::is_mpich(),
            timeout_seconds: config.timeout_seconds,
            watchdog_seconds: config.watchdog_seconds,
        };
        Ok((config, policy, spec, JobFacts { one_clock, threads_refused }))
    }

    /// The communicator the store and the engines use: the group's, or the host's.
    pub(super) fn data_comm(&self) -> &Comm {
        self.group.as_ref().map_or(&self.comm, ReplicaGroup::comm)
    }

    /// `MDL_MATRIX_MAX_RANKS`, or 0 with replica groups: the request matrix would be
    /// combined across groups (the agreement is the host's), where it means nothing.
    pub(super) fn matrix_max_ranks(&self) -> usize {
        if self.group.is_some() { 0 } else { self.config.matrix_max_ranks }
    }

    pub(super) fn store_settings(&self) -> StoreSettings {
        StoreSettings {
            limits: self.limits(),
            warm_up_gets: self.config.warm_up_gets,
            warm_up_map_bytes: self.config.warm_up_map_bytes,
            shared_index: self.config.shared_index,
            node_local: self.config.node_local,
            node_key: self.config.node_key,
            shm_dir: self.config.shm_dir.clone(),
            shm_reserve: self.config.shm_reserve,
            scratch_shard_bytes: if self.calibration_measures() { calibrate::SCRATCH_SHARD_BYTES } else { 0 },
            placement: None,
        }
    }

    /// Whether registration measures the cost model (not read from a file, not off,
    /// a budget of time): agreed, since the settings are.
    fn calibration_measures(&self) -> bool {
        self.config.calibration == CalibrationMode::Measure && self.config.calibration_seconds > 0.0
    }

    pub(super) fn limits(&self) -> GetLimits {
        GetLimits { max_message: self.config.max_message_bytes, max_in_flight: self.config.max_gets_in_flight }
    }

    /// Hand the statistics to local calls (`mdl_stats_json`), which do not take the
    /// step lock.
    pub(super) fn publish(&self) {
        self.published.set_stats(&self.stats, self.backend, self.estimator.counters());
    }

    /// A batch buffer an earlier epoch left, if any.
    pub fn take_spare_batch(&mut self) -> Option<Batch> {
        self.spare_batches.pop()
    }

    /// Keep an epoch's batch buffers for the next epoch.
    pub fn keep_spare_batches(&mut self, batches: impl IntoIterator<Item = Batch>) {
        self.spare_batches.extend(batches);
    }

    /// `MDL_AGREEMENT_LAG`, agreed at init.
    pub fn agreement_lag(&self) -> u64 {
        self.config.agreement_lag
    }

    pub fn published(&self) -> &Arc<Published> {
        &self.published
    }

    pub(super) fn store(&self) -> Result<&Store> {
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

    /// Collective: the ranks agree that all of them are finalizing. The frees are
    /// blocking MPI calls, which `MDL_TIMEOUT` cannot interrupt, while the agreement's
    /// wait can give up. Ranks in another call make it `MDL_ERR_CALL_MISMATCH` on every
    /// rank with nothing done (the loader works on, and finalize may be called again);
    /// otherwise the progress thread's MPI calls end here, before the frees.
    pub fn agree_to_finalize(&mut self) -> Result<()> {
        let agreed = self.agree_call(Ok(()), &[]).map(drop);
        if !agreed.as_ref().is_err_and(|err| err.status == mdl_status::MDL_ERR_CALL_MISMATCH) {
            self.progress = None;
        }
        agreed
    }

    /// Collective, once [`Core::agree_to_finalize`] succeeded on every rank: free the
    /// window and the communicator.
    pub fn finalize(self) -> Result<()> {
        let Core { comm, group, store, stats, published, .. } = self;
        published.clear_index();
        log::info!("finalize after {}", stats.summary());
        let freed_store = store.map_or(Ok(()), Store::free);
        let freed_group = group.map_or(Ok(()), ReplicaGroup::free);
        let freed_comm = comm.free();
        freed_store.and(freed_group).and(freed_comm)
    }
}

/// Facts about the job's machines and MPI, agreed at `mdl_init` (see [`Core::agree_on_config`]).
struct JobFacts {
    one_clock: bool,
    threads_refused: Option<Fallback>,
}

/// This rank's part of "the lowest rank without `MPI_THREAD_MULTIPLE`": size - rank
/// where it is one, else 0.
fn without_thread_multiple(comm: &Comm) -> u64 {
    if mpi::thread_multiple() { 0 } else { (comm.size() - comm.rank()) as u64 }
}

/// The agreed lowest rank without `MPI_THREAD_MULTIPLE` (`agreed`: the highest of
/// [`without_thread_multiple`]) as a fallback to report once per loader.
fn threads_refused(comm: &Comm, agreed: u64) -> Option<Fallback> {
    let first = comm.size().checked_sub(usize::try_from(agreed).ok().filter(|&v| v > 0)?)?;
    let here = first == comm.rank();
    let reason = if here {
        "this rank's MPI was initialised below MPI_THREAD_MULTIPLE".to_string()
    } else {
        format!("rank {first} of the loader's communicator initialised MPI below MPI_THREAD_MULTIPLE, and says so")
    };
    Some(Fallback { reason, report_here: here, status: mdl_status::MDL_ERR_STATE })
}
