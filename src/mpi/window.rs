//! The shard's RMA window: memory from `MPI_Win_allocate`, one access epoch for life.
//!
//! `MPI_Win_allocate` (not `MPI_Win_create`) because it is the only kind of window for
//! which MPICH takes its shared-memory fast path, it makes Open MPI's gets 3-7x faster
//! on shared memory, and it works with Open MPI's default one-sided component at one rank. The shard never changes after registration, so one passive-target
//! epoch (`MPI_Win_lock_all`) is opened at creation and held until the window is freed:
//! a fetch pays for gets and their completion only, never for locks.

use super::{Comm, MAX_COUNT, WaitPolicy, check, comm::null_request, ffi, to_count, wait::{wait_all, watched}};
use crate::error::{Error, Result};
use std::os::raw::{c_int, c_void};

/// Window sizes are rounded up to a multiple of this. MPICH 4.0.2 (ch4, shared memory)
/// returns wrong bytes from a rank's window when the window of the rank before it is not
/// a multiple of 16 bytes (measured: 1000 and 4097 fail, 976 and 4096 work); 64 also
/// keeps each shard on its own cache line.
const WINDOW_ALIGN: usize = 64;

/// One read from a remote window into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Get {
    pub target: usize,
    /// Byte offset in the target's window.
    pub target_offset: u64,
    /// Byte offset in the destination buffer.
    pub dest_offset: u64,
    pub len: u64,
}

/// What bounds the gets of one step (`MDL_MAX_MESSAGE_BYTES`, `MDL_MAX_GETS_IN_FLIGHT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetLimits {
    /// Most bytes one get may carry.
    pub max_message: u64,
    /// Most gets outstanding at once.
    pub max_in_flight: u64,
}

/// How a window's memory is allocated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// `MPI_Win_allocate`: RMA only.
    Private,
    /// `MPI_Win_allocate_shared`: also mapped into the other ranks of the node.
    Shared,
}

/// Another rank's shard mapped into this process (see [`Window::segment`]): read-only
/// memory of a window that the store keeps alive as long as the segment.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    base: *const u8,
    len: usize,
}

// SAFETY: the memory is immutable after registration (published before any read) and
// lives as long as the window the store keeps with it.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// The segment's bytes (its rounded-up size: the shard and up to 63 bytes after).
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: base maps `len` bytes of a live shared window, never written after
        // registration's publish_to_node.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

pub struct Window {
    raw: ffi::MPI_Win,
    base: *mut u8,
    len: usize,
    /// The communicator's wait policy when the window was made.
    policy: WaitPolicy,
    /// Memory this window owns outside MPI ([`Window::create_private`]), released only
    /// after `MPI_Win_free`: a window that is leaked (never freed) leaks it too, as MPI
    /// may still refer to it.
    private: Option<PrivateMemory>,
}

/// Memory from the Rust allocator, aligned like MPI's windows, for
/// [`Window::create_private`]. Allocated apart from the collective call so that a rank
/// without it can fail before any rank enters `MPI_Win_create`.
pub struct PrivateMemory {
    base: *mut u8,
    layout: std::alloc::Layout,
}

impl PrivateMemory {
    /// `len` bytes (at least one, so that the address is MPI's to keep), or
    /// `MDL_ERR_NO_MEMORY`.
    pub fn allocate(len: usize) -> Result<PrivateMemory> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), WINDOW_ALIGN)
            .map_err(|_| Error::no_memory(len as u64))?;
        // SAFETY: the layout's size is not zero.
        let base = unsafe { std::alloc::alloc(layout) };
        if base.is_null() {
            return Err(Error::no_memory(len as u64));
        }
        Ok(PrivateMemory { base, layout })
    }

    /// Give the memory back (never while a window exposes it).
    pub fn release(self) {
        // SAFETY: base was allocated with this layout and is released once.
        unsafe { std::alloc::dealloc(self.base, self.layout) }
    }
}

// SAFETY: the window handle and its memory are used by one thread at a time (the loader
// serialises calls); the memory is not shared with other Rust objects.
unsafe impl Send for Window {}

impl Window {
    /// Collective over `comm`: allocate a window holding a copy of `data` and open the
    /// access epoch to all ranks.
    pub fn allocate(comm: &Comm, data: &[u8]) -> Result<Window> {
        Self::allocate_with(comm, data, Flavor::Private)
    }

