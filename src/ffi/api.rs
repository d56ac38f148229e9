//! The exported C API. Prototypes follow `shared/DESIGN.md` exactly; the reference
//! documentation is these comments, which cbindgen copies into `include/mdloader.h`.

use super::args::{self, slice, slice_mut};
use super::{boundary, init_logging, with_last_error};
use crate::config::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::loader::{EpochArgs, FetchArgs, Loader};
use crate::mpi::Comm;
use crate::store::ShardView;
use mpi_sys::{MPI_Comm, RSMPI_Fint};
use std::os::raw::{c_char, c_int, c_void};

/// Opaque loader handle. One handle must not be used by two threads at once.
#[allow(non_camel_case_types)]
pub struct mdl_loader {
    loader: Loader,
}

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

fn loader<'a>(h: *const mdl_loader) -> Result<&'a Loader> {
    // SAFETY: a non-NULL handle comes from mdl_init and is live until mdl_finalize.
    unsafe { h.as_ref() }.map(|h| &h.loader).ok_or_else(|| Error::null_arg("the loader handle"))
}

fn loader_mut<'a>(h: *mut mdl_loader) -> Result<&'a mut Loader> {
    // SAFETY: as in `loader`; the caller does not share a handle between threads.
    unsafe { h.as_mut() }.map(|h| &mut h.loader).ok_or_else(|| Error::null_arg("the loader handle"))
}

fn init_from(comm: Result<MPI_Comm>, out: *mut *mut mdl_loader) -> Result<()> {
    init_logging();
    let handle_out = if out.is_null() { Err(Error::null_arg("out")) } else { Ok(()) };
    let loader = Loader::init(comm?, handle_out)?;
    let handle = Box::into_raw(Box::new(mdl_loader { loader }));
    // SAFETY: checked non-NULL above (and agreed on by all ranks).
    unsafe { *out = handle };
    Ok(())
}

/// Collective over comm. Duplicates comm; MPI must already be initialised. The
/// library never initialises or finalises MPI.
///
/// Environment: `MDL_BACKEND=auto|onesided|collective` (initial backend),
/// `MDL_LOG=error|warn|info|debug|trace` (logging to stderr),
/// `MDL_MAX_MESSAGE_BYTES` (most bytes per MPI message; default 2^31 - 1).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init(comm: MPI_Comm, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init", || init_from(Ok(comm), out))
}

/// The same as mdl_init for Fortran (`comm` with `use mpi`, `comm%MPI_VAL` with
/// `use mpi_f08`) and Python (ctypes + mpi4py `comm.py2f()`).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_init_f(comm: RSMPI_Fint, out: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_init_f", || init_from(Comm::from_fortran(comm), out))
}

/// Collective. This rank's shard: n_samples samples, sample i is
/// data[offsets[i] .. offsets[i+1]); offsets has n_samples + 1 entries,
/// offsets[0] == 0, non-decreasing. Zero-length samples and empty shards are valid
/// (offsets may be NULL when n_samples == 0; data may be NULL when it holds no byte).
/// The data is copied: the caller may free it on return. Global ids are assigned in
/// rank order: rank r's local sample i has id (sum of n_samples on ranks < r) + i.
/// A shard can be registered once per loader.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_register_shard(
    h: *mut mdl_loader,
    data: *const c_void,
    offsets: *const u64,
    n_samples: u64,
) -> mdl_status {
    boundary("mdl_register_shard", || {
        let loader = loader_mut(h)?;
        let shard = (|| {
            let n_offsets = if offsets.is_null() && n_samples == 0 { 0 } else { args::len(n_samples, "n_samples")? + 1 };
            // SAFETY: the caller passes n_samples + 1 offsets.
            let offsets = unsafe { slice(offsets, n_offsets, "offsets") }?;
            let bytes = args::len(offsets.last().copied().unwrap_or(0), "offsets[n_samples]")?;
            // SAFETY: the caller passes offsets[n_samples] bytes of data.
            let data = unsafe { slice(data as *const u8, bytes, "data") }?;
            ShardView::new(data, offsets)
        })();
        loader.register_shard(shard)
    })
}

/// The number of samples over all ranks. Local.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_num_samples(h: *const mdl_loader, out: *mut u64) -> mdl_status {
    boundary("mdl_num_samples", || {
        let n = loader(h)?.num_samples()?;
        // SAFETY: out is checked and points to a writable u64 (caller's contract).
        *unsafe { args::out(out, "out") }? = n;
        Ok(())
    })
}

/// Size in bytes of sample id, known locally without communication.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_sample_size(h: *const mdl_loader, id: u64, out: *mut u64) -> mdl_status {
    boundary("mdl_sample_size", || {
        let size = loader(h)?.sample_size(id)?;
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
/// out_offsets[n] holds the size needed.
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
        let loader = loader_mut(h)?;
        let fetch = (|| {
            // SAFETY: the caller passes n ids, out_cap bytes at out and n + 1 offsets.
            unsafe {
                Ok(FetchArgs {
                    ids: slice(ids, n, "ids")?,
                    out_offsets: slice_mut(out_offsets, n + 1, "out_offsets")?,
                    out: slice_mut(out as *mut u8, args::len(out_cap, "out_cap")?, "out")?,
                    known_batches: None,
                })
            }
        })();
        loader.fetch_batch(fetch)
    })
}

