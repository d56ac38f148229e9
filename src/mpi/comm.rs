//! The library's own communicator: a duplicate of the host's, with errors returned.

use super::{MAX_COUNT, WaitPolicy, check, ffi, large_count::PeerTypes, to_count, wait::{complete, watched}};
use crate::error::mdl_status;
use std::borrow::Cow;
use crate::error::{Error, Result};
use std::os::raw::{c_int, c_void};

/// Element types that cross MPI in this library.
pub trait Datatype: Copy + Default {
    fn mpi_type() -> ffi::MPI_Datatype;
}

macro_rules! datatype {
    ($t:ty, $mpi:ident) => {
        impl Datatype for $t {
            fn mpi_type() -> ffi::MPI_Datatype {
                // SAFETY: reading an extern constant that mpi-sys exports.
                unsafe { ffi::$mpi }
            }
        }
    };
}
datatype!(u8, RSMPI_UINT8_T);
datatype!(u64, RSMPI_UINT64_T);
datatype!(f64, RSMPI_DOUBLE);

/// Which call an all-to-all exchange takes: every rank must take the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountWidth {
    /// `MPI_Alltoallv`: every count and displacement fits a C `int`.
    Int,
    /// `MPI_Alltoallw` with a derived type per peer: any size.
    Large,
}

impl CountWidth {
    /// For an exchange in which no rank sends or receives more than `most_bytes`
    /// bytes (a figure every rank agreed on): then every part and displacement of
    /// every rank, in bytes or in 8-byte ids, is at most that.
    pub fn for_most_bytes(most_bytes: u64) -> CountWidth {
        if most_bytes <= MAX_COUNT { CountWidth::Int } else { CountWidth::Large }
    }
}

/// An owned duplicate of a host communicator. Freed by [`Comm::free`] (collective).
pub struct Comm {
    raw: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    policy: WaitPolicy,
}

// SAFETY: an MPI communicator handle may be used from any thread as long as calls on it
// are not concurrent; the loader serialises them.
unsafe impl Send for Comm {}

