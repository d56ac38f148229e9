//! Thin safe wrappers over `mpi-sys`: the only module that calls MPI directly.
//!
//! Every call's return code is checked and turned into an [`Error`] with MPI's own
//! message (the library sets `MPI_ERRORS_RETURN` on everything it owns). Waiting is
//! always done by [`wait::wait_all`]: nonblocking call, then test-and-yield, so that
//! ranks oversubscribing the cores do not starve each other (MPICH's blocking calls
//! busy-poll).

mod comm;
mod large_count;
mod lifecycle;
mod progress;
mod reduction;
mod shared;
mod wait;
mod watchdog;
mod window;

pub use comm::{Comm, CountWidth, GathervLayout, timed_out};
pub use lifecycle::at_finalize;
pub use progress::{ProgressThread, stop_all_threads as stop_progress_threads};
pub use reduction::Reduction;
pub use shared::SharedArray;
pub use wait::{WaitPolicy, mark_background_thread};
pub(crate) use watchdog::DEFAULT_WATCHDOG_SECONDS;
pub use window::{Get, GetLimits, PrivateMemory, Segment, Window};

use crate::error::{Error, Result, mdl_status};
use mpi_sys as ffi;
use std::os::raw::{c_char, c_int};

/// Largest element count one MPI call takes (counts are C `int`).
pub const MAX_COUNT: u64 = c_int::MAX as u64;

/// Turn an MPI return code into a `Result`, naming the call that failed.
fn check(rc: c_int, call: &str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    Err(Error::new(mdl_status::MDL_ERR_MPI, format!("{call} failed: {}", error_string(rc))))
}

fn error_string(code: c_int) -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_ERROR_STRING characters as the standard requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return format!("MPI error code {code}");
    }
    let bytes: Vec<u8> = buf[..len.max(0) as usize].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether MPI is usable now: initialised and not yet finalised.
pub fn is_usable() -> bool {
    let (mut initialized, mut finalized) = (0, 0);
    // SAFETY: both calls may be made at any time, even before MPI_Init.
    unsafe {
        ffi::MPI_Initialized(&mut initialized);
        ffi::MPI_Finalized(&mut finalized);
    }
    initialized != 0 && finalized == 0
}

/// Whether the host initialised MPI with `MPI_THREAD_MULTIPLE` (needed to communicate
/// from the library's own thread while the host may call MPI).
pub fn thread_multiple() -> bool {
    let mut provided: c_int = 0;
    // SAFETY: valid once MPI is initialised, which the loader checked at mdl_init.
    unsafe { ffi::MPI_Query_thread(&mut provided) };
    // SAFETY: reading an extern constant that mpi-sys exports.
    provided == unsafe { ffi::RSMPI_THREAD_MULTIPLE }
}

/// This process's rank in `MPI_COMM_WORLD`, when MPI is usable (for log lines).
pub fn world_rank() -> Option<usize> {
    if !is_usable() {
        return None;
    }
    let mut rank: c_int = 0;
    // SAFETY: MPI is initialised and not finalised; COMM_WORLD is always valid then.
    let rc = unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
    (rc == ffi::MPI_SUCCESS as c_int).then_some(rank as usize)
}

/// Whether the MPI library is MPICH (or derived from it), from its version string.
pub fn is_mpich() -> bool {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_LIBRARY_VERSION_STRING characters as the standard requires.
    if unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) } != ffi::MPI_SUCCESS as c_int {
        return false;
    }
    let bytes: Vec<u8> = buf[..len.max(0) as usize].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).contains("MPICH")
}

/// Seconds since an arbitrary point, from `MPI_Wtime`.
pub fn wtime() -> f64 {
    // SAFETY: MPI_Wtime has no preconditions beyond an initialised MPI.
    unsafe { ffi::RSMPI_Wtime() }
}

/// Convert a byte or element count to an MPI count, failing clearly instead of
/// truncating.
pub fn to_count(n: u64, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::invalid(format!("{what} ({n}) exceeds the MPI count limit of {MAX_COUNT}"))
    })
}
