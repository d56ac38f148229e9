//! An epoch (the built-in sampler's order or the caller's): batches in loader-owned buffers, fetched on the
//! caller's thread or ahead of it on a prefetch thread.
//!
//! Prefetch with depth k: a thread of the library's own runs the fetches of the next k
//! steps while the caller computes, into k + 1 reused buffers (the caller holds one,
//! the batch it was last given). Step s may start once the caller has asked for
//! `s - k + 1` batches, a rule that is the same on every rank; so when the caller stops
//! an epoch (new epoch, seek, finalize) at the same call on every rank, every rank's
//! thread finishes exactly the same steps before it exits, and no rank is left waiting
//! in a fetch that another rank's thread skipped.

use super::batch::Batch;
use super::core::Core;
use super::pipeline::Pipeline;
use crate::error::{Error, Result, mdl_status};
use super::order::EpochOrder;
use crossbeam::channel::{Receiver, Sender, unbounded};
use parking_lot::{Condvar, Mutex};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where an epoch's batches come from.
enum Source {
    /// Fetched on the caller's thread at each call; the batch the caller holds.
    Inline(Pipeline, Option<Batch>),
    Prefetch(Prefetcher),
    /// The prefetch thread could not be started (until the ranks agree what to do).
    NotStarted,
}

pub struct EpochRun {
    epoch: Arc<EpochOrder>,
    depth: u32,
    /// `MDL_AGREEMENT_LAG`, read when the epoch was prepared.
    lag: u64,
    /// The step the next call returns.
    next_step: u64,
    source: Source,
    finished: bool,
}

impl EpochRun {
    /// Set up an epoch starting at `step` with the given prefetch depth (0: fetch
    /// inline). A prefetch thread is started but held back until [`EpochRun::release`]:
    /// the ranks first agree that every one of them could start it.
    pub fn prepare(core: &Arc<Mutex<Core>>, epoch: Arc<EpochOrder>, step: u64, depth: u32) -> EpochRun {
        let finished = step >= epoch.steps();
        let lag = core.lock().agreement_lag();
        let source = if depth == 0 || finished {
            Source::Inline(Pipeline::new(step, lag), None)
        } else if !crate::mpi::thread_multiple() {
            // Agreed like a thread that failed to start: every rank fetches inline.
            Source::NotStarted
        } else {
            match Prefetcher::spawn(core.clone(), epoch.clone(), step, depth, lag) {
                Ok(prefetcher) => Source::Prefetch(prefetcher),
                Err(err) => {
                    log::warn!("could not start the prefetch thread ({err}); fetching without prefetch");
                    Source::NotStarted
                }
            }
        };
        EpochRun { epoch, depth, lag, next_step: step, source, finished }
    }

    /// Whether this rank's prefetch thread could not be started.
    pub fn spawn_failed(&self) -> bool {
        matches!(self.source, Source::NotStarted)
    }

    /// Let the epoch run. `inline` (some rank could not start its prefetch thread):
    /// every rank fetches on the caller's thread instead.
    pub fn release(mut self, inline: bool) -> EpochRun {
        let source = std::mem::replace(&mut self.source, Source::NotStarted);
        self.source = match source {
            Source::Prefetch(prefetcher) if inline => {
                // It has not fetched anything yet: it was held back.
                let _ = prefetcher.stop();
                Source::Inline(Pipeline::new(self.next_step, self.lag), None)
            }
            Source::Prefetch(prefetcher) => {
                prefetcher.release();
                Source::Prefetch(prefetcher)
            }
            Source::NotStarted => Source::Inline(Pipeline::new(self.next_step, self.lag), None),
            inline @ Source::Inline(..) => inline,
        };
        self
    }

    pub fn steps(&self) -> u64 {
        self.epoch.steps()
    }

    /// Where the epoch stands (the step the next call returns) and its prefetch depth,
    /// to restart it exactly there.
    pub fn position(&self) -> (u64, u32) {
        (self.next_step, self.depth)
    }

    /// True until the end of the epoch has been returned (or a step failed).
    pub fn is_active(&self) -> bool {
        !self.finished
    }

    /// Whether steps of the epoch are still to be taken (the same on every rank).
    pub fn has_steps_left(&self) -> bool {
        !self.finished && self.next_step < self.epoch.steps()
    }

    /// Collective: the next batch, or None at the end of the epoch (on every rank at once).
    pub fn next(&mut self, core: &Arc<Mutex<Core>>) -> Result<Option<&Batch>> {
        if self.finished || self.next_step >= self.epoch.steps() {
            if !self.finished {
                core.lock().log_summary("epoch");
            }
            self.finished = true;
            return Ok(None);
        }
        let step = self.next_step;
        self.next_step += 1;
        let result = match &mut self.source {
            Source::Inline(pipeline, current) => {
                if let Some(done) = current.take() {
                    pipeline.give_back(done);
                }
                let (batch, result) = pipeline.run(&mut core.lock(), &self.epoch, step);
                let batch = current.insert(batch);
                result.map(|()| &*batch)
            }
            Source::Prefetch(prefetcher) => prefetcher.next(),
            Source::NotStarted => unreachable!("released epochs have a source"),
        };
        if result.is_err() {
            // The failure was agreed on by every rank: the epoch ends everywhere.
            self.finished = true;
        }
        result.map(Some)
    }

