//! Settings read from the environment at `mdl_init`. Each knob is documented in
//! docs/configuration.md and in the header (`tests/settings_doc.rs` checks both
//! against the names read here).

use crate::agree::Setting;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::mpi::DEFAULT_WATCHDOG_SECONDS;
use std::path::PathBuf;
use std::str::FromStr;

/// Whether the loader drives MPI's progress from a thread of its own (see
/// `mpi::ProgressThread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// With `MPI_THREAD_MULTIPLE`, wherever gets are made (every job but one node with
    /// the node-local path): a get may need its target's progress.
    Auto,
    On,
    Off,
}

/// Where the cost model's parameters come from at registration.
#[derive(Clone, Debug, PartialEq)]
pub enum Calibration {
    /// Measure them (the default).
    Measure,
    /// Use built-in defaults (rough shared-memory figures).
    Off,
    /// Load them from a JSON file: the "calibration" object of `mdl_stats_json`.
    File(PathBuf),
}

/// How the library waits for MPI requests (see `mpi::wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Yield between tests on MPICH when this node's ranks outnumber its cores (its
    /// blocking calls busy-poll); blocking calls otherwise.
    Auto,
    Spin,
    Yield,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `MDL_BACKEND`: the backend in force until `mdl_set_backend` changes it.
    pub backend: Backend,
    /// `MDL_MAX_MESSAGE_BYTES`: the most bytes one rank sends or receives in one round
    /// of the collective engine (default: no limit). A larger step runs in rounds of at
    /// most this / P bytes per rank (and reads a sample too large for a round with a
    /// get), which bounds the exchange's buffers. Gets are split at this or at MPI's
    /// `int` count limit, the smaller. Small values exercise those paths in tests.
    pub max_message_bytes: u64,
    /// `MDL_CALIBRATION=on|off|<file.json>`.
    pub calibration: Calibration,
    /// `MDL_CALIBRATION_SECONDS`: time budget of the calibration (default 0.4; 0 skips it).
    pub calibration_seconds: f64,
    /// `MDL_PROBE_INTERVAL`: steps of one bucket between probes of the engine not in
    /// use, once the early probes (after 8, 16, 32 steps) are done (default 64; 0 never
    /// probes).
    pub probe_interval: u64,
    /// `MDL_HYSTERESIS`: how much faster (relative) the other engine must be predicted
    /// before AUTO switches (default 0.1).
    pub hysteresis: f64,
    /// `MDL_PROBE_BUDGET`: what AUTO's probes may cost, their time over the preferred
    /// engine's prediction (spent, and predicted for the next probe, scaled by how far
    /// the probes so far overran their predictions) as a fraction of all measured
    /// steps' time (default 0.04, below the 5% the probes should cost at most: a
    /// bucket's first costly probe has no overrun to be scaled by, and overran the
    /// budget by up to 1.3x in `benches/lag`'s training loop; see its README).
    pub probe_budget: f64,
    /// `MDL_MATRIX_MAX_RANKS`: up to this many ranks, each step's agreement carries the
    /// full request matrix (2 * P * P values: bytes and samples per requester and
    /// owner), which tells the estimator exactly how many bytes each rank serves and
    /// spares the collective engine its count exchange (default 32).
    pub matrix_max_ranks: usize,
    /// `MDL_WARMUP_GETS`: small gets issued on a newly registered window, because
    /// Open MPI's first few hundred gets on a window are several times slower
    /// (default 512; 0 skips the warm-up).
    pub warm_up_gets: u64,
    /// `MDL_WARMUP_MAP_BYTES`: of the shards of this rank's MPI node that its gets
    /// read (the node-local path off), how many bytes registration reads one byte of
    /// every 64 KB of, so that MPI's shared-memory mapping of them is in place before
    /// the first step (default 1 GiB; 0 skips it).
    pub warm_up_map_bytes: u64,
    /// `MDL_WAIT=auto|spin|yield`.
    pub wait: Wait,
    /// `MDL_MAX_GETS_IN_FLIGHT`: the most one-sided gets outstanding at once; a step
    /// with more completes them in groups (default 4096). MPICH 4.0 aborts with
    /// 700,000 outstanding on one window, Cray MPICH limits pending operations
    /// (`MPICH_RMA_MAX_PENDING`), and MPICH has hangs with many small gets before one
    /// synchronisation.
    pub max_gets_in_flight: u64,
    /// `MDL_TIMEOUT`: seconds a collective of the library may wait before it fails with
    /// `MDL_ERR_TIMEOUT` (0, the default: wait for ever). When set, every wait is a
    /// nonblocking call and a test loop, which can give up.
    pub timeout_seconds: f64,
    /// `MDL_WATCHDOG`: seconds any single wait of the library for the other ranks may
    /// last before the job is ended with a message naming the call (default 1800, as
    /// torch's collectives time out after 30 minutes; 0: never). Unlike `MDL_TIMEOUT`
    /// it keeps the blocking MPI calls, which cannot give up: a thread of the library's
    /// watches them (see `mpi::watchdog`).
    pub watchdog_seconds: f64,
    /// `MDL_SHARED_INDEX=on|off`: keep the global index once per node in shared memory
    /// (default on), or a copy per rank (off: where shared memory is small, such as a
    /// container's 64 MB /dev/shm).
    pub shared_index: bool,
    /// `MDL_AGREEMENT_LAG`: the sampler agrees on each step this many steps before it
    /// runs, with a nonblocking reduction that completes while the steps in between
    /// run (default 2; 0: each step waits for its own agreement).
    pub agreement_lag: u64,
    /// `MDL_NODE_LOCAL=on|off`: the shards of a node's ranks in one shared-memory
    /// window, their samples copied with memcpy instead of going through an engine
    /// (on, the default), or every other rank's sample through the engines (off: what
    /// the engines' own tests and benchmarks on one machine pin, so that they move
    /// bytes at all).
    pub node_local: bool,
    /// `MDL_SHM_DIR`: the directory whose file system backs MPI's shared memory
    /// (default `/dev/shm`, where Open MPI and MPICH put their segments). Before any
    /// shared window is made each node checks that it can hold them (see
    /// `store::shm_budget`); the outcome, not the path, is agreed.
    pub shm_dir: PathBuf,
    /// `MDL_PROGRESS=auto|on|off` and `MDL_PROGRESS_US`, its interval in microseconds
    /// (default 20000: with the QM9 GNN on two emulated hosts of MPICH over TCP, 4 ranks
    /// on 2 cores, 200 us cost 40% of the samples/s, 2 ms 25%, 20 ms nothing
    /// measurable). Local, not agreed: it changes no communication.
    pub progress: Progress,
    pub progress_interval_us: u64,
    /// `MDL_SHM_RESERVE`: bytes of that file system left free for MPI's own segments
    /// and other users of the node, and kept free of each rank's address-space limit
    /// for what MPI maps beside the windows (default 16 MiB, at least `SHM_RESERVE_MIN`).
    pub shm_reserve: u64,
    /// `MDL_NODE_KEY`: ranks of one shared-memory node with different keys count as
    /// different nodes (emulating hosts in tests and benchmarks). Not agreed: it is
    /// meant to differ between ranks, and the node split it steers is collective.
    pub node_key: u32,
}

