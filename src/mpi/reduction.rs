//! A reduction that runs while the caller goes on: `MPI_Iallreduce` with its buffers.
//!
//! The sampler agrees on its steps this way, several steps ahead, so that no step waits
//! for the slowest rank's arrival (see `loader::pipeline`). MPI progresses the
//! reduction inside the library's other MPI calls (the engines' gets, flushes and
//! exchanges) and inside [`Reduction::finish`].

use super::{Comm, WaitPolicy, check, comm::null_request, ffi, to_count, wait::wait_all};
use crate::error::Result;

/// An element-wise maximum over the ranks, under way. Its buffers belong to MPI until
/// it completes, so they live here, on the heap, where moving this value does not move
/// them.
pub struct Reduction {
    request: ffi::MPI_Request,
    send: Vec<f64>,
    received: Vec<f64>,
    policy: WaitPolicy,
}

// SAFETY: the request and buffers are used by one thread at a time (the loader's lock
// serialises its MPI calls); MPI allows completing a request on another thread.
unsafe impl Send for Reduction {}

impl Comm {
    /// Collective: start the maximum of `send` over all ranks into `received` (of the
    /// same length). Every rank must start its reductions (and other collectives on
    /// this communicator) in the same order. The caller's buffers are used as they
    /// are: nothing is allocated here.
    pub fn start_allreduce_max(&self, send: Vec<f64>, mut received: Vec<f64>) -> Result<Reduction> {
        assert_eq!(send.len(), received.len(), "a reduction receives what it sends");
        let count = to_count(send.len() as u64, "allreduce length")?;
        let mut request = null_request();
        // SAFETY: both buffers hold `count` doubles and stay allocated (and unmoved: a
        // Vec's elements stay where they are when the Vec moves) until the request
        // completes: `finish` waits for it, and a value dropped or timed out before
        // then leaks them.
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                send.as_ptr().cast(),
                received.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_DOUBLE,
                ffi::RSMPI_MAX,
                self.raw(),
                &mut request,
            )
        };
        check(rc, "MPI_Iallreduce")?;
        let mut reduction = Reduction { request, send, received, policy: *self.wait_policy() };
        reduction.poke()?;
        Ok(reduction)
    }
}

impl Reduction {
    /// Test once, so that this rank's first messages leave now: MPICH issues a
    /// schedule's sends only from its progress engine, and a rank that makes no MPI
    /// call until its next step (it computes, or it is late) would otherwise hold the
    /// other ranks' results back until then (tests/c/lag_test.c, MPICH 4.0, 2 ranks).
    fn poke(&mut self) -> Result<()> {
        let mut done = 0;
        // SAFETY: the request is valid (or null); the status is ignored.
        check(unsafe { ffi::MPI_Test(&mut self.request, &mut done, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Test")
    }

    /// Wait for the result (usually there already: it was started steps ago); returns
    /// it, and the send buffer for reuse.
    pub fn finish(mut self) -> Result<(Vec<f64>, Vec<f64>)> {
        wait_all(&self.policy, std::slice::from_mut(&mut self.request))?;
        Ok((std::mem::take(&mut self.received), std::mem::take(&mut self.send)))
    }
}

impl Drop for Reduction {
    /// A reduction dropped unfinished (a timeout, or an error on the way out) may still
    /// be written by MPI: its buffers are leaked, never freed under MPI's feet.
    fn drop(&mut self) {
        if self.request != null_request() {
            log::warn!("an unfinished MPI_Iallreduce is abandoned; its buffers are leaked");
            std::mem::forget(std::mem::take(&mut self.send));
            std::mem::forget(std::mem::take(&mut self.received));
        }
    }
}