    /// Collective over `node`, a communicator of ranks that share memory (MPI's
    /// `MPI_COMM_TYPE_SHARED`): like [`Window::allocate`], in memory every rank of
    /// `node` can read (`MPI_Win_allocate_shared`, which both MPICH and Open MPI serve
    /// from their shared-memory path). See [`Window::segment`].
    pub fn allocate_shared(node: &Comm, data: &[u8]) -> Result<Window> {
        Self::allocate_with(node, data, Flavor::Shared)
    }

    fn allocate_with(comm: &Comm, data: &[u8], flavor: Flavor) -> Result<Window> {
        let size = ffi::MPI_Aint::try_from(data.len().next_multiple_of(WINDOW_ALIGN))
            .map_err(|_| Error::invalid("shard larger than MPI_Aint"))?;
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Win = unsafe { std::mem::zeroed() };
        let baseptr = &mut base as *mut *mut u8 as *mut c_void;
        // SAFETY: baseptr receives the address of `size` bytes owned by the window.
        let rc = unsafe {
            match flavor {
                Flavor::Private => ffi::MPI_Win_allocate(size, 1, ffi::RSMPI_INFO_NULL, comm.raw(), baseptr, &mut raw),
                Flavor::Shared => ffi::MPI_Win_allocate_shared(size, 1, ffi::RSMPI_INFO_NULL, comm.raw(), baseptr, &mut raw),
            }
        };
        check(rc, if flavor == Flavor::Shared { "MPI_Win_allocate_shared" } else { "MPI_Win_allocate" })?;
        let window = Window { raw, base, len: data.len(), policy: *comm.wait_policy(), private: None };
        if !data.is_empty() {
            // SAFETY: the window owns `len` bytes at base; data does not overlap them.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, data.len()) };
        }
        window.open()?;
        Ok(window)
    }

    /// Collective over `comm`: a window over the memory of `shared` (made by
    /// [`Window::allocate_shared`] on a node of `comm`), for gets by the ranks of other
    /// nodes. The memory is exposed in two windows, which MPI allows: it is only read.
    /// `shared` must outlive the new window.
    pub fn create_over(comm: &Comm, shared: &Window) -> Result<Window> {
        let size = ffi::MPI_Aint::try_from(shared.len.next_multiple_of(WINDOW_ALIGN))
            .map_err(|_| Error::invalid("shard larger than MPI_Aint"))?;
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Win = unsafe { std::mem::zeroed() };
        // SAFETY: shared.base holds `size` bytes (the rounded size it was allocated with)
        // for as long as `shared` lives, which the caller keeps longer than this window.
        check(
            unsafe { ffi::MPI_Win_create(shared.base as *mut c_void, size, 1, ffi::RSMPI_INFO_NULL, comm.raw(), &mut raw) },
            "MPI_Win_create",
        )?;
        let window = Window { raw, base: shared.base, len: shared.len, policy: *comm.wait_policy(), private: None };
        window.open()?;
        Ok(window)
    }

    /// Collective over `comm`: a window over a copy of `data` in this process's private
    /// memory (`MPI_Win_create`), for nodes whose shared memory cannot hold the shards
    /// (`store::shm_budget`): MPI then serves gets between ranks of a node without
    /// shared memory, slower but without a memory file system behind it. The memory
    /// is allocated before the collective call, so a rank without it fails alone; the
    /// caller agrees on that before any rank enters `MPI_Win_create`. `memory` holds
    /// at least `data.len()` bytes.
    pub fn create_private(comm: &Comm, memory: PrivateMemory, data: &[u8]) -> Result<Window> {
        assert!(memory.layout.size() >= data.len(), "private window memory smaller than its shard");
        let size = ffi::MPI_Aint::try_from(data.len()).map_err(|_| Error::invalid("shard larger than MPI_Aint"))?;
        // SAFETY: memory holds data.len() bytes that data does not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), memory.base, data.len()) };
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Win = unsafe { std::mem::zeroed() };
        // SAFETY: memory.base holds `size` bytes, owned by the window from here on and
        // released only after MPI_Win_free.
        let created = check(
            unsafe { ffi::MPI_Win_create(memory.base as *mut c_void, size, 1, ffi::RSMPI_INFO_NULL, comm.raw(), &mut raw) },
            "MPI_Win_create",
        );
        if let Err(err) = created {
            memory.release();
            return Err(err);
        }
        let window = Window { raw, base: memory.base, len: data.len(), policy: *comm.wait_policy(), private: Some(memory) };
        window.open()?;
        Ok(window)
    }

