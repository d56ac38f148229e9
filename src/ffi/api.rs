//! The exported C API. Prototypes follow the design contract exactly (extended, never changed); the reference
//! documentation is these comments, which cbindgen copies into `include/mdloader.h`.

use super::args::{self, slice, slice_mut};
use super::handle::{Call, install_finalize_hook, with_loader, with_published};
use super::{boundary, init_logging, with_last_error};
use crate::backend::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::loader::{EpochArgs, FetchArgs, Loader, MAX_PREFETCH};
use crate::mpi::Comm;
use crate::store::ShardView;
use mpi_sys::{MPI_Comm, RSMPI_Fint};
use std::os::raw::{c_char, c_int, c_void};

pub use super::handle::mdl_loader;

/// The deepest prefetch mdl_set_prefetch accepts.
pub const MDL_MAX_PREFETCH: u32 = 64;
// A literal above, so that cbindgen writes the number into the header.
const _: () = assert!(MDL_MAX_PREFETCH == MAX_PREFETCH);

/// Which engine moves the bytes.
#[repr(C)]
#[allow(non_camel_case_types, dead_code)]
pub enum mdl_backend {
    /// The estimator decides, per step (default).
    MDL_BACKEND_AUTO = 0,
    /// MPI RMA: gets from the owners' windows.
    MDL_BACKEND_ONESIDED = 1,
    /// MPI_Alltoallv of requests and data.
    MDL_BACKEND_COLLECTIVE = 2,
}

/// `mdl_backend` as it arrives from C: any int. Checked before use, since an
/// out-of-range value in a Rust enum would be undefined behaviour. The header names
/// it `mdl_backend` (cbindgen.toml renames it).
pub type MdlBackendArg = c_int;
/// `mdl_status` as it arrives from C, for the same reason.
pub type MdlStatusArg = c_int;

fn init_from(comm: Result<MPI_Comm>, group_size: Option<c_int>, out: *mut *mut mdl_loader) -> Result<()> {
    init_logging();
    let local_checks = if out.is_null() { Err(Error::null_arg("out")) } else { install_finalize_hook() };
    let loader = Loader::init(comm?, local_checks, group_size.map(i64::from))?;
    let handle = Box::into_raw(mdl_loader::open(loader));
    // SAFETY: checked non-NULL above (and agreed on by all ranks).
    unsafe { *out = handle };
    Ok(())
}

/// Collective over comm. Duplicates comm; MPI must already be initialised. The
/// library never initialises or finalises MPI.
///
/// Settings are read from the environment on every rank and agreed: a setting that
/// differs between ranks is MDL_ERR_INVALID_ARG on every rank, naming it and two of
/// its values; an invalid value is that rank's MDL_ERR_INVALID_ARG (MDL_ERR_REMOTE on
/// the others). `MDL_BACKEND=auto|onesided|collective` (initial backend),
/// `MDL_WAIT=auto|spin|yield`, `MDL_MAX_MESSAGE_BYTES` (most bytes a rank sends or
/// receives in one collective round, default no limit; larger steps run in rounds), `MDL_MAX_GETS_IN_FLIGHT` (1..2^20, default 4096),
/// `MDL_CALIBRATION=on|off|<file>`, `MDL_CALIBRATION_SECONDS` (0..60; 0 skips it),
/// `MDL_PROBE_INTERVAL`, `MDL_HYSTERESIS` ([0, 1)), `MDL_PROBE_BUDGET` ([0, 1], what
/// AUTO's probes may cost over all steps' time), `MDL_MATRIX_MAX_RANKS` (0..64),
/// `MDL_WARMUP_GETS` (0..65536), `MDL_WARMUP_MAP_BYTES` (bytes of the shards of this
/// rank's MPI node that registration maps by reading a byte of every 64 KB, with the
/// node-local path off; default 2^30, 0 skips it), `MDL_TIMEOUT` (seconds a collective may wait before
/// MDL_ERR_TIMEOUT, 0 = never, the default; set, every wait is a test loop),
/// `MDL_WATCHDOG` (seconds one wait for the other ranks may last before the job is
/// ended with MPI_Abort and a line naming the call, default 1800, 0 = never),
/// `MDL_AGREEMENT_LAG` (sampler steps agreed ahead, 0..64, default 2), `MDL_SHARED_INDEX=on|off` (the global
/// index once per node in shared memory, or per rank), `MDL_NODE_LOCAL=on|off` (samples
/// of the ranks of this rank's node copied from shared memory instead of through the
/// engines; default on); `MDL_LOG=error|warn|info|debug|trace` (logging to stderr, not
/// agreed), `MDL_NODE_KEY` (ranks of a node with different keys count as different
/// nodes, to emulate hosts; not agreed) and `MDL_SHM_DIR`, `MDL_SHM_RESERVE` (where
/// MPI's shared memory lives, default /dev/shm, and the bytes left free there; not
/// agreed, but what they decide is), `MDL_PROGRESS=auto|on|off` and `MDL_PROGRESS_US`
/// (a thread that pokes MPI's progress while the host is outside the library, so that
/// peers' one-sided gets from this rank complete: MPICH, and Open MPI's pt2pt one-sided
/// component, serve a get only while its target is in MPI; on by default wherever
/// gets are made; needs MPI_THREAD_MULTIPLE, and where a rank serving gets has no
/// thread every engine step ends in a barrier instead, agreed at registration; `off`
/// turns both off; not agreed). docs/configuration.md documents each.
///
/// What cannot be agreed: MPI_COMM_NULL or an invalid handle on one rank returns an
/// error there at once while the other ranks wait in MPI_Comm_dup (MDL_TIMEOUT cannot
/// help: there is no loader yet; the watchdog, at its default, ends the job). A call
/// after MPI_Finalize returns MDL_ERR_STATE.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init(comm: MPI_Comm, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init", || init_from(Ok(comm), None, out))
}