/// Force a backend or return to AUTO. Local; takes effect at the next fetch, and must
/// be set the same on every rank (a mismatch makes that fetch fail on every rank with
/// MDL_ERR_INVALID_ARG, not hang). A value outside the enum is MDL_ERR_INVALID_ARG.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_set_backend(h: *mut mdl_loader, b: MdlBackendArg) -> mdl_status {
    boundary("mdl_set_backend", || {
        let loader = loader_mut(h)?;
        let backend = Backend::from_code(b as i64)
            .ok_or_else(|| Error::invalid(format!("{b} is not an mdl_backend value")))?;
        loader.set_backend(backend)
    })
}

/// Collective. Starts an epoch of the built-in sampler. The epoch's order is a
/// permutation of all global ids drawn from (seed, epoch) (identity when shuffle == 0),
/// identical on every rank whatever the engine, the MPI or the number of ranks; the
/// algorithm is documented in the README so that it can be reproduced elsewhere. Every
/// rank gets the same number of samples, as PyTorch's DistributedSampler: ceil(N / P)
/// padded by wrapping around, or floor(N / P) with the remainder dropped when
/// drop_last != 0; rank r takes positions r, r + P, r + 2P, ... of the order. Batches
/// hold batch_size samples (the last one may hold fewer), so every rank has the same
/// number of steps. All arguments must be the same on every rank (checked). Stops any
/// epoch in progress. mdl_fetch_batch is refused until this epoch ends.
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
        loader_mut(h)?.epoch_begin(args)
    })
}

/// Collective. This rank's next batch, in loader-owned memory valid until the next
/// call on h: *n samples, their ids, their bytes and n + 1 offsets (sample ids[k] is
/// data[offsets[k] .. offsets[k+1])). *n == 0 on every rank at once marks the end of
/// the epoch. If an out-pointer is NULL the step is still taken (so that the ranks stay
/// in step) and MDL_ERR_NULL_ARG returned.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_next_batch(
    h: *mut mdl_loader,
    ids: *mut *const u64,
    data: *mut *const c_void,
    offsets: *mut *const u64,
    n: *mut usize,
) -> mdl_status {
    boundary("mdl_next_batch", || {
        let batch = loader_mut(h)?.next_batch()?;
        let (ids_ptr, data_ptr, offsets_ptr, count) = match batch {
            Some(b) => (b.ids.as_ptr(), b.data.as_ptr() as *const c_void, b.offsets.as_ptr(), b.ids.len()),
            None => (std::ptr::null(), std::ptr::null(), std::ptr::null(), 0),
        };
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
    boundary("mdl_epoch_seek", || loader_mut(h)?.epoch_seek(step))
}

/// Batches fetched ahead while the caller computes (0 = none, the default). Local;
/// takes effect at the next mdl_epoch_begin or mdl_epoch_seek and must be the same on
/// every rank (checked there). Prefetch runs on a thread of the library's own and
/// needs MPI initialised with MPI_THREAD_MULTIPLE; otherwise epochs run without
/// prefetch and the log says so once. While an epoch prefetches, mdl_set_backend is
/// refused (MDL_ERR_STATE).
#[unsafe(no_mangle)]
pub extern "C" fn mdl_set_prefetch(h: *mut mdl_loader, depth: u32) -> mdl_status {
    boundary("mdl_set_prefetch", || {
        loader_mut(h)?.set_prefetch(depth);
        Ok(())
    })
}

/// Collective. Frees everything and sets *h = NULL. NULL or *h == NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_finalize(h: *mut *mut mdl_loader) -> mdl_status {
    boundary("mdl_finalize", || {
        // SAFETY: a non-NULL h points to a handle variable (caller's contract).
        let Some(slot) = (unsafe { h.as_mut() }) else { return Ok(()) };
        if slot.is_null() {
            return Ok(());
        }
        // SAFETY: *slot came from Box::into_raw in mdl_init and is released only here.
        let handle = unsafe { Box::from_raw(*slot) };
        *slot = std::ptr::null_mut();
        handle.loader.finalize()
    })
}

/// This rank's statistics as a JSON object, NUL-terminated and truncated to len; returns
/// the full length (without the NUL), or 0 when h is NULL. Local. Keys: "rank", "ranks",
/// "backend" (in force), "steps", "onesided" and "collective" (each: "steps",
/// "seconds" this rank spent, "predicted_seconds" and "measured_slowest_seconds" of the
/// slowest rank), "samples", "bytes_local", "bytes_remote" (this rank's), "decisions",
/// "probes", "switches", and "calibration" ("source": measured, default or file,
/// "seconds", "points_onesided", "points_collective" and the cost model's parameters,
/// see README). The "calibration" object, saved to a file, can be loaded with
/// MDL_CALIBRATION=<file> to skip measuring.
#[unsafe(no_mangle)]
pub extern "C" fn mdl_stats_json(h: *const mdl_loader, buf: *mut c_char, len: usize) -> usize {
    let mut full = 0;
    boundary("mdl_stats_json", || {
        let json = loader(h)?.stats_json();
        full = copy_text(&json, buf, len);
        Ok(())
    });
    full
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
