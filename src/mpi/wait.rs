//! Completion of nonblocking MPI requests by a loop of our own.
//!
//! A blocking MPI call in MPICH spins on the CPU; with more ranks than cores the spinning
//! ranks take the core from the ones that would make progress and a 2 us transfer turns
//! into 5 ms (ENVIRONMENT.md). There, testing and then yielding hands the core over.
//! When every rank has a core of its own, yielding is harmful instead: on a machine
//! shared with other work, a yield can give the core away for a whole time slice (ms)
//! in the middle of a step of microseconds, and the blocking calls are faster still
//! (Open MPI's blocking collectives and `MPI_Win_flush_all` beat their nonblocking
//! counterparts several times at small sizes). So when every rank has its own core the
//! library uses blocking calls, and otherwise nonblocking calls completed by testing
//! and yielding; [`set_policy`] is told which once at `mdl_init`.

use super::{check, ffi};
use crate::error::Result;
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether waits yield the core between tests (process-wide; all loaders share a node).
static YIELD: AtomicBool = AtomicBool::new(true);
/// Whether `MPI_Win_flush_all` may complete gets. MPICH 4.0.2 sometimes returns from it
/// before the data of the gets has arrived when ranks outnumber cores
/// (tests/c/repro/mpich_flush_all_incomplete.c); there gets are `MPI_Rget`, completed
/// by waiting on their requests.
static FLUSH_COMPLETES_GETS: AtomicBool = AtomicBool::new(false);

/// How waits behave: `true` yields between tests (oversubscribed cores), `false` uses
/// blocking calls where there are any, and spins otherwise. `trust_flush` tells whether
/// `MPI_Win_flush_all` may complete gets (not on MPICH).
pub fn set_policy(yield_between_tests: bool, trust_flush: bool) {
    YIELD.store(yield_between_tests, Ordering::Relaxed);
    FLUSH_COMPLETES_GETS.store(trust_flush, Ordering::Relaxed);
}

/// Whether gets may be completed by a blocking flush.
pub fn flush_completes_gets() -> bool {
    blocking_allowed() && FLUSH_COMPLETES_GETS.load(Ordering::Relaxed)
}

thread_local! {
    /// Set on the library's own threads: they share the core with the caller's compute,
    /// so they always test and yield instead of spinning in a blocking call.
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Mark the calling thread as a background thread of the library (see `BACKGROUND`).
pub fn mark_background_thread() {
    BACKGROUND.with(|b| b.set(true));
}

fn yields() -> bool {
    YIELD.load(Ordering::Relaxed) || BACKGROUND.with(Cell::get)
}

/// Whether blocking MPI calls may be used (every rank has a core of its own and this
/// is the caller's thread).
pub fn blocking_allowed() -> bool {
    !yields()
}

/// Run a collective either blocking or as a nonblocking call completed by [`wait`],
/// as the policy says; `name` names the call in errors.
pub fn complete(
    name: &str,
    blocking: impl FnOnce() -> c_int,
    nonblocking: impl FnOnce(&mut ffi::MPI_Request) -> c_int,
) -> Result<()> {
    if blocking_allowed() {
        return check(blocking(), name);
    }
    // SAFETY: reading an extern constant that mpi-sys exports.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    check(nonblocking(&mut request), name)?;
    wait(request)
}

/// Wait until every request completes. Completed requests become `MPI_REQUEST_NULL`.
pub fn wait_all(requests: &mut [ffi::MPI_Request]) -> Result<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let count = c_int::try_from(requests.len()).expect("request count fits in int");
    let yield_between_tests = yields();
    loop {
        let mut done: c_int = 0;
        // SAFETY: requests is a valid array of `count` requests; statuses are ignored.
        let rc = unsafe {
            ffi::MPI_Testall(count, requests.as_mut_ptr(), &mut done, ffi::RSMPI_STATUSES_IGNORE)
        };
        check(rc, "MPI_Testall")?;
        if done != 0 {
            return Ok(());
        }
        if yield_between_tests {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Wait for one request.
pub fn wait(mut request: ffi::MPI_Request) -> Result<()> {
    wait_all(std::slice::from_mut(&mut request))
}