/// The same as mdl_init for Fortran (`comm` with `use mpi`, `comm%MPI_VAL` with
/// `use mpi_f08`) and Python (ctypes + mpi4py `comm.py2f()`). An invalid handle is
/// MDL_ERR_INVALID_ARG (checked under MPI_ERRORS_RETURN, so the host's error handler
/// does not abort the job).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init_f(comm: RSMPI_Fint, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init_f", || init_from(Comm::from_fortran(comm), None, out))
}

/// Collective over comm: mdl_init, with comm split into replica groups that each hold
/// a full copy of the dataset. group_size ranks per group, consecutive in comm (it must
/// divide comm's size; comm's size is the same as mdl_init), or 0: one group per node
/// (MPI's shared-memory node, split further by MDL_NODE_KEY). group_size must be the
/// same on every rank; a bad or differing value is MDL_ERR_INVALID_ARG on every rank.
///
/// Each group registers the whole dataset, every rank its part (mdl_replica_part
/// gives an even split; any split works), with the same samples in the same order in
/// every group: ids are the group's, 0 .. N-1, in the order of the group's ranks.
/// mdl_register_shard checks that every group holds the same number of samples and
/// the same lengths (MDL_ERR_INVALID_ARG on every rank otherwise); the bytes are the
/// caller's promise. Fetches (mdl_fetch_batch and the sampler's) read only the rank's
/// own group, through the engines and, with MDL_NODE_LOCAL=on, the node's shared
/// memory. The built-in sampler still splits each epoch over every rank of comm: every
/// sample is read once per epoch across the job, as without groups. Engine choices
/// and errors stay agreed over all of comm. The groups of one node register one after
/// another (Open MPI 4.1 may otherwise give their windows one shared state): with
/// MDL_TIMEOUT set, it must cover the other groups' registrations.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init_replicated(comm: MPI_Comm, group_size: c_int, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init_replicated", || init_from(Ok(comm), Some(group_size), out))
}

/// mdl_init_replicated for Fortran and Python (a Fortran handle, as mdl_init_f).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init_replicated_f(comm: RSMPI_Fint, group_size: c_int, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init_replicated_f", || init_from(Comm::from_fortran(comm), Some(group_size), out))
}

