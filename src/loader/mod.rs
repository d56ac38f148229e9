//! The loader handle behind `mdl_loader`: the core (communicator, store, engines,
//! estimator) and, while one runs, an epoch of the built-in sampler.

mod agreements;
mod batch;
mod core;
mod epoch;
mod measurement;
mod order;
mod pipeline;
mod published;
mod registration;
mod replica;
mod served;
mod step;
mod summary;

pub use batch::Batch;
pub use step::FetchArgs;
pub use published::Published;

use self::core::Core;
use crate::agree::Setting;
use crate::backend::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::sampler::Epoch;
use crate::store::ShardView;
use epoch::EpochRun;
use order::{EpochOrder, GivenOrder};
use mpi_sys::MPI_Comm;
use parking_lot::Mutex;
use std::sync::Arc;

/// The deepest prefetch `mdl_set_prefetch` accepts: each step ahead holds a batch
/// buffer, and a depth beyond a few steps only costs memory.
pub(crate) const MAX_PREFETCH: u32 = 64;

pub struct Loader {
    core: Arc<Mutex<Core>>,
    published: Arc<Published>,
    /// Prefetch depth for epochs started from now on.
    prefetch_depth: u32,
    epoch: Option<EpochRun>,
    /// The order of the last epoch begun, for seeks.
    current: Option<Arc<EpochOrder>>,
    /// Whether the fall-back to no prefetch has been logged.
    told_no_thread_multiple: bool,
}

/// Where an epoch stood when a begin or seek stopped it.
struct Interrupted {
    order: Arc<EpochOrder>,
    step: u64,
    depth: u32,
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
    /// Collective over `host`. `group_size`: `mdl_init_replicated`'s (None: `mdl_init`,
    /// one group of every rank).
    pub fn init(host: MPI_Comm, local_check: Result<()>, group_size: Option<i64>) -> Result<Loader> {
        let core = Core::init(host, local_check, group_size)?;
        Ok(Loader {
            published: core.published().clone(),
            core: Arc::new(Mutex::new(core)),
            prefetch_depth: 0,
            epoch: None,
            current: None,
            told_no_thread_multiple: false,
        })
    }

    /// Collective.
    pub fn register_shard(&mut self, shard: Result<ShardView>) -> Result<()> {
        self.refuse_during_epoch("a shard cannot be registered during a sampler epoch")?;
        self.core.lock().register_shard(shard)
    }

    /// What the local calls read, without the step lock.
    /// Stop the loader's progress thread before the loader is leaked after a failure
    /// (its MPI objects may still be in use). A step stuck holding the loader's lock
    /// leaves the thread to `MPI_Finalize`'s hook, which stops every one.
    pub fn stop_progress(&self) {
        if let Some(mut core) = self.core.try_lock() {
            core.stop_progress();
        }
    }

    pub fn published(&self) -> &Arc<Published> {
        &self.published
    }

    pub fn set_backend(&mut self, backend: Backend) -> Result<()> {
        if self.epoch.as_ref().is_some_and(EpochRun::is_active) {
            return Err(Error::state(
                "the backend cannot change during an epoch (its steps are agreed ahead, and a prefetch \
                 thread may be running them); set it before mdl_epoch_begin or after the epoch's last batch",
            ));
        }
        self.core.lock().set_backend(backend);
        Ok(())
    }

    pub fn set_prefetch(&mut self, depth: u32) -> Result<()> {
        if depth > MAX_PREFETCH {
            return Err(Error::invalid(format!("prefetch depth {depth} is more than MDL_MAX_PREFETCH ({MAX_PREFETCH})")));
        }
        self.prefetch_depth = depth;
        Ok(())
    }

    /// Collective.
    pub fn fetch_batch(&mut self, args: Result<FetchArgs>) -> Result<()> {
        self.refuse_during_epoch("refused during a sampler epoch: take its batches with mdl_next_batch first")?;
        self.core.lock().fetch_batch(args)
    }

    /// Collective: the job's statistics as JSON. Refused during an epoch on every rank
    /// alike (its steps are agreed ahead, perhaps on the prefetch thread, on the same
    /// communicator).
    pub fn job_stats_json(&mut self, checks: Result<()>) -> Result<String> {
        self.refuse_during_epoch("refused during a sampler epoch: call it before mdl_epoch_begin or after the epoch's last batch")?;
        self.core.lock().job_stats_json(checks)
    }

