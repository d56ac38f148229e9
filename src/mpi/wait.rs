//! Completion of nonblocking MPI requests by a test-and-yield loop.
//!
//! A blocking MPI call in MPICH spins on the CPU; with more ranks than cores the spinning
//! ranks take the core from the ones that would make progress and a 2 us transfer turns
//! into 5 ms (ENVIRONMENT.md). Testing and then yielding hands the core over.

use super::{check, ffi};
use crate::error::Result;
use std::os::raw::c_int;

/// Wait until every request completes. Completed requests become `MPI_REQUEST_NULL`.
pub fn wait_all(requests: &mut [ffi::MPI_Request]) -> Result<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let count = c_int::try_from(requests.len()).expect("request count fits in int");
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
        std::thread::yield_now();
    }
}

/// Wait for one request.
pub fn wait(mut request: ffi::MPI_Request) -> Result<()> {
    wait_all(std::slice::from_mut(&mut request))
}