impl Comm {
    /// Collective over `host`: duplicate it and make errors on the duplicate return codes.
    /// `watchdog_seconds`: this rank's own `MDL_WATCHDOG`, for the waits before the
    /// ranks agree on a policy (it steers no communication).
    pub fn duplicate(host: ffi::MPI_Comm, watchdog_seconds: f64) -> Result<Comm> {
        if !super::is_usable() {
            return Err(Error::state("MPI is not initialised (or already finalised)"));
        }
        // SAFETY: reading an extern constant that mpi-sys exports.
        if host == unsafe { ffi::RSMPI_COMM_NULL } {
            return Err(Error::invalid("the communicator is MPI_COMM_NULL"));
        }
        check_handle(host)?;
        // SAFETY: `mem::zeroed` is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: host is a communicator handle from the caller (checked valid above);
        // raw receives the copy.
        // (Under the watchdog: a rank whose peers make another call waits here.)
        let policy = WaitPolicy::unagreed(watchdog_seconds);
        let duplicated = watched(&policy, "MPI_Comm_dup", || unsafe { ffi::MPI_Comm_dup(host, &mut raw) });
        check(duplicated, "MPI_Comm_dup")?;
        let comm = Comm { raw, rank: 0, size: 0, policy };
        // SAFETY: comm.raw is the communicator just created.
        check(
            unsafe { ffi::MPI_Comm_set_errhandler(comm.raw, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_Comm_set_errhandler",
        )?;
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: comm.raw is valid; the out-pointers are local variables.
        unsafe {
            check(ffi::MPI_Comm_rank(comm.raw, &mut rank), "MPI_Comm_rank")?;
            check(ffi::MPI_Comm_size(comm.raw, &mut size), "MPI_Comm_size")?;
        }
        Ok(Comm { rank: rank as usize, size: size as usize, ..comm })
    }

    /// The C handle of a Fortran communicator (`MPI_Comm_f2c`).
    pub fn from_fortran(handle: ffi::RSMPI_Fint) -> Result<ffi::MPI_Comm> {
        if !super::is_usable() {
            return Err(Error::state("MPI is not initialised (or already finalised)"));
        }
        // SAFETY: MPI_Comm_f2c accepts any integer and returns a handle (or COMM_NULL).
        Ok(unsafe { ffi::RSMPI_Comm_f2c(handle) })
    }

    /// Collective: how many ranks of this communicator share this rank's machine.
    /// `machine_key` names the machine (`node::machine_key`); when every rank has one,
    /// ranks with equal keys are counted. Otherwise (any rank without a key, so all
    /// ranks take the same path) MPI's idea of a node is used, which launchers can
    /// split within one machine (network namespaces, `MPIR_CVAR_NOLOCAL=1`).
    pub fn ranks_on_node(&self, machine_key: Option<u64>) -> Result<usize> {
        let mine = machine_key.unwrap_or(0);
        let keys = self.allgather(mine)?;
        if keys.iter().all(|&k| k != 0) {
            return Ok(keys.iter().filter(|&&k| k == mine).count());
        }
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut node: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: self.raw is valid; node receives a new communicator, freed below.
        check(
            unsafe { ffi::MPI_Comm_split_type(self.raw, ffi::RSMPI_COMM_TYPE_SHARED, 0, ffi::RSMPI_INFO_NULL, &mut node) },
            "MPI_Comm_split_type",
        )?;
        let mut size: c_int = 0;
        // SAFETY: node is the communicator just created; it is freed once and not used after.
        unsafe {
            let sized = check(ffi::MPI_Comm_size(node, &mut size), "MPI_Comm_size");
            check(ffi::MPI_Comm_free(&mut node), "MPI_Comm_free")?;
            sized?;
        }
        Ok(size as usize)
    }

    /// How waits behave from now on; every rank must set the same (agreed at init).
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    pub fn wait_policy(&self) -> &WaitPolicy {
        &self.policy
    }

    /// Collective: the ranks of this communicator that share memory with this one
    /// (MPI's node), as a communicator of their own with the same wait policy.
    pub fn split_shared(&self) -> Result<Comm> {
        // SAFETY: self.raw is valid; the new handle is owned by the returned Comm.
        self.split_with("MPI_Comm_split_type", |new| unsafe {
            ffi::MPI_Comm_split_type(self.raw, ffi::RSMPI_COMM_TYPE_SHARED, self.rank as c_int, ffi::RSMPI_INFO_NULL, new)
        })
        .map(|comm| comm.expect("every rank belongs to its node"))
    }

    /// Collective over this communicator, the ranks of one MPI node (a
    /// [`Comm::split_shared`], split by the caller, which agrees on its outcome): runs
    /// `create`, a collective over the part of a communicator that `part` names (equal
    /// on the part's ranks, distinct between parts), with the parts that share this
    /// node taking turns, in ascending `part`.
    ///
    /// Why: Open MPI 4.1's osc_rdma names the shared-memory file of a new window's
    /// state `osc_rdma.<node>.<job>.<context id>` (osc_sm adds the creating rank; later
    /// Open MPI releases add the process id), and disjoint communicators split from one
    /// parent get the same context id. Two parts of one node creating windows at once
    /// open the same file; their windows then share state and return wrong bytes (seen
    /// with replica groups under load, with "unlink osc_rdma...: No such file" warnings).
    /// Ascending turns cannot deadlock: a part that spans several nodes waits on each
    /// only for smaller parts, and the smallest waits for none.
    ///
    /// A rank waits in the turns' barriers while the node's smaller parts run `create`,
    /// so `MDL_TIMEOUT` must cover their time too; the error says so.
    pub fn one_part_at_a_time<T>(&self, part: u64, create: impl FnOnce() -> T) -> Result<T> {
        let mut parts_here = self.allgather(part)?;
        parts_here.sort_unstable();
        parts_here.dedup();
        let mut create = Some(create);
        let mut created = None;
        for turn in &parts_here {
            if *turn == part {
                created = create.take().map(|create| create());
            }
            self.barrier().map_err(|err| Error {
                message: format!(
                    "waiting for the {} parts of this node (replica groups or emulated nodes) that create their \
                     windows in turns, one after another: {}",
                    parts_here.len(),
                    err.message
                ),
                ..err
            })?;
        }
        Ok(created.expect("every part has its turn"))
    }

    /// Collective: the ranks that pass `member`, ordered by their rank here, as a
    /// communicator of their own (None on the others).
    pub fn split_members(&self, member: bool) -> Result<Option<Comm>> {
        // SAFETY: reading an extern constant that mpi-sys exports.
        let color = if member { 0 } else { unsafe { ffi::RSMPI_UNDEFINED } };
        // SAFETY: self.raw is valid; the new handle is owned by the returned Comm.
        self.split_with("MPI_Comm_split", |new| unsafe { ffi::MPI_Comm_split(self.raw, color, self.rank as c_int, new) })
    }

    /// Collective: the ranks with the same `color`, ordered by their rank here, as a
    /// communicator of their own.
    pub fn split_by(&self, color: u32) -> Result<Comm> {
        let color = c_int::try_from(color).map_err(|_| Error::invalid(format!("split color {color} exceeds an MPI int")))?;
        // SAFETY: self.raw is valid; the new handle is owned by the returned Comm.
        self.split_with("MPI_Comm_split", |new| unsafe { ffi::MPI_Comm_split(self.raw, color, self.rank as c_int, new) })
            .map(|comm| comm.expect("a non-negative color keeps every rank"))
    }

    fn split_with(&self, name: &str, split: impl FnOnce(*mut ffi::MPI_Comm) -> c_int) -> Result<Option<Comm>> {
        // SAFETY: mem::zeroed is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        check(split(&mut raw), name)?;
        // SAFETY: reading an extern constant that mpi-sys exports.
        if raw == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: raw is the communicator just created; the out-pointers are locals.
        unsafe {
            check(ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN), "MPI_Comm_set_errhandler")?;
            check(ffi::MPI_Comm_rank(raw, &mut rank), "MPI_Comm_rank")?;
            check(ffi::MPI_Comm_size(raw, &mut size), "MPI_Comm_size")?;
        }
        Ok(Some(Comm { raw, rank: rank as usize, size: size as usize, policy: self.policy }))
    }

    /// Collective: wait until every rank has arrived.
    pub fn barrier(&self) -> Result<()> {
        // SAFETY (both closures): no buffers.
        complete(&self.policy, "MPI_Barrier", || unsafe { ffi::MPI_Barrier(self.raw) }, |req| unsafe {
            ffi::MPI_Ibarrier(self.raw, req)
        })
    }

    /// Collective: `buf` of rank `root` into `buf` of every rank, in pieces that keep
    /// MPI's counts within `int`.
    pub fn bcast_into<T: Datatype>(&self, root: usize, buf: &mut [T]) -> Result<()> {
        for piece in buf.chunks_mut(1 << 30) {
            let (ptr, count, ty) = (recv_ptr(piece), piece.len() as c_int, T::mpi_type());
            // SAFETY (both closures): piece holds `count` elements on every rank; the
            // call completes before the next piece.
            complete(
                &self.policy,
                "MPI_Bcast",
                || unsafe { ffi::MPI_Bcast(ptr, count, ty, root as c_int, self.raw) },
                |req| unsafe { ffi::MPI_Ibcast(ptr, count, ty, root as c_int, self.raw, req) },
            )?;
        }
        Ok(())
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub(super) fn raw(&self) -> ffi::MPI_Comm {
        self.raw
    }

    /// Element-wise maximum over all ranks.
    pub fn allreduce_max<T: Datatype>(&self, values: &[T]) -> Result<Vec<T>> {
        // SAFETY: reading an extern constant that mpi-sys exports.
        self.allreduce(values, unsafe { ffi::RSMPI_MAX })
    }

    /// Element-wise sum over all ranks.
    pub fn allreduce_sum<T: Datatype>(&self, values: &[T]) -> Result<Vec<T>> {
        // SAFETY: reading an extern constant that mpi-sys exports.
        self.allreduce(values, unsafe { ffi::RSMPI_SUM })
    }

    fn allreduce<T: Datatype>(&self, values: &[T], op: ffi::MPI_Op) -> Result<Vec<T>> {
        let mut out = vec![T::default(); values.len()];
        let count = to_count(values.len() as u64, "allreduce length")?;
        let values = self.sendable(values);
        let (send, recv, ty) = (send_ptr(&values), recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): both buffers hold `count` elements of T and outlive the
        // call, which `complete` finishes before returning.
        let done = complete(
            &self.policy,
            "MPI_Allreduce",
            || unsafe { ffi::MPI_Allreduce(send, recv, count, ty, op, self.raw) },
            |req| unsafe { ffi::MPI_Iallreduce(send, recv, count, ty, op, self.raw, req) },
        );
        keep_alive_on_timeout(done, out, values)
    }

    /// Every rank's `value`, in rank order.
    pub fn allgather<T: Datatype>(&self, value: T) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.size];
        let value = Cow::Owned(vec![value]);
        let (send, recv, ty) = (send_ptr(&value), recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): one element is sent, `size` are received into `out`.
        let done = complete(
            &self.policy,
            "MPI_Allgather",
            || unsafe { ffi::MPI_Allgather(send, 1, ty, recv, 1, ty, self.raw) },
            |req| unsafe { ffi::MPI_Iallgather(send, 1, ty, recv, 1, ty, self.raw, req) },
        );
        keep_alive_on_timeout(done, out, value)
    }