/// Upper bounds of the knobs that size messages, work or memory per step.
pub(crate) const MATRIX_MAX_RANKS_LIMIT: usize = 64;
pub(crate) const WARMUP_GETS_LIMIT: u64 = 1 << 16;
pub(crate) const GETS_IN_FLIGHT_LIMIT: u64 = 1 << 20;
pub(crate) const PROBE_INTERVAL_LIMIT: u64 = 1 << 32;
pub(crate) const CALIBRATION_SECONDS_LIMIT: f64 = 60.0;
pub(crate) const TIMEOUT_LIMIT: f64 = 1e6;
/// Each step agreed ahead holds a batch buffer.
pub(crate) const AGREEMENT_LAG_LIMIT: u64 = 64;
/// Open MPI takes 1-4 MiB more of the shared-memory file system while it creates a
/// window than the window's size, and hung (its leader failing alone) with 1 MiB left.
pub(crate) const SHM_RESERVE_MIN: u64 = 8 << 20;
/// The progress thread's interval: shorter would take a core's worth of MPI calls,
/// longer (a second) would leave a peer's get waiting that long.
pub(crate) const PROGRESS_US_MIN: u64 = 10;
pub(crate) const PROGRESS_US_MAX: u64 = 1_000_000;
/// A shorter timeout would fail healthy collectives.
pub(crate) const TIMEOUT_MIN: f64 = 0.001;
/// `MDL_MAX_MESSAGE_BYTES`'s default: the collective engine's exchanges take any size
/// in one round (beyond `int` counts through `MPI_Alltoallw`, see `mpi::large_count`).
pub(crate) const NO_MESSAGE_LIMIT: u64 = u64::MAX;

