//! Facts about the machine this rank runs on: its cores (for the wait policy,
//! `mpi::wait`), its identity, and the room left in a file system (for shared memory,
//! `store::shm_budget`).

use std::path::Path;

/// The node's online cores. Not this process's affinity mask: a launcher that binds
/// each rank to one core (Open MPI does at two ranks or fewer) does not make the node
/// oversubscribed.
pub fn online_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// A key naming the running kernel, so the same for every process on this machine
/// (also across network namespaces, containers and `MPIR_CVAR_NOLOCAL=1`, which fool
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`) and different between machines: a hash
/// of Linux's boot id. `None` where there is no boot id to read.
pub fn machine_key() -> Option<u64> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot_id = boot_id.trim();
    if boot_id.is_empty() {
        return None;
    }
    Some(fnv1a(boot_id.as_bytes()).max(1)) // 0 means "no key" on the wire
}

/// A key naming the offsets of this process's time namespace (`/proc/self/timens_offsets`:
/// `CLOCK_MONOTONIC` differs by them between namespaces of one kernel, as after a CRIU
/// restore or `unshare -T`). Processes of one machine with equal keys read one
/// [`monotonic_seconds`]. A kernel without time namespaces has no file, and no offsets.
/// 52 bits, so that agreements (in doubles) carry it exactly.
pub fn clock_key() -> u64 {
    fnv1a(&std::fs::read("/proc/self/timens_offsets").unwrap_or_default()) & ((1 << 52) - 1)
}

/// FNV-1a: stable across builds and processes (std's hashers are seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Seconds on this machine's monotonic clock (`CLOCK_MONOTONIC`): one clock for every
/// process of the machine (`MPI_Wtime` need not be), so the times at which ranks of
/// one machine arrive at a step compare directly.
pub fn monotonic_seconds() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// Bytes an unprivileged process may still write to the file system holding `dir`
/// (`statvfs`: free blocks for non-root times the fragment size). `None` where `dir`
/// cannot be examined (it does not exist, or its path holds a NUL byte).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value to be overwritten.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path is NUL-terminated and fs a writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut fs) } != 0 {
        return None;
    }
    Some((fs.f_bavail as u64).saturating_mul(fs.f_frsize as u64))
}

/// Address space this process may still map under its limit (`ulimit -v`,
/// `RLIMIT_AS`): the limit less what it maps now (`/proc/self/statm`). `None`: no limit
/// (or none that can be read).
pub fn address_space_left() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mapped_pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    Some(limit.rlim_cur.saturating_sub(mapped_pages.saturating_mul(page)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_key_is_stable_and_cores_are_counted() {
        assert!(online_cores() >= 1);
        assert_eq!(machine_key(), machine_key());
        assert_ne!(machine_key(), Some(0));
    }

    #[test]
    fn free_bytes_reads_a_file_system_and_refuses_a_missing_directory() {
        assert!(free_bytes(Path::new("/")).is_some());
        assert_eq!(free_bytes(Path::new("/no/such/directory/here")), None);
    }
}
