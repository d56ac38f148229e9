//! The library's own communicator: a duplicate of the host's, with errors returned.

use super::{check, ffi, to_count, wait::complete};
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

/// An owned duplicate of a host communicator. Freed by [`Comm::free`] (collective).
pub struct Comm {
    raw: ffi::MPI_Comm,
    rank: usize,
    size: usize,
}

// SAFETY: an MPI communicator handle may be used from any thread as long as calls on it
// are not concurrent; the loader serialises them.
unsafe impl Send for Comm {}

impl Comm {
    /// Collective over `host`: duplicate it and make errors on the duplicate return codes.
    pub fn duplicate(host: ffi::MPI_Comm) -> Result<Comm> {
        if !super::is_usable() {
            return Err(Error::state("MPI is not initialised (or already finalised)"));
        }
        // SAFETY: reading an extern constant that mpi-sys exports.
        if host == unsafe { ffi::RSMPI_COMM_NULL } {
            return Err(Error::invalid("the communicator is MPI_COMM_NULL"));
        }
        // SAFETY: `mem::zeroed` is a valid placeholder for the handle MPI writes.
        let mut raw: ffi::MPI_Comm = unsafe { std::mem::zeroed() };
        // SAFETY: host is a communicator handle from the caller; raw receives the copy.
        check(unsafe { ffi::MPI_Comm_dup(host, &mut raw) }, "MPI_Comm_dup")?;
        let comm = Comm { raw, rank: 0, size: 0 };
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
        let mut out = vec![T::default(); values.len()];
        let count = to_count(values.len() as u64, "allreduce length")?;
        let (send, recv, ty) = (send_ptr(values), recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): both buffers hold `count` elements of T and outlive the
        // call, which `complete` finishes before returning.
        complete(
            "MPI_Allreduce",
            || unsafe { ffi::MPI_Allreduce(send, recv, count, ty, ffi::RSMPI_MAX, self.raw) },
            |req| unsafe { ffi::MPI_Iallreduce(send, recv, count, ty, ffi::RSMPI_MAX, self.raw, req) },
        )?;
        Ok(out)
    }

    /// Every rank's `value`, in rank order.
    pub fn allgather<T: Datatype>(&self, value: T) -> Result<Vec<T>> {
        let mut out = vec![T::default(); self.size];
        let (send, recv, ty) = (&value as *const T as *const c_void, recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): one element is sent, `size` are received into `out`.
        complete(
            "MPI_Allgather",
            || unsafe { ffi::MPI_Allgather(send, 1, ty, recv, 1, ty, self.raw) },
            |req| unsafe { ffi::MPI_Iallgather(send, 1, ty, recv, 1, ty, self.raw, req) },
        )?;
        Ok(out)
    }

    /// The concatenation of every rank's `local`, in rank order; `counts[r]` is the
    /// length of rank r's part.
    pub fn allgatherv<T: Datatype>(&self, local: &[T], counts: &[u64]) -> Result<Vec<T>> {
        let total: u64 = counts.iter().sum();
        let recv_counts = counts
            .iter()
            .map(|&c| to_count(c, "allgatherv part"))
            .collect::<Result<Vec<_>>>()?;
        let displs = displacements(&recv_counts, "allgatherv total")?;
        let mut out = vec![T::default(); total as usize];
        let count = to_count(local.len() as u64, "allgatherv part")?;
        let (send, recv, ty) = (send_ptr(local), recv_ptr(&mut out), T::mpi_type());
        let (rc, rd) = (recv_counts.as_ptr(), displs.as_ptr());
        // SAFETY (both closures): counts and displacements describe `out` exactly; local
        // has counts[rank] elements.
        complete(
            "MPI_Allgatherv",
            || unsafe { ffi::MPI_Allgatherv(send, count, ty, recv, rc, rd, ty, self.raw) },
            |req| unsafe { ffi::MPI_Iallgatherv(send, count, ty, recv, rc, rd, ty, self.raw, req) },
        )?;
        Ok(out)
    }

    /// One element to and from every peer: `send[p]` goes to rank p, result[p] came from p.
    pub fn alltoall<T: Datatype>(&self, send: &[T]) -> Result<Vec<T>> {
        assert_eq!(send.len(), self.size, "alltoall takes one element per rank");
        let mut out = vec![T::default(); self.size];
        let (sp, rp, ty) = (send_ptr(send), recv_ptr(&mut out), T::mpi_type());
        // SAFETY (both closures): both buffers hold one element per rank.
        complete(
            "MPI_Alltoall",
            || unsafe { ffi::MPI_Alltoall(sp, 1, ty, rp, 1, ty, self.raw) },
            |req| unsafe { ffi::MPI_Ialltoall(sp, 1, ty, rp, 1, ty, self.raw, req) },
        )?;
        Ok(out)
    }

    /// `MPI_Alltoallv`: `send` is cut into consecutive parts of `send_counts[p]` elements
    /// for rank p; `recv` receives consecutive parts of `recv_counts[p]` from rank p.
    /// Fails clearly (never truncates) when a count or displacement exceeds `int`.
    pub fn alltoallv<T: Datatype>(
        &self,
        send: &[T],
        send_counts: &[u64],
        recv: &mut [T],
        recv_counts: &[u64],
    ) -> Result<()> {
        let to_counts = |counts: &[u64]| -> Result<Vec<c_int>> {
            counts.iter().map(|&c| to_count(c, "alltoallv part")).collect()
        };
        let (scounts, rcounts) = (to_counts(send_counts)?, to_counts(recv_counts)?);
        let sdispls = displacements(&scounts, "alltoallv send total")?;
        let rdispls = displacements(&rcounts, "alltoallv receive total")?;
        assert_eq!(send_counts.iter().sum::<u64>(), send.len() as u64);
        assert_eq!(recv_counts.iter().sum::<u64>(), recv.len() as u64);
        let (sp, rp, ty) = (send_ptr(send), recv_ptr(recv), T::mpi_type());
        let (sc, sd, rc, rd) = (scounts.as_ptr(), sdispls.as_ptr(), rcounts.as_ptr(), rdispls.as_ptr());
        // SAFETY (both closures): counts and displacements were checked to lie within
        // both buffers.
        complete(
            "MPI_Alltoallv",
            || unsafe { ffi::MPI_Alltoallv(sp, sc, sd, ty, rp, rc, rd, ty, self.raw) },
            |req| unsafe { ffi::MPI_Ialltoallv(sp, sc, sd, ty, rp, rc, rd, ty, self.raw, req) },
        )
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