/// Local. Where this rank sits among the replica groups: its group (0-based, groups
/// numbered by their lowest rank in comm), the number of groups, its rank in the group
/// and the group's size. Without groups (mdl_init): 0, 1, its rank in comm, comm's size.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_replica_info(
    h: *const mdl_loader,
    group: *mut u32,
    num_groups: *mut u32,
    rank_in_group: *mut u32,
    group_size: *mut u32,
) -> mdl_status {
    boundary("mdl_replica_info", || {
        let info = with_published(h, |p| Ok(p.replicas()))?;
        let outs = [
            (group, "group"),
            (num_groups, "num_groups"),
            (rank_in_group, "rank_in_group"),
            (group_size, "group_size"),
        ];
        args::outs_present(&outs)?;
        let values = [info.group, info.groups, info.rank_in_group, info.group_size];
        for ((ptr, name), value) in outs.into_iter().zip(values) {
            // SAFETY: checked, and points to a writable u32 (caller's contract).
            *unsafe { args::out(ptr, name) }? = value as u32;
        }
        Ok(())
    })
}

/// Local. This rank's even part of a dataset of num_samples samples, for its group to
/// hold a full copy: ids first .. first + count - 1, where first = num_samples * r / g
/// for rank r of a group of g (parts differ by at most one sample). Without groups:
/// the same split over comm.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_replica_part(h: *const mdl_loader, num_samples: u64, first: *mut u64, count: *mut u64) -> mdl_status {
    boundary("mdl_replica_part", || {
        let part = with_published(h, |p| Ok(p.replicas().part(num_samples)))?;
        args::outs_present(&[(first, "first"), (count, "count")])?;
        // SAFETY (both): checked, and points to a writable u64 (caller's contract).
        *unsafe { args::out(first, "first") }? = part.start;
        *unsafe { args::out(count, "count") }? = part.end - part.start;
        Ok(())
    })
}

/// Collective. This rank's shard: n_samples samples, sample i is
/// data[offsets[i] .. offsets[i+1]); offsets has n_samples + 1 entries,
/// offsets[0] == 0, non-decreasing. Zero-length samples and empty shards are valid
/// (offsets may be NULL when n_samples == 0; data may be NULL when it holds no byte).
/// The data is copied: the caller may free it on return. Global ids are assigned in
/// rank order: rank r's local sample i has id (sum of n_samples on ranks < r) + i.
/// A shard can be registered once per loader, and not during a sampler epoch
/// (MDL_ERR_STATE on every rank). n_samples + 1 offsets must fit in memory
/// (n_samples = UINT64_MAX is MDL_ERR_INVALID_ARG). If MDL_CALIBRATION names a file,
/// it is read here and its parameters must be identical on every rank.
/// Memory: the shard is copied into node-shared memory (files in MDL_SHM_DIR, default
/// /dev/shm) where every node's file system can hold its ranks' shards and the index;
/// otherwise, agreed over the job, into each rank's private memory, with a warning
/// from each short node (no SIGBUS, no hang where /dev/shm is small). The index
/// takes 1-3 bytes per sample of the job for samples up to 64 KiB (once per node;
/// up to 8 for longer ones), unless every sample of the job has the same length:
/// then there is no index table, and fetches skip its lookups.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_register_shard(
    h: *mut mdl_loader,
    data: *const c_void,
    offsets: *const u64,
    n_samples: u64,
) -> mdl_status {
    boundary("mdl_register_shard", || {
        with_loader(h, Call::Collective, |loader| {
            let shard = (|| {
                let n_offsets = match n_samples {
                    0 if offsets.is_null() => 0,
                    n => args::count_plus_one::<u64>(n, "n_samples")?,
                };
                // SAFETY: the caller passes n_samples + 1 offsets.
                let offsets = unsafe { slice(offsets, n_offsets, "offsets") }?;
                ShardView::check_offsets(offsets)?;
                let bytes = args::len::<u8>(offsets.last().copied().unwrap_or(0), "offsets[n_samples]")?;
                // SAFETY: the caller passes offsets[n_samples] bytes of data.
                let data = unsafe { slice(data as *const u8, bytes, "data") }?;
                ShardView::new(data, offsets)
            })();
            loader.register_shard(shard)
        })
    })
}

/// The number of samples over all ranks. Local.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_num_samples(h: *const mdl_loader, out: *mut u64) -> mdl_status {
    boundary("mdl_num_samples", || {
        let n = with_published(h, |p| p.num_samples())?;
        // SAFETY: out is checked and points to a writable u64 (caller's contract).
        *unsafe { args::out(out, "out") }? = n;
        Ok(())
    })
}

/// Size in bytes of sample id, known locally without communication.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_sample_size(h: *const mdl_loader, id: u64, out: *mut u64) -> mdl_status {
    boundary("mdl_sample_size", || {
        let size = with_published(h, |p| p.sample_size(id))?;
        // SAFETY: out is checked and points to a writable u64 (caller's contract).
        *unsafe { args::out(out, "out") }? = size;
        Ok(())
    })
}