impl Default for Config {
    fn default() -> Config {
        Config {
            backend: Backend::Auto,
            max_message_bytes: NO_MESSAGE_LIMIT,
            calibration: Calibration::Measure,
            calibration_seconds: 0.4,
            probe_interval: 64,
            hysteresis: 0.1,
            probe_budget: 0.04,
            matrix_max_ranks: 32,
            warm_up_gets: 512,
            warm_up_map_bytes: 1 << 30,
            wait: Wait::Auto,
            max_gets_in_flight: 4096,
            timeout_seconds: 0.0,
            watchdog_seconds: DEFAULT_WATCHDOG_SECONDS,
            shared_index: true,
            agreement_lag: 2,
            node_local: true,
            shm_dir: PathBuf::from("/dev/shm"),
            shm_reserve: 16 << 20,
            progress: Progress::Auto,
            progress_interval_us: 20_000,
            node_key: 0,
        }
    }
}

/// An environment variable parsed as T and checked, or `default` when unset.
fn env_or<T: FromStr>(name: &str, default: T, valid: impl Fn(&T) -> bool, expected: &str) -> Result<T> {
    match env_text(name)? {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse::<T>()
            .ok()
            .filter(valid)
            .ok_or_else(|| Error::invalid(format!("{name}={text}: expected {expected}"))),
    }
}

/// An environment variable's text, None when unset; a value that is not UTF-8 is an
/// error (not "unset", which would silently take the default).
fn env_text(name: &str) -> Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(os) => os
            .into_string()
            .map(Some)
            .map_err(|raw| Error::invalid(format!("{name}={}: not valid UTF-8", raw.to_string_lossy()))),
    }
}

/// A keyword variable (case-insensitive): the index of its value in `words`, or
/// `default` when unset or empty.
fn env_word(name: &str, words: &[&str], default: usize) -> Result<usize> {
    let Some(text) = env_text(name)? else { return Ok(default) };
    let word = text.trim().to_ascii_lowercase();
    if word.is_empty() {
        return Ok(default);
    }
    words
        .iter()
        .position(|w| *w == word)
        .ok_or_else(|| Error::invalid(format!("{name}={text}: expected {}", words.join(", "))))
}