    /// The concatenation of every rank's `local`, in rank order, into `out`, laid out
    /// as `layout` says (rank r's part at its displacement).
    pub fn allgatherv_into<T: Datatype>(&self, local: &[T], layout: &GathervLayout, out: &mut [T]) -> Result<()> {
        assert_eq!(layout.total, out.len() as u64, "the layout describes the output");
        assert_eq!(layout.counts[self.rank] as usize, local.len(), "this rank's part has its count");
        let (send, recv, ty) = (send_ptr(local), recv_ptr(out), T::mpi_type());
        let (count, rc, rd) = (layout.counts[self.rank], layout.counts.as_ptr(), layout.displs.as_ptr());
        // SAFETY (both closures): counts and displacements describe `out` exactly (checked
        // by GathervLayout::new and the assertions above); local has counts[rank] elements.
        let done = complete(
            &self.policy,
            "MPI_Allgatherv",
            || unsafe { ffi::MPI_Allgatherv(send, count, ty, recv, rc, rd, ty, self.raw) },
            |req| unsafe { ffi::MPI_Iallgatherv(send, count, ty, recv, rc, rd, ty, self.raw, req) },
        );
        // After a timeout MPI may still use `layout` and `out`: the caller leaks them.
        done
    }

    /// The same number of elements k to and from every peer: `send[p * k..(p + 1) * k]`
    /// goes to rank p, and the same part of the result came from p.
    pub fn alltoall<T: Datatype>(&self, send: &[T]) -> Result<Vec<T>> {
        assert!(send.len().is_multiple_of(self.size), "alltoall takes the same number of elements for every rank");
        let per_rank = to_count((send.len() / self.size) as u64, "alltoall elements per rank")?;
        let mut out = vec![T::default(); send.len()];
        let send = self.sendable(send);
        let (sp, rp, ty) = (send_ptr(&send), recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): both buffers hold `per_rank` elements per rank.
        let done = complete(
            &self.policy,
            "MPI_Alltoall",
            || unsafe { ffi::MPI_Alltoall(sp, per_rank, ty, rp, per_rank, ty, self.raw) },
            |req| unsafe { ffi::MPI_Ialltoall(sp, per_rank, ty, rp, per_rank, ty, self.raw, req) },
        );
        keep_alive_on_timeout(done, out, send)
    }