    /// Collective: start an epoch of the built-in sampler.
    pub fn epoch_begin(&mut self, args: EpochArgs) -> Result<()> {
        let interrupted = self.interrupt_epoch()?;
        let order = Self::epoch_of(&self.core.lock(), args).map(|epoch| Arc::new(EpochOrder::Sampler(epoch)));
        let settings = vec![
            Setting::identical("seed", args.seed),
            Setting::identical("epoch", args.epoch),
            Setting::identical("batch_size", args.batch_size),
            Setting::identical("shuffle", args.shuffle as u64),
            Setting::identical("drop_last", args.drop_last as u64),
        ];
        let begun = self.start_epoch(order, 0, settings);
        self.resume_after_refusal(&begun, interrupted)?;
        begun
    }

    /// Collective: start an epoch of the caller's batches, `(ids, batch_offsets)`:
    /// step s fetches `ids[batch_offsets[s]..batch_offsets[s + 1]]`.
    pub fn epoch_begin_ids(&mut self, batches: Result<(&[u64], &[u64])>) -> Result<()> {
        let interrupted = self.interrupt_epoch()?;
        let num_samples = self.core.lock().num_samples();
        let order = batches
            .and_then(|(ids, bounds)| GivenOrder::new(ids, bounds, num_samples?))
            .map(|given| Arc::new(EpochOrder::Given(given)));
        let settings = order.as_ref().map_or_else(|_| vec![Setting::identical("number of batches (steps)", 0)], |o| o.settings());
        let begun = self.start_epoch(order, 0, settings);
        self.resume_after_refusal(&begun, interrupted)?;
        begun
    }

    /// Collective: restart the current epoch at `step`. A refused seek leaves the epoch
    /// where it was.
    pub fn epoch_seek(&mut self, step: u64) -> Result<()> {
        let current = self.current.clone();
        let interrupted = self.interrupt_epoch()?;
        let Some(order) = current else {
            // Agree anyway so that no rank is left behind (all ranks see no epoch).
            return self.core.lock().agree_call(Err(Error::state("no epoch to seek in (call mdl_epoch_begin first)")), &[]).map(drop);
        };
        let sought = self.start_epoch(Ok(order), step, Vec::new());
        self.resume_after_refusal(&sought, interrupted)?;
        sought
    }

    /// Refuse a collective call while the epoch has steps left: every rank has taken as
    /// many steps (the steps are the same number on every rank), so all refuse alike
    /// without communicating, while the prefetch thread may be using the communicator.
    /// An epoch whose steps were all taken ends here (its thread stopped), whether or
    /// not this rank asked for its end (n == 0): a rank that counted its batches and one
    /// that took the end must make the same call.
    fn refuse_during_epoch(&mut self, why: &str) -> Result<()> {
        match &self.epoch {
            Some(run) if run.has_steps_left() => Err(Error::state(why)),
            Some(run) if run.is_active() => self.stop_epoch(),
            _ => Ok(()),
        }
    }

    /// Stop the epoch in progress (its prefetch thread uses the communicator, which the
    /// next agreement needs), remembering where it stood.
    fn interrupt_epoch(&mut self) -> Result<Option<Interrupted>> {
        // An epoch that has ended stays ended: it is resumed past its last step.
        let position = self.epoch.as_ref().map(|run| match run.is_active() {
            true => run.position(),
            false => (u64::MAX, 0),
        });
        let interrupted = self.current.clone().zip(position).map(|(order, (step, depth))| Interrupted { order, step, depth });
        self.stop_epoch()?;
        Ok(interrupted)
    }

    /// Collective: after a refused begin or seek, resume the interrupted epoch where it
    /// stood. Every rank refused the same call (it was agreed on), so every rank resumes
    /// at the same step, with or without prefetch as agreed again here. Not where the
    /// other ranks were in another call (`MDL_ERR_CALL_MISMATCH`): they would not take
    /// part in that agreement, so this rank's interrupted epoch stays stopped.
    fn resume_after_refusal(&mut self, started: &Result<()>, interrupted: Option<Interrupted>) -> Result<()> {
        let Err(refusal) = started else { return Ok(()) };
        if refusal.status == mdl_status::MDL_ERR_CALL_MISMATCH {
            return Ok(());
        }
        let Some(Interrupted { order, step, depth }) = interrupted else { return Ok(()) };
        let run = EpochRun::prepare(&self.core, order, step, depth);
        let spawned = self.core.lock().agree_call(Ok(()), &[Self::spawn_failure(&run)]);
        self.epoch = Some(run.release(spawned.map_or(true, |v| v[0] != 0)));
        Ok(())
    }

