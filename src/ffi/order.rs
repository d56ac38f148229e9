//! The built-in sampler's order without a loader: bindings that hand ids to a framework's
//! own sampler protocol (PyTorch's `DistributedSampler`) read the library's order here
//! instead of re-implementing it, so that there is one definition of an epoch.

use super::args;
use super::boundary;
use crate::memory;
use crate::error::{Error, mdl_status};
use crate::sampler::Epoch;
use std::os::raw::c_int;

/// Local, needs no loader nor MPI. The ids that rank `rank` of `n_ranks` gets at step
/// `step` of the built-in sampler's epoch over `n_samples` samples: exactly the ids
/// mdl_next_batch returns there for the same seed, epoch, batch_size, shuffle and
/// drop_last (see mdl_epoch_begin). Writes them into out (cap entries) and their count
/// into *n; a step past the end gives *n == 0. batch_size = ceil(n_samples / n_ranks)
/// and step 0 give the rank's whole share of the epoch. n_ranks == 0, rank >= n_ranks
/// or batch_size == 0 is MDL_ERR_INVALID_ARG; a cap smaller than the count is
/// MDL_ERR_BUFFER_TOO_SMALL with *n set to the count needed (out is not written).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_epoch_ids(
    n_samples: u64,
    n_ranks: u64,
    rank: u64,
    seed: u64,
    epoch: u64,
    batch_size: u64,
    shuffle: c_int,
    drop_last: c_int,
    step: u64,
    out: *mut u64,
    cap: usize,
    n: *mut usize,
) -> mdl_status {
    boundary("mdl_epoch_ids", || {
        // SAFETY: n is checked and points to a writable size_t (caller's contract).
        let count_out = unsafe { args::out(n, "n") }?;
        let ranks = usize::try_from(n_ranks).ok().filter(|&r| r > 0);
        let ranks = ranks.ok_or_else(|| Error::invalid(format!("n_ranks = {n_ranks}, must be 1 .. SIZE_MAX")))?;
        if rank >= n_ranks {
            return Err(Error::invalid(format!("rank = {rank} is not below n_ranks = {n_ranks}")));
        }
        let order = Epoch::new(n_samples, ranks, seed, epoch, batch_size, shuffle != 0, drop_last != 0)?;
        let count = batch_len(n_samples, n_ranks, batch_size, drop_last != 0, step);
        let mut ids = Vec::new();
        *count_out = args::len::<u64>(count, "the step's ids")?;
        if *count_out > cap {
            return Err(Error::new(
                mdl_status::MDL_ERR_BUFFER_TOO_SMALL,
                format!("step {step} has {count} ids, cap is {cap} (*n holds the count needed)"),
            ));
        }
        memory::reserve_exact(&mut ids, *count_out)?;
        order.batch_into(step, rank as usize, &mut ids);
        // SAFETY: the caller passes cap >= count writable u64 at out (checked just above).
        let out = unsafe { args::slice_mut(out, ids.len(), "out") }?;
        out.copy_from_slice(&ids);
        Ok(())
    })
}

/// How many ids `batch_into` gives at `step`, counted without building them (a caller
/// may ask for a whole share of 10^9 ids only to learn its size); the split is the
/// sampler's (`sampler::Epoch`), and the tests check that the two agree.
fn batch_len(n_samples: u64, n_ranks: u64, batch_size: u64, drop_last: bool, step: u64) -> u64 {
    let per_rank = if drop_last { n_samples / n_ranks } else { n_samples.div_ceil(n_ranks) };
    let first = step.saturating_mul(batch_size).min(per_rank);
    (first.saturating_add(batch_size)).min(per_rank) - first
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n_samples: u64, ranks: u64, rank: u64, batch: u64, drop_last: bool, step: u64) -> (mdl_status, Vec<u64>) {
        let mut out = vec![0u64; 64];
        let mut n = 0usize;
        let st = mdl_epoch_ids(n_samples, ranks, rank, 7, 3, batch, 1, drop_last as c_int, step, out.as_mut_ptr(), out.len(), &mut n);
        out.truncate(n);
        (st, out)
    }

    #[test]
    fn gives_what_the_epoch_gives_every_rank() {
        for rank in 0..3u64 {
            let epoch = Epoch::new(10, 3, 7, 3, 2, true, false).expect("valid");
            for step in 0..3 {
                let mut expected = Vec::new();
                epoch.batch_into(step, rank as usize, &mut expected);
                assert_eq!(ids(10, 3, rank, 2, false, step), (mdl_status::MDL_OK, expected));
            }
        }
        // Past the end: empty. With drop_last, 10 / 3 = 3 per rank.
        assert_eq!(ids(10, 3, 0, 2, false, 2).1.len(), 0);
        assert_eq!(ids(10, 3, 0, 3, true, 0).1.len(), 3);
        assert_eq!(ids(10, 3, 0, 4, false, 0).1.len(), 4);
    }

    #[test]
    fn refuses_bad_arguments_and_small_buffers() {
        assert_eq!(ids(10, 0, 0, 2, false, 0).0, mdl_status::MDL_ERR_INVALID_ARG);
        assert_eq!(ids(10, 2, 2, 2, false, 0).0, mdl_status::MDL_ERR_INVALID_ARG);
        assert_eq!(ids(10, 2, 0, 0, false, 0).0, mdl_status::MDL_ERR_INVALID_ARG);
        let mut out = [0u64; 1];
        let mut n = 0usize;
        let st = mdl_epoch_ids(10, 1, 0, 0, 0, 4, 1, 0, 0, out.as_mut_ptr(), 1, &mut n);
        assert_eq!((st, n), (mdl_status::MDL_ERR_BUFFER_TOO_SMALL, 4));
        let st = mdl_epoch_ids(10, 1, 0, 0, 0, 4, 1, 0, 0, out.as_mut_ptr(), 1, std::ptr::null_mut());
        assert_eq!(st, mdl_status::MDL_ERR_NULL_ARG);
    }
}