/// Collective: every rank calls it the same number of times; ids and n differ per rank
/// (n may be 0; ids may repeat). Writes the samples back to back into out (out_cap
/// bytes) and their boundaries into out_offsets (n + 1 entries): sample ids[k] is
/// out[out_offsets[k] .. out_offsets[k+1]). The result is byte-identical whichever
/// backend moves it. A bad argument on any rank makes every rank return an error
/// (that rank its own code, the others MDL_ERR_REMOTE) instead of hanging; the loader
/// stays usable. On MDL_ERR_BUFFER_TOO_SMALL, out_offsets is filled and
/// out_offsets[n] holds the size needed. n + 1 offsets and out_cap bytes must each fit
/// in memory (at most PTRDIFF_MAX bytes): an impossible n or out_cap is
/// MDL_ERR_INVALID_ARG, agreed like any bad argument. An out that starts on a page
/// (aligned_alloc(4096, ...), not plain malloc, whose memory starts 16 bytes past one)
/// copies faster: glibc's memcpy of 4-16 KB samples ran up to 3x slower where the
/// destination lay a few bytes past the source modulo 4096 (AMD EPYC); the batches of
/// mdl_next_batch start on a page.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_fetch_batch(
    h: *mut mdl_loader,
    ids: *const u64,
    n: usize,
    out: *mut c_void,
    out_cap: u64,
    out_offsets: *mut u64,
) -> mdl_status {
    boundary("mdl_fetch_batch", || {
        with_loader(h, Call::Collective, |loader| {
            let fetch = (|| {
                let n_offsets = args::count_plus_one::<u64>(n as u64, "n")?;
                let out_len = args::len::<u8>(out_cap, "out_cap")?;
                // SAFETY: the caller passes n ids, out_cap bytes at out and n + 1 offsets
                // (each length checked to fit in memory above).
                unsafe {
                    Ok(FetchArgs {
                        ids: slice(ids, n, "ids")?,
                        out_offsets: slice_mut(out_offsets, n_offsets, "out_offsets")?,
                        out: slice_mut(out as *mut u8, out_len, "out")?,
                    })
                }
            })();
            loader.fetch_batch(fetch)
        })
    })
}

/// Force a backend or return to AUTO. Local; takes effect at the next fetch, and must
/// be set the same on every rank (a mismatch makes that fetch fail on every rank with
/// MDL_ERR_INVALID_ARG, not hang). A value outside the enum is MDL_ERR_INVALID_ARG.
/// Refused during a sampler epoch (MDL_ERR_STATE): its steps are agreed ahead
/// (MDL_AGREEMENT_LAG) with the backend in force when it began.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_set_backend(h: *mut mdl_loader, b: MdlBackendArg) -> mdl_status {
    boundary("mdl_set_backend", || {
        with_loader(h, Call::LocalSetter, |loader| {
            let backend = Backend::from_code(b as i64)
                .ok_or_else(|| Error::invalid(format!("{b} is not an mdl_backend value")))?;
            loader.set_backend(backend)
        })
    })
}

/// Collective. Starts an epoch of the built-in sampler. The epoch's order is a
/// permutation of all global ids drawn from (seed, epoch) (identity when shuffle == 0),
/// identical on every rank whatever the engine, the MPI or the number of ranks; the
/// algorithm is documented in docs/sampler.md so that it can be reproduced elsewhere. Every
/// rank gets the same number of samples, as PyTorch's DistributedSampler: ceil(N / P)
/// padded by wrapping around, or floor(N / P) with the remainder dropped when
/// drop_last != 0; rank r takes positions r, r + P, r + 2P, ... of the order. Batches
/// hold batch_size samples (the last one may hold fewer), so every rank has the same
/// number of steps. All arguments must be the same on every rank (checked). Stops any
/// epoch in progress; a refused begin (a bad or differing argument on any rank) leaves
/// that epoch where it was. mdl_fetch_batch is refused until this epoch ends.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_epoch_begin(
    h: *mut mdl_loader,
    seed: u64,
    epoch: u64,
    batch_size: u64,
    shuffle: c_int,
    drop_last: c_int,
) -> mdl_status {
    boundary("mdl_epoch_begin", || {
        let args = EpochArgs { seed, epoch, batch_size, shuffle: shuffle != 0, drop_last: drop_last != 0 };
        with_loader(h, Call::Collective, |loader| loader.epoch_begin(args))
    })
}