    /// `MPI_Alltoallv`: `send` is cut into consecutive parts of `send_counts[p]` elements
    /// for rank p; `recv` receives consecutive parts of `recv_counts[p]` from rank p.
    /// With [`CountWidth::Large`] the same exchange runs as an `MPI_Alltoallw` with a
    /// derived type per peer ([`PeerTypes`]), whatever the size. `width` must be the
    /// same on every rank (MPI matches a collective by its call): the caller takes it
    /// from agreed figures, never from this rank's counts alone. With
    /// [`CountWidth::Int`], a count or displacement beyond `int` is a clear error.
    ///
    /// After a timeout (`MDL_TIMEOUT`) MPI may still read `send` and write `recv` when
    /// the late peers arrive: the caller must leak both. Not copied here, unlike the
    /// small collectives' values: a copy of a step's whole send buffer doubled its
    /// memory and aborted the process where the memory was short.
    pub fn alltoallv<T: Datatype>(
        &self,
        send: &[T],
        send_counts: &[u64],
        recv: &mut [T],
        recv_counts: &[u64],
        width: CountWidth,
    ) -> Result<()> {
        assert_eq!(send_counts.iter().sum::<u64>(), send.len() as u64);
        assert_eq!(recv_counts.iter().sum::<u64>(), recv.len() as u64);
        if width == CountWidth::Large {
            return self.alltoallv_large(send, send_counts, recv, recv_counts);
        }
        let int_layout = |counts: &[u64], what: &str| -> Result<(Vec<c_int>, Vec<c_int>)> {
            let counts = counts.iter().map(|&c| to_count(c, what)).collect::<Result<Vec<_>>>()?;
            let displs = displacements(&counts, what)?;
            Ok((counts, displs))
        };
        let send_layout = int_layout(send_counts, "alltoallv send part or total")?;
        let recv_layout = int_layout(recv_counts, "alltoallv receive part or total")?;
        self.alltoallv_int(send, send_layout, recv, recv_layout)
    }