    /// Collective: stop the prefetch thread, if any, after the steps every rank's
    /// thread may have started (see the module documentation), and complete the
    /// agreements of steps started ahead that will not run.
    pub fn stop(self, core: &Arc<Mutex<Core>>) -> Result<()> {
        match self.source {
            Source::Prefetch(prefetcher) => prefetcher.stop(),
            Source::Inline(mut pipeline, current) => {
                if let Some(held) = current {
                    pipeline.give_back(held);
                }
                pipeline.drain(&mut core.lock())
            }
            Source::NotStarted => Ok(()),
        }
    }
}

/// How far the prefetch thread may run.
struct Progress {
    /// Whether the ranks agreed to start the epoch: until then the thread waits.
    released: bool,
    /// Batches the caller has asked for.
    requested: u64,
    stopping: bool,
}

struct Prefetcher {
    progress: Arc<(Mutex<Progress>, Condvar)>,
    ready: Receiver<(Batch, Result<()>)>,
    free: Sender<Batch>,
    worker: Option<JoinHandle<()>>,
    /// The batch the caller holds.
    current: Option<Batch>,
}

impl Prefetcher {
    /// Start the thread, held back until [`Prefetcher::release`].
    fn spawn(core: Arc<Mutex<Core>>, epoch: Arc<EpochOrder>, first_step: u64, depth: u32, lag: u64) -> std::io::Result<Prefetcher> {
        let progress =
            Arc::new((Mutex::new(Progress { released: false, requested: 0, stopping: false }), Condvar::new()));
        let (ready_tx, ready) = unbounded();
        let (free, free_rx) = unbounded();
        let shared = progress.clone();
        let worker = std::thread::Builder::new()
            .name("mdloader-prefetch".into())
            .spawn(move || {
                crate::mpi::mark_background_thread();
                                let run = AssertUnwindSafe(|| {
                    let mut pipeline = Pipeline::new(first_step, lag);
                    prefetch_loop(&core, &epoch, first_step, depth as u64, &shared, &ready_tx, &free_rx, &mut pipeline);
                    while let Ok(done) = free_rx.try_recv() {
                        pipeline.give_back(done);
                    }
                    // Stopped, failed or at the end: the same step on every rank.
                    if let Err(err) = pipeline.drain(&mut core.lock()) {
                        let _ = ready_tx.send((Batch::default(), Err(err)));
                    }
                });
                if catch_unwind(run).is_err() {
                    let error = Error::new(mdl_status::MDL_ERR_PANIC, "the prefetch thread panicked");
                    let _ = ready_tx.send((Batch::default(), Err(error)));
                }
            })?;
        Ok(Prefetcher { progress, ready, free, worker: Some(worker), current: None })
    }

    fn release(&self) {
        let (lock, wake) = &*self.progress;
        lock.lock().released = true;
        wake.notify_all();
    }

    fn next(&mut self) -> Result<&Batch> {
        if let Some(done) = self.current.take() {
            let _ = self.free.send(done);
        }
        {
            let (lock, wake) = &*self.progress;
            lock.lock().requested += 1;
            wake.notify_all();
        }
        let (batch, result) = self
            .ready
            .recv()
            .map_err(|_| Error::new(mdl_status::MDL_ERR_PANIC, "the prefetch thread ended early"))?;
        result?;
        Ok(self.current.insert(batch))
    }

    fn stop(mut self) -> Result<()> {
        {
            let (lock, wake) = &*self.progress;
            lock.lock().stopping = true;
            wake.notify_all();
        }
        if let Some(done) = self.current.take() {
            let _ = self.free.send(done);
        }
        // Take every batch the thread still makes, until it has run its last allowed
        // step and hung up. A step that failed on every rank alike (agreed) and was never
        // handed out concerns no one: the caller stopped before it, as an inline epoch
        // never runs it. A failure of MPI itself (an error, MDL_TIMEOUT, a panic) leaves
        // the ranks out of step and is reported.
        let mut failure = None;
        while let Ok((batch, result)) = self.ready.recv() {
            match result {
                Err(err) if leaves_ranks_out_of_step(&err) => {
                    failure.get_or_insert(err);
                }
                Err(err) => log::debug!("a prefetched step that was never taken failed: {}", err.message),
                Ok(()) => {}
            }
            let _ = self.free.send(batch);
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        failure.map_or(Ok(()), Err)
    }
}

#[allow(clippy::too_many_arguments)]
fn prefetch_loop(
    core: &Mutex<Core>,
    epoch: &EpochOrder,
    first_step: u64,
    depth: u64,
    progress: &(Mutex<Progress>, Condvar),
    ready: &Sender<(Batch, Result<()>)>,
    free: &Receiver<Batch>,
    pipeline: &mut Pipeline,
) {
    for step in first_step..epoch.steps() {
        {
            let (lock, wake) = progress;
            let mut p = lock.lock();
            // Step first_step + i may run once the epoch is released and the caller asked
            // for i - depth + 1 batches. At most depth + 1 batches are then out (with the
            // caller or ready), plus the pipeline's.
            while !p.released || step - first_step >= p.requested + depth {
                if p.stopping {
                    return;
                }
                wake.wait(&mut p);
            }
        }
        while let Ok(done) = free.try_recv() {
            pipeline.give_back(done);
        }
        let (batch, result) = pipeline.run(&mut core.lock(), epoch, step);
        let failed = result.is_err();
        if ready.send((batch, result)).is_err() || failed {
            return;
        }
    }
}

/// Whether a failure leaves the ranks out of step (not agreed by all of them).
fn leaves_ranks_out_of_step(err: &Error) -> bool {
    matches!(
        err.status,
        mdl_status::MDL_ERR_MPI | mdl_status::MDL_ERR_TIMEOUT | mdl_status::MDL_ERR_PANIC | mdl_status::MDL_ERR_CALL_MISMATCH
    )
}
