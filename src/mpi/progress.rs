//! MPI progress while the host is outside the library.
//!
//! Some transports serve a one-sided get only while the target process is inside MPI:
//! MPICH's between ranks of a node, and its TCP (and OFI) netmods between nodes. A
//! rank that has its batch and then waits in another library's collective (DDP's gloo
//! all-reduce, say) never serves a peer still reading from it, and both wait for ever:
//! measured with the QM9 GNN on two emulated hosts under MPICH, 1 run in 6 under load,
//! its ranks in gloo while one's prefetch thread waited for a get. A thread of the
//! library's own therefore pokes MPI's progress engine (`MPI_Iprobe` on the loader's
//! communicator, where the library sends no point-to-point message, so nothing is
//! taken from anyone) every `MDL_PROGRESS_US` microseconds while the loader lives.
//! It needs `MPI_THREAD_MULTIPLE`.
//!
//! No thread may call MPI once `MPI_Finalize` has begun: the library's finalize hook
//! closes the gate ([`stop_all_threads`]) before it closes the loaders still open, and
//! waits for a poke under way (MPICH's UCX asserted in a second loader's `MPI_Iprobe`
//! while the hook closed the first).

use super::{check, ffi, is_usable};
use crate::error::{Error, Result, mdl_status};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// A communicator handle that crosses to the progress thread.
struct Handle(ffi::MPI_Comm);
// SAFETY: MPI handles may be used from any thread under MPI_THREAD_MULTIPLE (checked by
// the caller of `ProgressThread::start`); the thread only probes, which MPI allows
// concurrently with any other call on the same communicator.
unsafe impl Send for Handle {}

/// Whether progress threads may still call MPI (false from `MPI_Finalize` on). A poke
/// holds it for reading.
static MAY_CALL_MPI: RwLock<bool> = RwLock::new(true);

/// Stop every progress thread's MPI calls for good, waiting for one under way: MPI is
/// being finalised.
pub fn stop_all_threads() {
    *MAY_CALL_MPI.write().unwrap_or_else(|e| e.into_inner()) = false;
}

/// `MPI_Iprobe`s per turn: one moves only part of a batch of gets waiting for this
/// rank (32 gets of 4 KB took 7 turns of one), a few cost about a microsecond each.
const POKES_PER_TURN: usize = 8;

/// The running thread; stopped (and joined) when dropped.
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Start poking progress on `comm` (which must outlive the thread: the owner drops
    /// this before freeing it) every `interval`.
    pub fn start(comm: &super::Comm, interval: Duration) -> Result<ProgressThread> {
        // After `stop_all_threads` a thread would stop at its first turn, and the loader
        // would count on a progress it does not get: refused, so that the loader takes
        // the path of a rank without the thread.
        if !*MAY_CALL_MPI.read().unwrap_or_else(|e| e.into_inner()) {
            return Err(Error::state("no progress thread after mdl_before_mpi_finalize"));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (handle, stopping) = (Handle(comm.raw()), stop.clone());
        let worker = std::thread::Builder::new()
            .name("mdloader-progress".into())
            .spawn(move || {
                // The whole handle (Send), not its field, moves into the thread.
                let handle = handle;
                loop {
                    // Woken early by the owner's drop.
                    std::thread::park_timeout(interval);
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    let may = MAY_CALL_MPI.read().unwrap_or_else(|e| e.into_inner());
                    if !*may || !is_usable() || (0..POKES_PER_TURN).any(|_| poke(&handle).is_err()) {
                        return;
                    }
                }
            })
            .map_err(|e| Error::new(mdl_status::MDL_ERR_NO_MEMORY, format!("starting the progress thread: {e}")))?;
        Ok(ProgressThread { stop, worker: Some(worker) })
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(worker) = self.worker.take() {
            worker.thread().unpark();
            let _ = worker.join();
        }
    }
}

/// One turn of MPI's progress engine.
fn poke(comm: &Handle) -> Result<()> {
    let mut flag: c_int = 0;
    // SAFETY: reading extern constants that mpi-sys exports; the communicator is valid
    // while the thread runs; flag and the ignored status are locals.
    check(
        unsafe {
            ffi::MPI_Iprobe(ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG, comm.0, &mut flag, ffi::RSMPI_STATUS_IGNORE)
        },
        "MPI_Iprobe",
    )
}
