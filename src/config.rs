//! Settings read from the environment at `mdl_init`. Each knob is documented in the
//! README and in the header.

use crate::error::{Error, Result};
use crate::mpi::MAX_COUNT;
use std::path::PathBuf;
use std::str::FromStr;

/// Which engine moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The estimator decides, per step.
    Auto = 0,
    OneSided = 1,
    Collective = 2,
}

impl Backend {
    pub fn from_code(code: i64) -> Option<Backend> {
        match code {
            0 => Some(Backend::Auto),
            1 => Some(Backend::OneSided),
            2 => Some(Backend::Collective),
            _ => None,
        }
    }

    pub fn parse(text: &str) -> Option<Backend> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Backend::Auto),
            "onesided" | "one-sided" | "rma" => Some(Backend::OneSided),
            "collective" | "alltoallv" => Some(Backend::Collective),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::OneSided => "onesided",
            Backend::Collective => "collective",
        }
    }
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
    /// `MDL_MAX_MESSAGE_BYTES`: the most bytes one MPI transfer may carry (default and
    /// ceiling: 2^31 - 1, MPI's count limit). Larger gets are split; the collective
    /// engine runs in rounds so that no count or displacement exceeds it (and reads a
    /// sample too large for a round with a get). Small values exercise those paths in
    /// tests.
    pub max_message_bytes: u64,
    /// `MDL_CALIBRATION=on|off|<file.json>`.
    pub calibration: Calibration,
    /// `MDL_CALIBRATION_SECONDS`: time budget of the calibration (default 0.4).
    pub calibration_seconds: f64,
    /// `MDL_PROBE_INTERVAL`: steps of one bucket between probes of the engine not in
    /// use, once the early probes (after 8, 16, 32 steps) are done (default 64; 0 never
    /// probes).
    pub probe_interval: u64,
    /// `MDL_HYSTERESIS`: how much faster (relative) the other engine must be predicted
    /// before AUTO switches (default 0.1).
    pub hysteresis: f64,
    /// `MDL_MATRIX_MAX_RANKS`: up to this many ranks, each step's agreement carries the
    /// full request matrix (2 * P * P values: bytes and samples per requester and
    /// owner), which tells the estimator exactly how many bytes each rank serves and
    /// spares the collective engine its count exchange (default 32).
    pub matrix_max_ranks: usize,
    /// `MDL_WARMUP_GETS`: small gets issued on a newly registered window, because
    /// Open MPI's first few hundred gets on a window are several times slower
    /// (default 512; 0 skips the warm-up).
    pub warm_up_gets: u64,
    /// `MDL_WAIT=auto|spin|yield`.
    pub wait: Wait,
}

/// An environment variable parsed as T and checked, or `default` when unset.
fn env_or<T: FromStr>(name: &str, default: T, valid: impl Fn(&T) -> bool, expected: &str) -> Result<T> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .trim()
            .parse::<T>()
            .ok()
            .filter(valid)
            .ok_or_else(|| Error::invalid(format!("{name}={text}: expected {expected}"))),
    }
}

impl Config {
    pub fn from_env() -> Result<Config> {
        let backend = match std::env::var("MDL_BACKEND") {
            Ok(text) => Backend::parse(&text).ok_or_else(|| {
                Error::invalid(format!("MDL_BACKEND={text}: expected auto, onesided or collective"))
            })?,
            Err(_) => Backend::Auto,
        };
        let calibration = match std::env::var("MDL_CALIBRATION").as_deref().map(str::trim) {
            Err(_) | Ok("on") | Ok("") => Calibration::Measure,
            Ok("off") => Calibration::Off,
            Ok(path) => Calibration::File(PathBuf::from(path)),
        };
        let wait = match std::env::var("MDL_WAIT").as_deref().map(str::trim) {
            Err(_) | Ok("auto") => Wait::Auto,
            Ok("spin") => Wait::Spin,
            Ok("yield") => Wait::Yield,
            Ok(other) => return Err(Error::invalid(format!("MDL_WAIT={other}: expected auto, spin or yield"))),
        };
        Ok(Config {
            wait,
            backend,
            max_message_bytes: env_or(
                "MDL_MAX_MESSAGE_BYTES",
                MAX_COUNT,
                |n| (1..=MAX_COUNT).contains(n),
                &format!("an integer in 1..={MAX_COUNT}"),
            )?,
            calibration,
            calibration_seconds: env_or("MDL_CALIBRATION_SECONDS", 0.4, |s: &f64| *s >= 0.0, "seconds >= 0")?,
            probe_interval: env_or("MDL_PROBE_INTERVAL", 64, |_| true, "a number of steps")?,
            hysteresis: env_or("MDL_HYSTERESIS", 0.1, |h: &f64| (0.0..1.0).contains(h), "a fraction in [0, 1)")?,
            matrix_max_ranks: env_or("MDL_MATRIX_MAX_RANKS", 32, |_| true, "a number of ranks")?,
            warm_up_gets: env_or("MDL_WARMUP_GETS", 512, |_| true, "a number of gets")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for b in [Backend::Auto, Backend::OneSided, Backend::Collective] {
            assert_eq!(Backend::parse(b.name()), Some(b));
            assert_eq!(Backend::from_code(b as i64), Some(b));
        }
        assert_eq!(Backend::parse(" Collective "), Some(Backend::Collective));
        assert_eq!(Backend::parse("fast"), None);
        assert_eq!(Backend::from_code(3), None);
    }
}
