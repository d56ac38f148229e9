//! An array in memory shared by the ranks of one node: `MPI_Win_allocate_shared` on the
//! node's communicator, all of it in the node leader's segment, every rank reading it
//! through the address `MPI_Win_shared_query` gives.
//!
//! Visibility (the MPI memory model for shared windows): the window is locked once for
//! its life (`MPI_Win_lock_all`), and [`SharedArray::publish`] is `MPI_Win_sync`, a
//! barrier of the node, `MPI_Win_sync`: stores of any rank before it are seen by loads
//! of every rank after it.

use super::{Comm, check, ffi};
use crate::error::{Error, Result};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::AtomicU64;

pub struct SharedArray {
    raw: ffi::MPI_Win,
    base: *mut u64,
    len: usize,
    /// The node communicator's watchdog, for the free.
    watchdog_seconds: f64,
}

// SAFETY: the memory is written only between publish() barriers during registration,
// then only read; the window handle is used by one thread at a time (freeing).
unsafe impl Send for SharedArray {}
unsafe impl Sync for SharedArray {}

impl SharedArray {
    /// Collective over `node`: `len` u64 in the node leader's (rank 0's) segment,
    /// zero-filled. Every rank of the node passes the same `len`.
    pub fn allocate(node: &Comm, len: usize) -> Result<SharedArray> {
        let mine = if node.rank() == 0 { len } else { 0 };
        let bytes = ffi::MPI_Aint::try_from(mine.checked_mul(8).ok_or_else(|| Error::no_memory(u64::MAX))?)
            .map_err(|_| Error::no_memory(mine as u64 * 8))?;
        let mut own_base: *mut c_void = std::ptr::null_mut();
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Win = unsafe { std::mem::zeroed() };
        // SAFETY: node is a valid communicator; MPI writes the base address and handle.
        check(
            unsafe {
                ffi::MPI_Win_allocate_shared(
                    bytes,
                    8,
                    ffi::RSMPI_INFO_NULL,
                    node.raw(),
                    &mut own_base as *mut *mut c_void as *mut c_void,
                    &mut raw,
                )
            },
            "MPI_Win_allocate_shared",
        )?;
        let (mut size, mut unit, mut base): (ffi::MPI_Aint, c_int, *mut c_void) = (0, 0, std::ptr::null_mut());
        // SAFETY: raw is the window just created; the out-pointers are locals.
        let setup = unsafe {
            check(ffi::MPI_Win_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN), "MPI_Win_set_errhandler")
                .and_then(|()| {
                    check(
                        ffi::MPI_Win_shared_query(raw, 0, &mut size, &mut unit, &mut base as *mut *mut c_void as *mut c_void),
                        "MPI_Win_shared_query",
                    )
                })
                .and_then(|()| check(ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, raw), "MPI_Win_lock_all"))
        };
        let array = SharedArray { raw, base: base as *mut u64, len, watchdog_seconds: node.wait_policy().watchdog_seconds };
        setup?;
        if (size as usize) < len * 8 {
            return Err(Error::new(crate::error::mdl_status::MDL_ERR_MPI, "MPI_Win_shared_query: the leader's segment is too small"));
        }
        if node.rank() == 0 && len > 0 {
            // SAFETY: the leader's segment holds len u64 (checked above); nothing reads it yet.
            unsafe { std::ptr::write_bytes(array.base, 0, len) };
        }
        Ok(array)
    }

    /// Collective over `node`: make every rank's stores so far visible to every rank's
    /// loads from now on.
    pub fn publish(&self, node: &Comm) -> Result<()> {
        // SAFETY: inside the epoch opened at allocation.
        check(unsafe { ffi::MPI_Win_sync(self.raw) }, "MPI_Win_sync")?;
        node.barrier()?;
        // SAFETY: as above.
        check(unsafe { ffi::MPI_Win_sync(self.raw) }, "MPI_Win_sync")
    }

    /// The array, for writing between two [`SharedArray::publish`] calls. Ranks must
    /// write disjoint parts.
    ///
    /// # Safety
    /// No other rank or thread may access the same elements until the next publish.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u64] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: base points to len u64 of the leader's segment, mapped on this rank;
        // exclusive access is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// The array as atomics, for ranks whose writes between two publishes may meet in
    /// one element (bits of it each): they OR their bits in with `fetch_or`.
    pub fn as_atomic_slice(&self) -> &[AtomicU64] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: base points to len u64 of the leader's segment, mapped on this rank
        // and aligned for u64 (MPI aligns a segment at least that much), which is
        // AtomicU64's size and alignment; every access until the next publish is
        // atomic (the caller's contract of the publishes).
        unsafe { std::slice::from_raw_parts(self.base as *const AtomicU64, self.len) }
    }

    /// The array, read-only once published.
    pub fn as_slice(&self) -> &[u64] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: base points to len u64 mapped on this rank, no longer written.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// Collective over the node: free the window. Skipped when MPI is finalised.
    pub fn free(mut self) -> Result<()> {
        super::window::free_locked(&mut self.raw, self.watchdog_seconds)
    }
}

impl std::fmt::Debug for SharedArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedArray({} u64)", self.len)
    }
}