impl Config {
    pub fn from_env() -> Result<Config> {
        let default = Config::default();
        let backend = match env_text("MDL_BACKEND")? {
            Some(text) => Backend::parse(&text).ok_or_else(|| {
                Error::invalid(format!("MDL_BACKEND={text}: expected auto, onesided or collective"))
            })?,
            None => default.backend,
        };
        let calibration = match env_text("MDL_CALIBRATION")? {
            None => Calibration::Measure,
            Some(text) => match text.trim().to_ascii_lowercase().as_str() {
                "on" | "" => Calibration::Measure,
                "off" => Calibration::Off,
                _ => Calibration::File(PathBuf::from(text.trim())),
            },
        };
        let shared_index = env_word("MDL_SHARED_INDEX", &["off", "on"], 1)? == 1;
        let node_local = env_word("MDL_NODE_LOCAL", &["off", "on"], default.node_local as usize)? == 1;
        let shm_dir = match env_text("MDL_SHM_DIR")? {
            Some(text) if !text.trim().is_empty() => {
                // A typo would otherwise switch the check off (nothing to examine).
                let dir = PathBuf::from(text.trim());
                if !dir.is_dir() {
                    return Err(Error::invalid(format!("MDL_SHM_DIR={text}: not a directory")));
                }
                dir
            }
            _ => default.shm_dir.clone(),
        };
        let wait = [Wait::Auto, Wait::Spin, Wait::Yield][env_word("MDL_WAIT", &["auto", "spin", "yield"], 0)?];
        let progress = [Progress::Auto, Progress::On, Progress::Off][env_word("MDL_PROGRESS", &["auto", "on", "off"], 0)?];
        Ok(Config {
            wait,
            backend,
            shared_index,
            node_local,
            shm_dir,
            progress,
            progress_interval_us: env_or(
                "MDL_PROGRESS_US",
                default.progress_interval_us,
                |us| (PROGRESS_US_MIN..=PROGRESS_US_MAX).contains(us),
                &format!("microseconds in {PROGRESS_US_MIN}..={PROGRESS_US_MAX}"),
            )?,
            shm_reserve: env_or(
                "MDL_SHM_RESERVE",
                default.shm_reserve,
                |n| *n >= SHM_RESERVE_MIN,
                &format!("a number of bytes, at least {SHM_RESERVE_MIN}"),
            )?,
            node_key: env_or("MDL_NODE_KEY", default.node_key, |k| *k <= i32::MAX as u32, "an integer in 0..=2147483647")?,
            agreement_lag: env_or(
                "MDL_AGREEMENT_LAG",
                default.agreement_lag,
                |n| *n <= AGREEMENT_LAG_LIMIT,
                &format!("a number of steps in 0..={AGREEMENT_LAG_LIMIT}"),
            )?,
            max_message_bytes: env_or(
                "MDL_MAX_MESSAGE_BYTES",
                default.max_message_bytes,
                |n| *n >= 1,
                "a positive number of bytes",
            )?,
            calibration,
            calibration_seconds: env_or(
                "MDL_CALIBRATION_SECONDS",
                default.calibration_seconds,
                |s: &f64| (0.0..=CALIBRATION_SECONDS_LIMIT).contains(s),
                &format!("seconds in 0..={CALIBRATION_SECONDS_LIMIT}"),
            )?
            .abs(), // -0 is 0
            probe_interval: env_or(
                "MDL_PROBE_INTERVAL",
                default.probe_interval,
                |n| *n <= PROBE_INTERVAL_LIMIT,
                &format!("a number of steps in 0..={PROBE_INTERVAL_LIMIT}"),
            )?,
            // -0 is 0: the ranks compare settings bit for bit.
            hysteresis: env_or("MDL_HYSTERESIS", default.hysteresis, |h: &f64| (0.0..1.0).contains(h), "a fraction in [0, 1)")?
                .abs(),
            probe_budget: env_or("MDL_PROBE_BUDGET", default.probe_budget, |b: &f64| (0.0..=1.0).contains(b), "a fraction in [0, 1]")?
                .abs(),
            matrix_max_ranks: env_or(
                "MDL_MATRIX_MAX_RANKS",
                default.matrix_max_ranks,
                |n| *n <= MATRIX_MAX_RANKS_LIMIT,
                &format!("a number of ranks in 0..={MATRIX_MAX_RANKS_LIMIT}"),
            )?,
            warm_up_gets: env_or(
                "MDL_WARMUP_GETS",
                default.warm_up_gets,
                |n| *n <= WARMUP_GETS_LIMIT,
                &format!("a number of gets in 0..={WARMUP_GETS_LIMIT}"),
            )?,
            warm_up_map_bytes: env_or("MDL_WARMUP_MAP_BYTES", default.warm_up_map_bytes, |_| true, "a number of bytes")?,
            max_gets_in_flight: env_or(
                "MDL_MAX_GETS_IN_FLIGHT",
                default.max_gets_in_flight,
                |n| (1..=GETS_IN_FLIGHT_LIMIT).contains(n),
                &format!("a number of gets in 1..={GETS_IN_FLIGHT_LIMIT}"),
            )?,
            timeout_seconds: env_or(
                "MDL_TIMEOUT",
                default.timeout_seconds,
                |s: &f64| *s == 0.0 || (TIMEOUT_MIN..=TIMEOUT_LIMIT).contains(s),
                &format!("0 (no timeout) or seconds in {TIMEOUT_MIN}..={TIMEOUT_LIMIT}"),
            )?
            .abs(), // -0 is 0
            watchdog_seconds: env_or(
                "MDL_WATCHDOG",
                default.watchdog_seconds,
                |s: &f64| *s == 0.0 || (TIMEOUT_MIN..=TIMEOUT_LIMIT).contains(s),
                &format!("0 (no watchdog) or seconds in {TIMEOUT_MIN}..={TIMEOUT_LIMIT}"),
            )?
            .abs(),
        })
    }

