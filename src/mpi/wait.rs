//! Completion of nonblocking MPI requests by a loop of our own.
//!
//! A blocking MPI call in MPICH spins on the CPU; with more ranks than cores the spinning
//! ranks take the core from the ones that would make progress and a 2 us transfer turns
//! into 5 ms (measured, MPICH 4.0.2 on 2 cores). There, testing and then yielding hands the core over.
//! When every rank has a core of its own, yielding is harmful instead: on a machine
//! shared with other work, a yield can give the core away for a whole time slice (ms)
//! in the middle of a step of microseconds, and the blocking calls are faster still
//! (Open MPI's blocking collectives and `MPI_Win_flush_all` beat their nonblocking
//! counterparts several times at small sizes). So when every rank has its own core the
//! library uses blocking calls, and otherwise nonblocking calls completed by testing
//! and yielding; which one is agreed at `mdl_init` ([`WaitPolicy`]).

use super::{check, ffi, watchdog};
use crate::error::{Error, Result};
use std::cell::Cell;
use std::os::raw::c_int;

/// How one loader waits; agreed by every rank at `mdl_init` (a blocking collective on
/// one rank never matches a nonblocking one on another), and kept per communicator so
/// that loaders never share it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WaitPolicy {
    /// Test and yield the core between tests (ranks outnumber cores) instead of using
    /// blocking calls.
    pub yield_between_tests: bool,
    /// Whether `MPI_Win_flush_all` may complete gets. MPICH 4.0.2 sometimes returns
    /// from it before the data of the gets has arrived when ranks outnumber cores
    /// (tests/c/repro/mpich_flush_all_incomplete.c); there gets are `MPI_Rget`,
    /// completed by waiting on their requests.
    pub trust_flush: bool,
    /// Give up waiting after this many seconds (`MDL_TIMEOUT`); 0 waits for ever.
    pub timeout_seconds: f64,
    /// End the job when one wait lasts this many seconds (`MDL_WATCHDOG`); 0: never.
    pub watchdog_seconds: f64,
}

impl WaitPolicy {
    /// Before the ranks have agreed on a policy, a kind of call that every rank picks
    /// alike without knowing the others' settings: from the MPI library, one per job.
    /// On MPICH, nonblocking calls completed by testing and yielding (its blocking calls
    /// busy-poll where ranks outnumber cores); elsewhere blocking calls, which yield by
    /// themselves when oversubscribed (Open MPI) and need no test loop (a loop of tests
    /// per round of a nonblocking collective, whose rounds advance only inside a test).
    /// (A loader's communicator starts with its rank's own watchdog, see
    /// `Comm::duplicate`.)
    pub(crate) fn unagreed(watchdog_seconds: f64) -> WaitPolicy {
        WaitPolicy { yield_between_tests: super::is_mpich(), trust_flush: false, timeout_seconds: 0.0, watchdog_seconds }
    }

    fn yields(&self) -> bool {
        self.yield_between_tests || BACKGROUND.with(Cell::get)
    }

    /// Whether blocking MPI calls may be used: every rank has a core of its own, this
    /// is the caller's thread, and no timeout needs a loop that can give up.
    pub fn blocking_allowed(&self) -> bool {
        !self.yields() && self.timeout_seconds == 0.0
    }

    /// Whether gets may be completed by a blocking flush.
    pub fn flush_completes_gets(&self) -> bool {
        self.blocking_allowed() && self.trust_flush
    }
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

/// Run a collective either blocking or as a nonblocking call completed by [`wait`],
/// as the policy says; `name` names the call in errors.
pub fn complete(
    policy: &WaitPolicy,
    name: &'static str,
    blocking: impl FnOnce() -> c_int,
    nonblocking: impl FnOnce(&mut ffi::MPI_Request) -> c_int,
) -> Result<()> {
    if policy.blocking_allowed() {
        let _watched = watchdog::watch(name, policy.watchdog_seconds);
        return check(blocking(), name);
    }
    // SAFETY: reading an extern constant that mpi-sys exports.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    check(nonblocking(&mut request), name)?;
    wait_all_in(policy, std::slice::from_mut(&mut request), name)
        .map_err(|err| Error { message: format!("{name}: {}", err.message), ..err })
}

/// A blocking MPI call that may wait for other ranks, under the watchdog.
pub fn watched<R>(policy: &WaitPolicy, name: &'static str, call: impl FnOnce() -> R) -> R {
    let _watched = watchdog::watch(name, policy.watchdog_seconds);
    call()
}

/// Wait until every request completes. Completed requests become `MPI_REQUEST_NULL`.
/// On `MDL_ERR_TIMEOUT` the requests are still pending: their buffers must outlive
/// the process (callers leak them).
pub fn wait_all(policy: &WaitPolicy, requests: &mut [ffi::MPI_Request]) -> Result<()> {
    wait_all_in(policy, requests, "MPI_Testall")
}

/// [`wait_all`] for the requests of `name` (what the watchdog calls the wait).
fn wait_all_in(policy: &WaitPolicy, requests: &mut [ffi::MPI_Request], name: &'static str) -> Result<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let _watched = watchdog::watch(name, policy.watchdog_seconds);
    let count = c_int::try_from(requests.len()).expect("request count fits in int");
    let yield_between_tests = policy.yields();
    let deadline = (policy.timeout_seconds > 0.0).then(|| super::wtime() + policy.timeout_seconds);
    let mut tests: u32 = 0;
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
        tests = tests.wrapping_add(1);
        // The clock is read every 1024 tests: MPI_Wtime is cheap but not free.
        if let Some(deadline) = deadline.filter(|_| tests.is_multiple_of(1024))
            && super::wtime() > deadline
        {
            return Err(Error::timeout(format!(
                "{} waited more than MDL_TIMEOUT = {} s for the other ranks: one is stuck, died, or makes a \
                 different call (it left its loop early, has fewer batches, or waits in a collective of its own \
                 such as comm.allreduce). The job cannot continue safely: call MPI_Abort",
                crate::call::current().name(),
                policy.timeout_seconds
            )));
        }
        if yield_between_tests {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
