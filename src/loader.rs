//! The loader handle: the communicator, the store, both engines and the estimator.
//!
//! Every collective entry point follows the same pattern: do all local checks and
//! planning, agree with the other ranks (one small all-reduce), and only then
//! communicate. See `agree.rs`.

use crate::agree::{Proposal, agree, agree_on_checks};
use crate::config::{Backend, Config};
use crate::engine::{Collective, Engine, OneSided, StepContext, collective_rounds};
use crate::error::{Error, Result, mdl_status};
use crate::estimator::{CostParams, Estimator, Prediction, StepFeatures};
use crate::mpi::{self, Comm};
use crate::plan::BatchPlan;
use crate::stats::Stats;
use crate::store::{ShardView, Store};
use mpi_sys::MPI_Comm;

/// The caller's arguments of one fetch, already checked for NULL pointers.
pub struct FetchArgs<'a> {
    pub ids: &'a [u64],
    pub out: &'a mut [u8],
    /// ids.len() + 1 entries.
    pub out_offsets: &'a mut [u64],
}

pub struct Loader {
    comm: Comm,
    config: Config,
    backend: Backend,
    store: Option<Store>,
    estimator: Estimator,
    stats: Stats,
}

/// A fetch that passed its local checks, ready to run once the ranks agree.
struct PreparedFetch<'a> {
    plan: BatchPlan,
    out: &'a mut [u8],
    /// None when a sample is too large for the collective engine's message limit.
    rounds: Option<u64>,
    prediction: Prediction,
}

/// Positions of the values each rank contributes to a fetch's agreement.
const ROUNDS: usize = 0;
const COLLECTIVE_INFEASIBLE: usize = 1;
const PREDICTED_ONESIDED: usize = 2;
const PREDICTED_COLLECTIVE: usize = 3;

impl Loader {
    /// Collective: duplicate `host` and read the configuration. `local_check` carries
    /// an argument error found by the caller, so that every rank fails together.
    pub fn init(host: MPI_Comm, local_check: Result<()>) -> Result<Loader> {
        let comm = Comm::duplicate(host)?;
        let config = Config::from_env();
        let checks = local_check.and(config.as_ref().map(|_| ()).map_err(Clone::clone));
        if let Err(err) = agree_on_checks(&comm, checks, "mdl_init") {
            comm.free()?;
            return Err(err);
        }
        let config = config.expect("checked above");
        log::debug!(
            "rank {}/{}: backend {}, max message {} bytes",
            comm.rank(),
            comm.size(),
            config.backend.name(),
            config.max_message_bytes
        );
        Ok(Loader {
            backend: config.backend,
            comm,
            config,
            store: None,
            estimator: Estimator::new(CostParams::default()),
            stats: Stats::default(),
        })
    }

    /// Collective: copy this rank's shard into the store and build the global index.
    pub fn register_shard(&mut self, shard: Result<ShardView>) -> Result<()> {
        let checks = match (&self.store, &shard) {
            (Some(_), _) => Err(Error::state("a shard is already registered on this loader")),
            (None, Err(err)) => Err(err.clone()),
            (None, Ok(_)) => Ok(()),
        };
        agree_on_checks(&self.comm, checks, "mdl_register_shard")?;
        let shard = shard.expect("agreed that every rank's shard is valid");
        let started = mpi::wtime();
        let store = Store::register(&self.comm, &shard)?;
        log::info!(
            "rank {}: registered {} samples ({} bytes) of {} in {:.3} s",
            self.comm.rank(),
            shard.num_samples(),
            shard.data.len(),
            store.index.num_samples(),
            mpi::wtime() - started
        );
        self.store = Some(store);
        Ok(())
    }

    fn store(&self) -> Result<&Store> {
        self.store.as_ref().ok_or_else(|| Error::state("no shard registered yet (call mdl_register_shard first)"))
    }

    pub fn num_samples(&self) -> Result<u64> {
        Ok(self.store()?.index.num_samples())
    }

    pub fn sample_size(&self, id: u64) -> Result<u64> {
        let index = &self.store()?.index;
        index.len_of(id).ok_or_else(|| {
            Error::new(
                mdl_status::MDL_ERR_OUT_OF_RANGE,
                format!("sample id {id} is out of range (num_samples = {})", index.num_samples()),
            )
        })
    }

    pub fn set_backend(&mut self, backend: Backend) {
        self.backend = backend;
    }