/// Collective. Starts an epoch of the caller's own batches (a framework's sampler:
/// torch's DistributedSampler, a weighted sampler, any order), run as the built-in
/// sampler's: mdl_next_batch returns them in turn, each step planned and agreed
/// MDL_AGREEMENT_LAG steps ahead (no step waits in a blocking collective), fetched
/// ahead on the prefetch thread with mdl_set_prefetch, and mdl_epoch_seek restarts the
/// epoch at a step. Step s fetches ids[batch_offsets[s] .. batch_offsets[s+1]):
/// batch_offsets holds steps + 1 entries, from 0 to the number of ids, increasing (no
/// batch is empty: n == 0 marks the end); ids and batches differ per rank, but every
/// rank must have the same number of steps (checked). Every id must be below
/// mdl_num_samples (MDL_ERR_OUT_OF_RANGE, agreed). Both arrays are copied (8 bytes per
/// id and per step, on this rank; each batch in flight holds its ids once more). The
/// collective engine learns what the others ask of a rank in each step, as in
/// mdl_fetch_batch, where the built-in sampler's ranks work it out from the shared
/// order. Stops any epoch in progress; a refused begin leaves that epoch where it was.
/// mdl_fetch_batch is refused until this epoch ends.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_epoch_begin_ids(
    h: *mut mdl_loader,
    ids: *const u64,
    batch_offsets: *const u64,
    steps: u64,
) -> mdl_status {
    boundary("mdl_epoch_begin_ids", || {
        with_loader(h, Call::Collective, |loader| {
            let batches = (|| {
                let n_offsets = args::count_plus_one::<u64>(steps, "steps")?;
                // SAFETY: the caller passes steps + 1 offsets (a length checked above),
                // then as many ids as the last offset says (checked before reading).
                unsafe {
                    let bounds = slice(batch_offsets, n_offsets, "batch_offsets")?;
                    let n_ids = args::len::<u64>(bounds[n_offsets - 1], "batch_offsets[steps]")?;
                    Ok((slice(ids, n_ids, "ids")?, bounds))
                }
            })();
            loader.epoch_begin_ids(batches)
        })
    })
}

/// Collective. This rank's next batch, in loader-owned memory valid until the next
/// call on h: *n samples, their ids, their bytes and n + 1 offsets (sample ids[k] is
/// data[offsets[k] .. offsets[k+1]); when *n > 0, data starts on a 4096-byte
/// boundary). *n == 0 on every rank at once marks the end of the epoch. If an
/// out-pointer is NULL the step is still taken (so that the ranks stay in step) and
/// MDL_ERR_NULL_ARG returned.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_next_batch(
    h: *mut mdl_loader,
    ids: *mut *const u64,
    data: *mut *const c_void,
    offsets: *mut *const u64,
    n: *mut usize,
) -> mdl_status {
    boundary("mdl_next_batch", || {
        // The batch stays valid until the next call on h: the loader owns its buffers.
        let (ids_ptr, data_ptr, offsets_ptr, count) = with_loader(h, Call::Collective, |loader| {
            Ok(match loader.next_batch()? {
                Some(b) => (b.ids.as_ptr(), b.data.as_ptr() as *const c_void, b.offsets.as_ptr(), b.ids.len()),
                None => (std::ptr::null(), std::ptr::null(), std::ptr::null(), 0),
            })
        })?;
        // SAFETY: each out-pointer is checked and points to a writable pointer or size_t.
        unsafe {
            *args::out(ids, "ids")? = ids_ptr;
            *args::out(data, "data")? = data_ptr;
            *args::out(offsets, "offsets")? = offsets_ptr;
            *args::out(n, "n")? = count;
        }
        Ok(())
    })
}

/// Collective. Resume a checkpointed run: the next mdl_next_batch returns step `step`
/// of the current epoch (0-based; step == the number of steps is the end), exactly as
/// an uninterrupted run would have. The same step on every rank (checked).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_epoch_seek(h: *mut mdl_loader, step: u64) -> mdl_status {
    boundary("mdl_epoch_seek", || with_loader(h, Call::Collective, |loader| loader.epoch_seek(step)))
}