    /// Every setting that steers communication, as agreed at `mdl_init`: they must be
    /// identical on every rank, bit for bit. (A calibration file's parameters are
    /// agreed at registration, where the file is read.)
    pub fn settings(&self) -> Vec<Setting<'static>> {
        let calibration = match self.calibration {
            Calibration::Measure => 0,
            Calibration::Off => 1,
            Calibration::File(_) => 2,
        };
        vec![
            Setting::identical("MDL_BACKEND", self.backend as u64)
                .shown_as(|c| Backend::from_code(c as i64).map_or("?", Backend::name).to_string()),
            Setting::identical("MDL_WAIT", self.wait as u64).shown_as(|c| Wait::name_of(c as u64).to_string()),
            Setting::identical("MDL_MAX_MESSAGE_BYTES", self.max_message_bytes)
                .shown_as(|b| if b >= NO_MESSAGE_LIMIT as f64 { "no limit".to_string() } else { (b as u64).to_string() }),
            Setting::identical("MDL_MAX_GETS_IN_FLIGHT", self.max_gets_in_flight),
            Setting::identical("MDL_CALIBRATION", calibration)
                .shown_as(|c| ["on", "off", "a file"].get(c as usize).unwrap_or(&"?").to_string()),
            Setting::float("MDL_CALIBRATION_SECONDS", self.calibration_seconds),
            Setting::identical("MDL_PROBE_INTERVAL", self.probe_interval),
            Setting::float("MDL_HYSTERESIS", self.hysteresis),
            Setting::float("MDL_PROBE_BUDGET", self.probe_budget),
            Setting::identical("MDL_MATRIX_MAX_RANKS", self.matrix_max_ranks as u64),
            Setting::identical("MDL_WARMUP_GETS", self.warm_up_gets),
            Setting::identical("MDL_WARMUP_MAP_BYTES", self.warm_up_map_bytes),
            Setting::float("MDL_TIMEOUT", self.timeout_seconds),
            Setting::float("MDL_WATCHDOG", self.watchdog_seconds),
            Setting::identical("MDL_AGREEMENT_LAG", self.agreement_lag),
            Setting::identical("MDL_SHARED_INDEX", self.shared_index as u64).shown_as(|v| ["off", "on"][(v as usize).min(1)].to_string()),
            Setting::identical("MDL_NODE_LOCAL", self.node_local as u64).shown_as(|v| ["off", "on"][(v as usize).min(1)].to_string()),
        ]
    }
}

impl Wait {
    fn name_of(code: u64) -> &'static str {
        match code {
            c if c == Wait::Auto as u64 => "auto",
            c if c == Wait::Spin as u64 => "spin",
            c if c == Wait::Yield as u64 => "yield",
            _ => "?",
        }
    }
}