    fn alltoallv_int<T: Datatype>(
        &self,
        send: &[T],
        (scounts, sdispls): (Vec<c_int>, Vec<c_int>),
        recv: &mut [T],
        (rcounts, rdispls): (Vec<c_int>, Vec<c_int>),
    ) -> Result<()> {
        let (sp, rp, ty) = (send_ptr(send), recv_ptr(recv), T::mpi_type());
        let (sc, sd, rc, rd) = (scounts.as_ptr(), sdispls.as_ptr(), rcounts.as_ptr(), rdispls.as_ptr());
        // SAFETY (both closures): the counts sum to the buffers' lengths (checked by
        // the caller), so every part lies within its buffer.
        let done = complete(
            &self.policy,
            "MPI_Alltoallv",
            || unsafe { ffi::MPI_Alltoallv(sp, sc, sd, ty, rp, rc, rd, ty, self.raw) },
            |req| unsafe { ffi::MPI_Ialltoallv(sp, sc, sd, ty, rp, rc, rd, ty, self.raw, req) },
        );
        if timed_out(&done) {
            // MPI may still read the counts when the late peers arrive; `send` and
            // `recv` are the caller's to keep alive.
            std::mem::forget((scounts, sdispls, rcounts, rdispls));
        }
        done
    }

    /// The exchange of [`Comm::alltoallv`] for parts beyond `int` counts.
    fn alltoallv_large<T: Datatype>(
        &self,
        send: &[T],
        send_counts: &[u64],
        recv: &mut [T],
        recv_counts: &[u64],
    ) -> Result<()> {
        let in_bytes = |counts: &[u64]| -> Vec<u64> { counts.iter().map(|&c| c * size_of::<T>() as u64).collect() };
        let types = PeerTypes::consecutive(&in_bytes(send_counts))
            .and_then(|send| PeerTypes::consecutive(&in_bytes(recv_counts)).map(|recv| (send, recv)));
        // Making a type can fail on one rank alone (MPI short of memory), after the
        // step's agreement: every rank learns it before any enters the exchange, which
        // would wait for that rank for ever. One all-reduce of one value, on a path
        // that moves parts of 2 GiB or more.
        let failed_somewhere = self.allreduce_max(&[u8::from(types.is_err())])?[0] != 0;
        let (send_types, recv_types) = match types {
            Err(err) => return Err(err),
            Ok(_) if failed_somewhere => {
                return Err(Error::new(
                    mdl_status::MDL_ERR_REMOTE,
                    "another rank could not make the MPI datatypes of an exchange beyond int counts",
                ));
            }
            Ok(types) => types,
        };
        let (sp, rp) = (send_ptr(send), recv_ptr(recv));
        let (sc, sd, st) = (send_types.counts.as_ptr(), send_types.displacements.as_ptr(), send_types.as_ptr());
        let (rc, rd, rt) = (recv_types.counts.as_ptr(), recv_types.displacements.as_ptr(), recv_types.as_ptr());
        // SAFETY (both closures): each peer's type covers its part of the buffer, and
        // the parts sum to the buffers' lengths (checked by the caller).
        let done = complete(
            &self.policy,
            "MPI_Alltoallw",
            || unsafe { ffi::MPI_Alltoallw(sp, sc, sd, st, rp, rc, rd, rt, self.raw) },
            |req| unsafe { ffi::MPI_Ialltoallw(sp, sc, sd, st, rp, rc, rd, rt, self.raw, req) },
        );
        if timed_out(&done) {
            // MPI may still use the types and counts when the late peers arrive.
            std::mem::forget((send_types, recv_types));
        }
        done
    }