/// Batches fetched ahead while the caller computes (0 = none, the default; at most
/// MDL_MAX_PREFETCH, more is MDL_ERR_INVALID_ARG). Local;
/// takes effect at the next mdl_epoch_begin or mdl_epoch_seek and must be the same on
/// every rank (checked there). Prefetch runs on a thread of the library's own and
/// needs MPI initialised with MPI_THREAD_MULTIPLE; otherwise epochs run without
/// prefetch and the log says so once. During an epoch, mdl_set_backend is refused
/// (MDL_ERR_STATE).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_set_prefetch(h: *mut mdl_loader, depth: u32) -> mdl_status {
    boundary("mdl_set_prefetch", || with_loader(h, Call::LocalSetter, |loader| loader.set_prefetch(depth)))
}

/// Collective. Frees everything and sets *h = NULL. NULL or *h == NULL is a no-op.
/// A loader closed at MPI_Finalize (see docs/mpi-behaviours.md) or one that failed with
/// MDL_ERR_PANIC or MDL_ERR_TIMEOUT is freed without communicating. When another rank
/// is in a different call, MDL_ERR_CALL_MISMATCH on every rank of both calls, nothing
/// is done and *h stays: finalize again once every rank does. Must not run while
/// another thread is inside a call on the same handle.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_finalize(h: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_finalize", || {
        // SAFETY: a non-NULL h points to a handle variable (caller's contract).
        let Some(slot) = (unsafe { h.as_mut() }) else { return Ok(()) };
        if slot.is_null() {
            return Ok(());
        }
        // SAFETY: *slot came from Box::into_raw in mdl_init and stays live until released below.
        let agreed = unsafe { &**slot }.agree_to_close();
        if agreed.as_ref().is_err_and(|err| err.status == mdl_status::MDL_ERR_CALL_MISMATCH) {
            return agreed; // nothing done: *h stays, for a finalize on every rank
        }
        // SAFETY: *slot came from Box::into_raw in mdl_init and is released only here.
        let handle = unsafe { Box::from_raw(*slot) };
        *slot = std::ptr::null_mut();
        handle.close(agreed)
    })
}

/// Local. Stops the library's progress threads (`MDL_PROGRESS`) calling MPI, for good
/// and in every loader of the process, waiting for a call under way; never fails. Call
/// it right before MPI_Finalize when a loader may still be open there: MPI forbids
/// other threads in MPI while MPI_Finalize runs, and MPI_Finalize reaches the hook that
/// closes open loaders only after it has begun (MPICH 4.0 first stops guarding its
/// state against threads, and a progress thread's call under way then left its lock
/// held: an abort in MPI_Finalize, now and then). mdl_finalize of every loader makes it
/// unnecessary. Only right before MPI_Finalize: a loader open at the call that fetches
/// after it serves peers' gets only while its rank is inside MPI (on MPICH, a peer's get
/// then waits until this rank calls MPI again, for ever if it waits in another
/// library); loaders made after it take the path of a rank without the thread (their
/// one-sided steps end in a barrier). A prefetching epoch's thread is not stopped by
/// it: end the epoch (or finalize its loader) before MPI_Finalize.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_before_mpi_finalize() {
    crate::mpi::stop_progress_threads();
}