    /// Collective: fetch a batch into the caller's buffer.
    pub fn fetch_batch(&mut self, args: Result<FetchArgs>) -> Result<()> {
        let prepared = args.and_then(|args| self.prepare(args));
        let (error, maxima) = match &prepared {
            Ok(p) => (None, vec![
                p.rounds.unwrap_or(0) as f64,
                p.rounds.is_none() as u8 as f64,
                p.prediction.onesided,
                p.prediction.collective,
            ]),
            Err(err) => (Some(err.clone()), vec![0.0; 4]),
        };
        let agreed = agree(&self.comm, &Proposal { error, backend: self.backend, maxima })?;
        agreed.outcome(prepared.as_ref().err().cloned(), "mdl_fetch_batch")?;
        if agreed.backends_differ() {
            return Err(Error::invalid(format!(
                "the backend is set differently across ranks ({} and {}); call mdl_set_backend \
                 with the same value on every rank",
                agreed.backend_min.name(),
                agreed.backend_max.name()
            )));
        }
        let prepared = prepared.expect("agreed that every rank prepared its fetch");
        let collective_feasible = agreed.maxima[COLLECTIVE_INFEASIBLE] == 0.0;
        let engine = match self.backend {
            Backend::Auto if !collective_feasible => Backend::OneSided,
            Backend::Auto => self.estimator.choose(&Prediction {
                onesided: agreed.maxima[PREDICTED_ONESIDED],
                collective: agreed.maxima[PREDICTED_COLLECTIVE],
            }),
            Backend::Collective if !collective_feasible => {
                return Err(Error::invalid(format!(
                    "the collective engine cannot move a sample larger than \
                     MDL_MAX_MESSAGE_BYTES / ranks = {} bytes; use the one-sided engine",
                    self.config.max_message_bytes / self.comm.size() as u64
                )));
            }
            forced => forced,
        };
        self.run(engine, prepared, agreed.maxima[ROUNDS] as u64)
    }

    /// Local part of a fetch: plan it, lay out the output, check the capacity.
    fn prepare<'a>(&self, args: FetchArgs<'a>) -> Result<PreparedFetch<'a>> {
        let store = self.store()?;
        let plan = BatchPlan::new(&store.index, self.comm.rank(), args.ids)?;
        args.out_offsets.copy_from_slice(&plan.out_offsets);
        if plan.total_bytes() > args.out.len() as u64 {
            return Err(Error::new(
                mdl_status::MDL_ERR_BUFFER_TOO_SMALL,
                format!(
                    "the batch needs {} bytes, out_cap is {} (out_offsets[n] holds the size needed)",
                    plan.total_bytes(),
                    args.out.len()
                ),
            ));
        }
        let ranks = self.comm.size();
        let rounds = collective_rounds(&plan.remote, ranks, self.config.max_message_bytes)
            .map(|r| r.len() as u64);
        let features = StepFeatures::of(&plan, rounds.unwrap_or(1), ranks);
        let prediction = self.estimator.predict(&features);
        Ok(PreparedFetch { plan, out: args.out, rounds, prediction })
    }

    fn run(&mut self, engine: Backend, prepared: PreparedFetch, rounds: u64) -> Result<()> {
        let PreparedFetch { plan, out, .. } = prepared;
        let store = self.store.as_ref().expect("prepared fetches have a store");
        let started = mpi::wtime();
        let shard = store.window.local();
        for copy in &plan.local {
            let (src, dest, len) = (copy.src_offset as usize, copy.dest_offset as usize, copy.len as usize);
            out[dest..dest + len].copy_from_slice(&shard[src..src + len]);
        }
        let step = StepContext {
            comm: &self.comm,
            store,
            plan: &plan,
            max_message_bytes: self.config.max_message_bytes,
            collective_rounds: rounds,
        };
        match engine {
            Backend::Collective => Collective.fetch(&step, out)?,
            Backend::OneSided | Backend::Auto => OneSided.fetch(&step, out)?,
        }
        let engine_stats = self.stats.engine_mut(engine);
        engine_stats.steps += 1;
        engine_stats.seconds += mpi::wtime() - started;
        self.stats.samples += plan.out_offsets.len() as u64 - 1;
        self.stats.bytes_local += plan.local_bytes();
        self.stats.bytes_remote += plan.remote_bytes();
        Ok(())
    }

    /// Collective: free the window and the communicator.
    pub fn finalize(self) -> Result<()> {
        let Loader { comm, store, stats, .. } = self;
        log::info!(
            "rank {}: {} steps one-sided ({:.3} s), {} collective ({:.3} s), {} samples",
            comm.rank(),
            stats.onesided.steps,
            stats.onesided.seconds,
            stats.collective.steps,
            stats.collective.seconds,
            stats.samples
        );
        let freed_store = store.map_or(Ok(()), Store::free);
        let freed_comm = comm.free();
        freed_store.and(freed_comm)
    }
}