    /// What a collective sends from: the caller's values, or, when a wait may time out,
    /// a copy that can outlive the call (MPI reads it when the late peers arrive).
    fn sendable<'a, T: Clone>(&self, values: &'a [T]) -> Cow<'a, [T]> {
        if self.policy.timeout_seconds > 0.0 { Cow::Owned(values.to_vec()) } else { Cow::Borrowed(values) }
    }

    /// Collective: free the communicator. Skipped when MPI is already finalised.
    pub fn free(mut self) -> Result<()> {
        if !super::is_usable() {
            return Ok(());
        }
        // SAFETY: raw is the communicator this value owns; it is not used afterwards.
        check(unsafe { ffi::MPI_Comm_free(&mut self.raw) }, "MPI_Comm_free")
    }
}

/// A buffer's address for MPI. An empty Rust slice has a dangling address such as 0x1,
/// which Open MPI takes for `MPI_IN_PLACE` (`(void *) 1`), so empty buffers get the
/// address of a real (never accessed) location instead: one for send buffers and
/// another for receive buffers, because Open MPI's nonblocking collectives also treat
/// `sendbuf == recvbuf` as in place, schedule differently on that rank alone, and the
/// ranks' collectives stop matching (tests/c/repro/ialltoallv_aliased_empty_buffers.c).
fn send_ptr<T>(buf: &[T]) -> *const c_void {
    static EMPTY_SEND: u64 = 0;
    if buf.is_empty() { &EMPTY_SEND as *const u64 as *const c_void } else { buf.as_ptr() as *const c_void }
}

fn recv_ptr<T>(buf: &mut [T]) -> *mut c_void {
    static EMPTY_RECV: u64 = u64::MAX; // a different value: never merged with EMPTY_SEND
    if buf.is_empty() { &EMPTY_RECV as *const u64 as *mut c_void } else { buf.as_mut_ptr() as *mut c_void }
}

/// Counts and displacements of an `MPI_Allgatherv`, checked against MPI's `int`
/// limits before any rank communicates.
pub struct GathervLayout {
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    pub total: u64,
}