    /// Set the error handler and open the access epoch the window keeps for life.
    fn open(&self) -> Result<()> {
        // SAFETY: raw is the window just created.
        check(unsafe { ffi::MPI_Win_set_errhandler(self.raw, ffi::RSMPI_ERRORS_RETURN) }, "MPI_Win_set_errhandler")?;
        // SAFETY: raw is valid; MPI_MODE_NOCHECK because no rank ever takes an
        // exclusive lock on this window.
        check(unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as _, self.raw) }, "MPI_Win_lock_all")?;
        // Make the local stores above visible to RMA in the separate memory model.
        // SAFETY: called inside the passive-target epoch just opened.
        check(unsafe { ffi::MPI_Win_sync(self.raw) }, "MPI_Win_sync")
    }

    /// Collective over `node`, the communicator of a window from
    /// [`Window::allocate_shared`]: make every rank's copy of its shard visible to the
    /// loads of every other rank of the node. This is the MPI memory model's recipe for
    /// shared windows: each rank stored its shard before `MPI_Win_sync`, the node's
    /// barrier orders those stores before the other ranks' second `MPI_Win_sync`, after
    /// which their loads see them. The shards are never written again, so no later
    /// synchronisation is needed.
    pub fn publish_to_node(&self, node: &Comm) -> Result<()> {
        // SAFETY: inside the epoch opened at creation.
        check(unsafe { ffi::MPI_Win_sync(self.raw) }, "MPI_Win_sync")?;
        node.barrier()?;
        // SAFETY: as above.
        check(unsafe { ffi::MPI_Win_sync(self.raw) }, "MPI_Win_sync")
    }

    /// Where rank `rank` of the node keeps its segment of a window from
    /// [`Window::allocate_shared`] (`MPI_Win_shared_query`), readable with loads on
    /// this rank after [`Window::publish_to_node`].
    pub fn segment(&self, rank: usize) -> Result<Segment> {
        let (mut size, mut unit, mut base): (ffi::MPI_Aint, c_int, *mut c_void) = (0, 0, std::ptr::null_mut());
        let baseptr = &mut base as *mut *mut c_void as *mut c_void;
        // SAFETY: raw is a shared window; the out-pointers are locals.
        check(
            unsafe { ffi::MPI_Win_shared_query(self.raw, rank as c_int, &mut size, &mut unit, baseptr) },
            "MPI_Win_shared_query",
        )?;
        let len = usize::try_from(size).unwrap_or(0);
        if len > 0 && base.is_null() {
            let message = format!("MPI_Win_shared_query: rank {rank}'s segment is not mapped");
            return Err(Error::new(crate::error::mdl_status::MDL_ERR_MPI, message));
        }
        Ok(Segment { base: base as *const u8, len })
    }

    /// This rank's own shard bytes.
    pub fn local(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the window owns `len` initialised bytes at base, never written after
        // allocation, and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// Perform every get into `dest` and wait for all of them. A get longer than
    /// `limits.max_message` bytes (at most the MPI count limit) is split, and at most
    /// `limits.max_in_flight` pieces are outstanding at once (MPICH aborts with too
    /// many). With cores to spare (and not on MPICH) the pieces are `MPI_Get` completed
    /// by `MPI_Win_flush_all`; otherwise they are `MPI_Rget` completed by the wait loop
    /// (see `wait`).
    pub fn get_all(&self, gets: &[Get], dest: &mut [u8], limits: GetLimits) -> Result<()> {
        let chunk = limits.max_message.clamp(1, MAX_COUNT);
        let group = usize::try_from(limits.max_in_flight.max(1)).unwrap_or(usize::MAX);
        let flush = self.policy.flush_completes_gets();
        let mut requests = Vec::with_capacity(if flush { 0 } else { group.min(gets.len()) });
        let mut outstanding = 0;
        let issued = (|| {
            for g in gets {
                let end = g.dest_offset.checked_add(g.len);
                assert!(end.is_some_and(|e| e <= dest.len() as u64), "get outside its buffer");
                let mut done = 0;
                while done < g.len {
                    let len = (g.len - done).min(chunk);
                    let disp = ffi::MPI_Aint::try_from(g.target_offset + done)
                        .map_err(|_| Error::invalid("window offset exceeds MPI_Aint"))?;
                    let count = to_count(len, "get length")?;
                    // SAFETY: the destination range lies inside `dest` (asserted above).
                    let origin = unsafe { dest.as_mut_ptr().add((g.dest_offset + done) as usize) } as *mut c_void;
                    self.get(origin, count, g.target as c_int, disp, (!flush).then_some(&mut requests))?;
                    done += len;
                    outstanding += 1;
                    if outstanding == group {
                        self.complete(&mut requests)?;
                        outstanding = 0;
                    }
                }
            }
            Ok(())
        })();
        // Complete what was issued even when issuing failed part way: `dest` must not be
        // released while a get may still write into it. Nothing outstanding, nothing to
        // complete: `MPI_Win_flush_all` visits every rank's window even then (O(P)).
        let completed = if outstanding > 0 { self.complete(&mut requests) } else { Ok(()) };
        issued.and(completed)
    }

    /// Issue one get: `MPI_Rget` whose request joins `requests`, or `MPI_Get` completed
    /// by the next flush when `requests` is None.
    fn get(
        &self,
        origin: *mut c_void,
        count: c_int,
        target: c_int,
        disp: ffi::MPI_Aint,
        requests: Option<&mut Vec<ffi::MPI_Request>>,
    ) -> Result<()> {
        // SAFETY: reading an extern constant that mpi-sys exports.
        let ty = unsafe { ffi::RSMPI_UINT8_T };
        // SAFETY (both calls): origin has `count` writable bytes that outlive the get
        // (get_all completes every get before returning); inside the epoch opened at
        // creation.
        match requests {
            None => check(unsafe { ffi::MPI_Get(origin, count, ty, target, disp, count, ty, self.raw) }, "MPI_Get"),
            Some(requests) => {
                let mut request = null_request();
                let rc = unsafe { ffi::MPI_Rget(origin, count, ty, target, disp, count, ty, self.raw, &mut request) };
                requests.push(request);
                check(rc, "MPI_Rget")
            }
        }
    }

    /// Complete every get issued so far: wait for the requests, or flush when gets were
    /// issued without requests.
    fn complete(&self, requests: &mut Vec<ffi::MPI_Request>) -> Result<()> {
        if !self.policy.flush_completes_gets() {
            let waited = wait_all(&self.policy, requests);
            requests.clear();
            return waited;
        }
        let raw = self.raw;
        // SAFETY: inside the epoch opened at creation.
        check(watched(&self.policy, "MPI_Win_flush_all", || unsafe { ffi::MPI_Win_flush_all(raw) }), "MPI_Win_flush_all")
    }

    /// Collective: close the epoch and free the window. Skipped when MPI is finalised.
    pub fn free(mut self) -> Result<()> {
        free_locked(&mut self.raw, self.policy.watchdog_seconds)?;
        if let Some(memory) = self.private.take() {
            memory.release();
        }
        Ok(())
    }
}

/// Collective: close the access epoch opened at a window's creation and free it (the
/// shard's window and the node-shared index alike). Skipped when MPI is finalised.
/// `MPI_Win_free` waits for the other ranks: under the watchdog (`watchdog_seconds`).
pub(super) fn free_locked(raw: &mut ffi::MPI_Win, watchdog_seconds: f64) -> Result<()> {
    if !super::is_usable() {
        return Ok(());
    }
    // SAFETY: raw is a window its owner locked with MPI_Win_lock_all at creation and
    // does not use afterwards.
    unsafe {
        check(ffi::MPI_Win_unlock_all(*raw), "MPI_Win_unlock_all")?;
        let _watched = super::watchdog::watch("MPI_Win_free", watchdog_seconds);
        check(ffi::MPI_Win_free(raw), "MPI_Win_free")
    }
}