    /// Whether this rank could not start its prefetch thread: if any rank could not,
    /// every rank fetches inline, so that the ranks' collectives stay in step.
    fn spawn_failure(run: &EpochRun) -> Setting<'static> {
        Setting::max("prefetch thread not started", run.spawn_failed() as u64)
    }

    /// The sampler's epoch for `args` over this loader's samples and ranks.
    fn epoch_of(core: &Core, args: EpochArgs) -> Result<Epoch> {
        let n = core.num_samples()?;
        Epoch::new(n, core.comm().size(), args.seed, args.epoch, args.batch_size, args.shuffle, args.drop_last)
    }

    /// Collective: run `order` from `step`, once the ranks agree on `settings` (what
    /// must be the same everywhere), the step and the prefetch.
    fn start_epoch(&mut self, order: Result<Arc<EpochOrder>>, step: u64, mut settings: Vec<Setting>) -> Result<()> {
        let depth = self.requested_prefetch();
        let checks = match &order {
            Err(err) => Err(err.clone()),
            Ok(o) if step > o.steps() => {
                Err(Error::invalid(format!("step {step} is past the end of the epoch ({} steps)", o.steps())))
            }
            // The agreements of the steps under way at once (see `Pipeline::run`).
            Ok(_) => {
                let mut core = self.core.lock();
                let under_way = core.agreement_lag().saturating_add(1);
                core.reserve_agreements(usize::try_from(under_way).unwrap_or(usize::MAX))
            }
        };
        // The prefetch thread is started before the agreement, held back until it.
        let run = match (&checks, &order) {
            (Ok(()), Ok(order)) => Some(EpochRun::prepare(&self.core, order.clone(), step, depth)),
            _ => None,
        };
        let not_started = run.as_ref().map_or(Setting::max("prefetch thread not started", 0), Self::spawn_failure);
        settings.extend([Setting::identical("step", step), Setting::identical("prefetch depth", depth as u64), not_started]);
        let agreed = self.core.lock().agree_call(checks, &settings);
        let agreed = match agreed {
            Ok(agreed) => agreed,
            Err(err) => {
                run.map_or(Ok(()), |run| run.stop(&self.core))?;
                return Err(err);
            }
        };
        // The epoch's info line covers this epoch alone (its thread, if any, is still
        // held back).
        self.core.lock().start_summary();
        let inline = agreed.last().is_some_and(|&not_started| not_started != 0);
        let run = run.expect("agreed that every rank built its epoch").release(inline);
        log::debug!("{} steps, starting at {step}, prefetch {depth}", run.steps());
        self.epoch = Some(run);
        self.current = order.ok();
        Ok(())
    }

    /// The prefetch depth asked for, the same on every rank (agreed). A rank whose MPI
    /// does not allow a thread of ours to communicate cannot start its prefetch thread
    /// (`EpochRun::prepare`), and then every rank fetches inline, as after any failure
    /// to start it: thread levels may differ between ranks. Said once per loader, as a
    /// warning by the lowest such rank only.
    fn requested_prefetch(&mut self) -> u32 {
        if self.prefetch_depth > 0
            && !self.told_no_thread_multiple
            && let Some(refused) = &self.core.lock().threads_refused
        {
            refused.log("prefetch needs MPI initialised with MPI_THREAD_MULTIPLE on every rank; every rank fetches without prefetch");
            self.told_no_thread_multiple = true;
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
        self.epoch.take().map_or(Ok(()), |run| run.stop(&self.core))
    }

    /// Collective: stop any epoch and agree that every rank finalizes (see
    /// [`Core::agree_to_finalize`]: on `MDL_ERR_CALL_MISMATCH` the loader works on).
    pub fn agree_to_finalize(&mut self) -> Result<()> {
        let stopped = self.stop_epoch();
        let agreed = self.core.lock().agree_to_finalize();
        agreed.and(stopped)
    }

    /// Collective: free everything, once the ranks agreed to.
    pub fn finalize(self) -> Result<()> {
        let core = Arc::try_unwrap(self.core)
            .map_err(|_| Error::state("the prefetch thread still holds the loader"))?
            .into_inner();
        core.finalize()
    }

    /// Collective: [`Loader::agree_to_finalize`], then [`Loader::finalize`], or on a
    /// failed agreement leave the MPI objects to MPI (a rank may still be in one of
    /// their collectives).
    pub fn agree_and_finalize(mut self) -> Result<()> {
        match self.agree_to_finalize() {
            Ok(()) => self.finalize(),
            Err(err) => {
                self.abandon(&err);
                Err(err)
            }
        }
    }

    /// Leave the loader's MPI objects unfreed after `failure` (MPI may still use its
    /// buffers, and freeing would wait for ranks that moved on).
    pub fn abandon(self, failure: &Error) {
        log::warn!("finalize could not agree with the other ranks ({}): MPI objects are not freed", failure.message);
        self.stop_progress();
        std::mem::forget(self);
    }
}