impl GathervLayout {
    pub fn new(counts: &[u64]) -> Result<GathervLayout> {
        let counts = counts.iter().map(|&c| to_count(c, "allgatherv part")).collect::<Result<Vec<_>>>()?;
        let displs = displacements(&counts, "allgatherv total")?;
        let total = counts.iter().map(|&c| c as u64).sum();
        Ok(GathervLayout { counts, displs, total })
    }
}

/// The result of a collective into `out`, or its error. After a timeout MPI may still
/// write into `out` and read `sent` when the late peers arrive, so both are leaked
/// instead of freed (`sent` is owned whenever a timeout is possible, see
/// [`Comm::sendable`]).
fn keep_alive_on_timeout<T: Clone>(done: Result<()>, out: Vec<T>, sent: Cow<[T]>) -> Result<Vec<T>> {
    match done {
        Ok(()) => Ok(out),
        Err(err) => {
            if err.status == mdl_status::MDL_ERR_TIMEOUT {
                std::mem::forget((out, sent));
            }
            Err(err)
        }
    }
}

/// Whether a wait gave up with its request still pending (`MDL_TIMEOUT`): then MPI may
/// still use every buffer of the call, which must be leaked, never freed.
pub fn timed_out<T>(result: &Result<T>) -> bool {
    result.as_ref().is_err_and(|err| err.status == mdl_status::MDL_ERR_TIMEOUT)
}

/// Check that `host` is a valid communicator without letting an invalid one reach the
/// host's error handler, which is usually fatal (an invalid Fortran handle from
/// `mdl_init_f`, say). MPI reports an invalid communicator argument on
/// `MPI_COMM_WORLD`'s handler (on `MPI_COMM_SELF`'s in some MPI-4 implementations),
/// so both return errors for the duration of one local call, then get their own
/// handlers back. Local: a handle invalid on one rank only fails there alone.
fn check_handle(host: ffi::MPI_Comm) -> Result<()> {
    // SAFETY: reading extern constants; the handler handles are fetched, set and
    // restored on the predefined communicators, and freed as the standard requires.
    unsafe {
        let predefined = [ffi::RSMPI_COMM_WORLD, ffi::RSMPI_COMM_SELF];
        let mut saved: [ffi::MPI_Errhandler; 2] = std::mem::zeroed();
        for (comm, handler) in predefined.iter().zip(saved.iter_mut()) {
            check(ffi::MPI_Comm_get_errhandler(*comm, handler), "MPI_Comm_get_errhandler")?;
            ffi::MPI_Comm_set_errhandler(*comm, ffi::RSMPI_ERRORS_RETURN);
        }
        let mut size: c_int = 0;
        let rc = ffi::MPI_Comm_size(host, &mut size);
        for (comm, handler) in predefined.iter().zip(saved.iter_mut()) {
            ffi::MPI_Comm_set_errhandler(*comm, *handler);
            ffi::MPI_Errhandler_free(handler);
        }
        check(rc, "MPI_Comm_size").map_err(|err| {
            Error::invalid(format!("the communicator is not a valid handle ({})", err.message))
        })?;
        // An intercommunicator passes every call above and then crashes or hangs the
        // node split (Open MPI segfaults in MPI_Comm_split_type, MPICH waits in MPI_Bcast).
        let mut inter: c_int = 0;
        check(ffi::MPI_Comm_test_inter(host, &mut inter), "MPI_Comm_test_inter")?;
        if inter != 0 {
            return Err(Error::invalid(
                "the communicator is an intercommunicator; MDLoader needs an intracommunicator (MPI_Intercomm_merge makes one)",
            ));
        }
        Ok(())
    }
}

/// A request handle that is "no request".
pub(super) fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an extern constant that mpi-sys exports.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// Exclusive prefix sums of `counts`, failing when a displacement exceeds `int`.
fn displacements(counts: &[c_int], what: &str) -> Result<Vec<c_int>> {
    let mut displs = Vec::with_capacity(counts.len());
    let mut at: u64 = 0;
    for &c in counts {
        displs.push(to_count(at, what)?);
        at += c as u64;
    }
    Ok(displs)
}