/// This rank's statistics as a JSON object, NUL-terminated and truncated to len; returns
/// the full length (without the NUL), or 0 when h is NULL or MPI is finalised. Local;
/// it answers on a loader that failed with MDL_ERR_PANIC or MDL_ERR_TIMEOUT too. Keys: "rank", "ranks",
/// "backend" (in force), "steps", "onesided" and "collective" (each: "steps",
/// "seconds" this rank spent, "predicted_seconds" and "measured_slowest_seconds" of the
/// slowest rank), "samples", "bytes_local" (own samples), "bytes_remote" (this rank's),
/// "decisions", "probes", "switches", "unsure_decisions" (taken while the engines'
/// predictions lay within the calibration's noise of each other, the other engine not
/// yet measured for such steps), "surprise_probes" (probes taken because the engine in
/// use ran slower than predicted beyond the noise, twice in a row), "node_local" (samples of this rank's node copied
/// from shared memory: "steps", "bytes", "samples", and "seconds" spent copying local
/// and node-local samples), "probe_cost" (the estimator's probes measured so far:
/// "steps", "seconds" of the slowest rank, and "excess_seconds" over what the preferred
/// engine was predicted to take in those steps, negative where a probe found a faster
/// engine), "engine_free_steps" (steps in which no rank had a remote
/// sample), "exchange_rounds" (the collective engine's exchanges of samples: one per
/// collective step unless a step moves more than MDL_MAX_MESSAGE_BYTES to or from some
/// rank), and "calibration" ("source": measured, default, file, or "not needed (one node)" where the node-local path copies every sample,
/// "seconds", "setup_seconds" and "last_probe_seconds" (what of those seconds the budget
/// cannot cut short: the scratch store, and the probe that crossed the budget), "points_onesided",
/// "points_collective", the cost model's parameters, each parameter's jackknife spread
/// over its value ("spread_<name>": the fit repeated with each calibration batch left
/// out; null where it cannot be told) and "noise_onesided"/"noise_collective" (how far,
/// on a log scale, a step may depart from its prediction: the larger of the
/// repetitions' spread and the fit's miss),
/// see docs/estimator.md). The "calibration" object, saved to a file, can be loaded with
/// MDL_CALIBRATION=<file> to skip measuring. Never waits on other ranks, even while a
/// prefetch thread is inside a step (mdl_num_samples and mdl_sample_size neither).
/// While that thread runs, the text may grow between two calls: size the buffer with
/// room to spare and call again while the return value is >= len.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_stats_json(h: *const mdl_loader, buf: *mut c_char, len: usize) -> usize {
    let mut full = 0;
    boundary("mdl_stats_json", || {
        let json = with_published(h, |p| Ok(p.stats_json()))?;
        full = copy_text(&json, buf, len);
        Ok(())
    });
    full
}

/// Collective: the whole job's statistics as one JSON object, the same text on every
/// rank (unlike mdl_stats_json, which is this rank's): "ranks", "backend", "steps",
/// "onesided" and "collective" ("steps", "seconds_max" and "seconds_mean" over the
/// ranks, "predicted_seconds" and "measured_slowest_seconds" of the slowest rank),
/// "samples", "bytes_local" and "bytes_remote" summed over the ranks, "decisions",
/// "probes", "switches", "unsure_decisions" and "surprise_probes" (as in
/// mdl_stats_json: the estimator's, the same on every rank), "node_local" ("bytes" and
/// "samples" copied from the node's shards, summed over the ranks) and
/// "engine_free_steps". Copied into buf as mdl_stats_json does (truncated to len
/// and NUL-terminated; nothing is copied when buf is NULL or len is 0); *needed
/// receives the full length (without the NUL). needed NULL is MDL_ERR_NULL_ARG on that
/// rank, agreed by all. Refused with MDL_ERR_STATE on every rank during a sampler epoch.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_stats_json_job(h: *mut mdl_loader, buf: *mut c_char, len: usize, needed: *mut usize) -> mdl_status {
    boundary("mdl_stats_json_job", || {
        with_loader(h, Call::Collective, |loader| {
            let checks = if needed.is_null() { Err(Error::null_arg("needed")) } else { Ok(()) };
            let json = loader.job_stats_json(checks)?;
            // SAFETY: needed was checked non-NULL (and agreed on) above; the caller
            // passes a writable size_t.
            *unsafe { args::out(needed, "needed") }? = copy_text(&json, buf, len);
            Ok(())
        })
    })
}

/// Copy `text` into a C buffer of `len` bytes, truncated and NUL-terminated; returns
/// the full length. Nothing is written when buf is NULL or len is 0.
fn copy_text(text: &str, buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: the caller passes len writable bytes at buf; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

/// Static text for a status code ("unknown status" for a value outside the enum).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_status_string(s: MdlStatusArg) -> *const c_char {
    let text = mdl_status::from_code(s as i64).map_or("unknown status\0", mdl_status::description);
    text.as_ptr() as *const c_char
}

/// Copies the calling thread's last error message (NUL-terminated, truncated to len)
/// and returns its full length (without the NUL); 0 when no call has failed yet. The
/// message names the call that failed and why. With buf NULL or len 0 nothing is
/// copied, which tells the length to allocate.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_last_error(buf: *mut c_char, len: usize) -> usize {
    with_last_error(|message| copy_text(message, buf, len))
}
