//! The deadline every wait of the library has by default (`MDL_WATCHDOG`, 1800 s), as
//! torch's collectives have theirs: a rank that waits that long for the others in one
//! MPI call is not in a healthy job (a peer is stuck, died, or makes a different call:
//! it left its loop early, or waits in a collective of its own such as the script's
//! `comm.allreduce`). A blocking MPI call cannot give up, so a thread of the library's
//! own watches the waits, says on stderr which call waited in which MPI function and
//! for how long, and ends the job with `MPI_Abort`, which the launcher turns into the
//! end of every rank. That is the one place the library ends a job: a silent hang
//! costs a whole allocation, and torch's watchdog does the same.
//!
//! Waits register here and unregister when they end (a lock and a push: tens of
//! nanoseconds beside the 2-4 us a nonblocking wait would cost every small step, which
//! is why the deadline is not a test loop's, unless `MDL_TIMEOUT` asks for one).
//!
//! The thread must not allocate: its first `malloc` would give it a glibc arena of its
//! own, 64 MiB of address space, which a rank under `ulimit -v` needs for its shard
//! (`tests/run_shm_tests.sh`, address-space-short). Hence a thread of `pthread_create`'s,
//! std's futex mutex (parking_lot allocates a thread's parking data when it waits) and
//! a small stack; its last words (the line before `MPI_Abort`) may allocate.

use super::ffi;
use crate::call;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The watchdog's default: torch's collectives give up after 30 minutes by default, so
/// a job that trains with them never has ranks that far apart at one call; and the
/// slowest healthy wait of the library (a registration whose peers still read their
/// files, a calibration) is minutes, not half an hour, even at thousands of ranks.
pub(crate) const DEFAULT_WATCHDOG_SECONDS: f64 = 1800.0;

struct Waiting {
    id: u64,
    since: Instant,
    deadline: Duration,
    /// The library's call and the MPI function it waits in.
    call: call::Call,
    mpi: &'static str,
}

struct Watched {
    next_id: u64,
    waits: Vec<Waiting>,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched { next_id: 0, waits: Vec::new() });

/// The waits, whatever a thread that panicked while holding them left (they stay
/// consistent: each change is one push or one removal).
fn watched() -> MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A wait under watch; unregistered when dropped.
pub struct Watch(Option<u64>);

/// Watch a wait in `mpi` for `deadline_seconds` (0: not watched).
pub fn watch(mpi: &'static str, deadline_seconds: f64) -> Watch {
    if deadline_seconds <= 0.0 || !start_watchdog() {
        return Watch(None);
    }
    let mut watched = watched();
    let id = watched.next_id;
    watched.next_id += 1;
    let deadline = Duration::from_secs_f64(deadline_seconds);
    watched.waits.push(Waiting { id, since: Instant::now(), deadline, call: call::current(), mpi });
    Watch(Some(id))
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            let mut watched = watched();
            if let Some(at) = watched.waits.iter().position(|w| w.id == id) {
                watched.waits.swap_remove(at);
            }
        }
    }
}

/// The watchdog's stack: it calls nothing deep until the job's last line.
const WATCHDOG_STACK_BYTES: usize = 256 << 10;

/// How often the watchdog looks: often enough that a short deadline (a test's) is
/// kept within a quarter of it, at most once a second.
const MAX_LOOK_INTERVAL: Duration = Duration::from_secs(1);

/// The watchdog thread, started at the first watched wait; false where it cannot be
/// started (then waits are not watched, and the log says so once).
fn start_watchdog() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        let started = spawn_thread_without_allocating();
        if let Err(rc) = started {
            log::warn!("the watchdog thread could not start (pthread_create: {rc}): a stuck collective call will wait for ever");
        }
        started.is_ok()
    })
}

/// A detached thread made with `pthread_create`, not `std::thread`: a std thread
/// records its handle in a thread-local whose destructor's registration allocates, and
/// a thread's first allocation gives it a glibc arena of its own (64 MiB of address
/// space, measured: the whole margin of a rank under `ulimit -v`).
fn spawn_thread_without_allocating() -> Result<(), i32> {
    extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
        // Nothing may unwind into C; the loop itself does not panic.
        let _ = std::panic::catch_unwind(watch_for_ever);
        std::ptr::null_mut()
    }
    // SAFETY: attr is initialised before use and destroyed after; the thread runs `run`,
    // which takes no argument, and is detached (nothing joins it).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, WATCHDOG_STACK_BYTES);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut thread: libc::pthread_t = std::mem::zeroed();
        let rc = libc::pthread_create(&mut thread, &attr, run, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        if rc == 0 { Ok(()) } else { Err(rc) }
    }
}

fn watch_for_ever() {
    loop {
        let interval = {
            let watched = watched();
            if let Some(late) = watched.waits.iter().find(|w| w.since.elapsed() > w.deadline) {
                end_the_job(late);
            }
            watched.waits.iter().map(|w| w.deadline / 4).min().unwrap_or(MAX_LOOK_INTERVAL).min(MAX_LOOK_INTERVAL)
        };
        std::thread::sleep(interval.max(Duration::from_millis(1)));
    }
}

fn end_the_job(late: &Waiting) -> ! {
    let rank = super::world_rank().map_or("?".to_string(), |r| r.to_string());
    // Written whole with eprintln (one write), whatever MDL_LOG says: this is the job's
    // last word from this rank.
    eprintln!(
        "[mdloader error rank {rank}] {} has waited {:.0} s in {} for the other ranks (MDL_WATCHDOG = {} s): a rank \
         is stuck, died, or makes a different call (it left its loop early, has fewer batches, or waits in a \
         collective of its own such as comm.allreduce). Ending the job with MPI_Abort; MDL_WATCHDOG=0 waits for ever.",
        late.call.name(),
        late.since.elapsed().as_secs_f64(),
        late.mpi,
        late.deadline.as_secs_f64()
    );
    // The launcher may lose what a process wrote just before it aborts (MPICH's Hydra,
    // under load): a moment for the line to leave.
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: MPI is initialised (a wait was under way); MPI_Abort does not return.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
    }
    std::process::exit(1)
}
