//! The loader handle behind `mdl_loader`: the core (communicator, store, engines,
//! estimator) and, while one runs, an epoch of the built-in sampler.

mod core;
mod epoch;

pub use self::core::FetchArgs;
pub use epoch::Batch;

use self::core::Core;
use crate::agree::agree_identical;
use crate::config::Backend;
use crate::error::{Error, Result};
use crate::mpi;
use crate::sampler::Epoch;
use crate::store::ShardView;
use epoch::EpochRun;
use mpi_sys::MPI_Comm;
use parking_lot::Mutex;
use std::sync::Arc;

pub struct Loader {
    core: Arc<Mutex<Core>>,
    /// Prefetch depth for epochs started from now on.
    prefetch_depth: u32,
    epoch: Option<EpochRun>,
    /// The arguments of the last epoch begun, for seeks.
    current_args: Option<EpochArgs>,
    /// Whether the fall-back to no prefetch has been logged.
    told_no_thread_multiple: bool,
}

/// The sampler's arguments, kept so that a seek can restart the epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochArgs {
    pub seed: u64,
    pub epoch: u64,
    pub batch_size: u64,
    pub shuffle: bool,
    pub drop_last: bool,
}

impl Loader {
    pub fn init(host: MPI_Comm, local_check: Result<()>) -> Result<Loader> {
        Ok(Loader {
            core: Arc::new(Mutex::new(Core::init(host, local_check)?)),
            prefetch_depth: 0,
            epoch: None,
            current_args: None,
            told_no_thread_multiple: false,
        })
    }

    pub fn register_shard(&mut self, shard: Result<ShardView>) -> Result<()> {
        self.core.lock().register_shard(shard)
    }

    pub fn num_samples(&self) -> Result<u64> {
        self.core.lock().num_samples()
    }

    pub fn sample_size(&self, id: u64) -> Result<u64> {
        self.core.lock().sample_size(id)
    }

    pub fn set_backend(&mut self, backend: Backend) -> Result<()> {
        if self.epoch.as_ref().is_some_and(EpochRun::is_prefetching) {
            return Err(Error::state(
                "the backend cannot change while an epoch prefetches (ranks would switch at different steps); \
                 set it before mdl_epoch_begin",
            ));
        }
        self.core.lock().set_backend(backend);
        Ok(())
    }

    pub fn set_prefetch(&mut self, depth: u32) {
        self.prefetch_depth = depth;
    }

    /// Collective.
    pub fn fetch_batch(&mut self, args: Result<FetchArgs>) -> Result<()> {
        // Every rank is in the same epoch state (epochs begin and end collectively), so
        // all refuse together without communicating; the prefetch thread may be using
        // the communicator.
        if self.epoch.as_ref().is_some_and(EpochRun::is_active) {
            return Err(Error::state(
                "mdl_fetch_batch is refused during a sampler epoch: take batches with mdl_next_batch \
                 until it returns n == 0",
            ));
        }
        self.core.lock().fetch_batch(args)
    }

    /// Collective: start an epoch of the built-in sampler.
    pub fn epoch_begin(&mut self, args: EpochArgs) -> Result<()> {
        self.stop_epoch()?;
        self.start_epoch(args, 0, "mdl_epoch_begin")
    }

    /// Collective: restart the current epoch at `step`. A refused seek leaves the epoch
    /// where it was.
    pub fn epoch_seek(&mut self, step: u64) -> Result<()> {
        let args = self.current_args;
        let resume = self.epoch.as_ref().filter(|run| run.is_active()).map(EpochRun::position);
        self.stop_epoch()?;
        let Some(args) = args else {
            // Agree anyway so that no rank is left behind (all ranks see no epoch).
            let core = self.core.lock();
            return agree_identical(core.comm(), Err(Error::state("no epoch to seek in (call mdl_epoch_begin first)")), &[], "mdl_epoch_seek");
        };
        let sought = self.start_epoch(args, step, "mdl_epoch_seek");
        if let (Err(_), Some((at, depth))) = (&sought, resume) {
            // Every rank refused the same seek (it was agreed on), so every rank resumes
            // at the same step: no further agreement is needed.
            let epoch = Self::epoch_of(&self.core.lock(), args)?;
            self.epoch = Some(EpochRun::start(&self.core, epoch, at, depth));
        }
        sought
    }

    /// The sampler's epoch for `args` over this loader's samples and ranks.
    fn epoch_of(core: &Core, args: EpochArgs) -> Result<Epoch> {
        let n = core.num_samples()?;
        Epoch::new(n, core.comm().size(), args.seed, args.epoch, args.batch_size, args.shuffle, args.drop_last)
    }

    fn start_epoch(&mut self, args: EpochArgs, step: u64, call: &str) -> Result<()> {
        let depth = self.effective_prefetch();
        let core = self.core.lock();
        let epoch = Self::epoch_of(&core, args);
        let checks = match &epoch {
            Err(err) => Err(err.clone()),
            Ok(e) if step > e.steps() => {
                Err(Error::invalid(format!("step {step} is past the end of the epoch ({} steps)", e.steps())))
            }
            Ok(_) => Ok(()),
        };
        let identical = [
            ("seed", args.seed),
            ("epoch", args.epoch),
            ("batch_size", args.batch_size),
            ("shuffle", args.shuffle as u64),
            ("drop_last", args.drop_last as u64),
            ("step", step),
            ("prefetch depth", depth as u64),
        ];
        agree_identical(core.comm(), checks, &identical, call)?;
        drop(core);
        let epoch = epoch.expect("agreed that every rank built its epoch");
        log::debug!("{call}: {} steps of up to {} samples, starting at {step}, prefetch {depth}", epoch.steps(), args.batch_size);
        self.epoch = Some(EpochRun::start(&self.core, epoch, step, depth));
        self.current_args = Some(args);
        Ok(())
    }

    /// The prefetch depth in force: 0 unless MPI allows a thread of ours to communicate.
    fn effective_prefetch(&mut self) -> u32 {
        if self.prefetch_depth > 0 && !mpi::thread_multiple() {
            if !self.told_no_thread_multiple {
                log::warn!(
                    "prefetch needs MPI initialised with MPI_THREAD_MULTIPLE; fetching without prefetch"
                );
                self.told_no_thread_multiple = true;
            }
            return 0;
        }
        self.prefetch_depth
    }

    /// Collective: the next batch of the epoch; None at its end (on every rank at once).
    pub fn next_batch(&mut self) -> Result<Option<&Batch>> {
        let Some(run) = self.epoch.as_mut() else {
            return Err(Error::state("no epoch running (call mdl_epoch_begin first)"));
        };
        run.next(&self.core)
    }

    fn stop_epoch(&mut self) -> Result<()> {
        self.epoch.take().map_or(Ok(()), EpochRun::stop)
    }

    pub fn stats_json(&self) -> String {
        self.core.lock().stats_json()
    }

    /// Collective.
    pub fn finalize(mut self) -> Result<()> {
        let stopped = self.stop_epoch();
        let core = Arc::try_unwrap(self.core)
            .map_err(|_| Error::state("the prefetch thread still holds the loader"))?
            .into_inner();
        let finalized = core.finalize();
        stopped.and(finalized)
    }
}
