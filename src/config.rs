//! Settings read from the environment at `mdl_init`. Each knob is documented in the
//! README and in the header.

use crate::error::{Error, Result};
use crate::mpi::MAX_COUNT;

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

#[derive(Clone, Debug)]
pub struct Config {
    /// `MDL_BACKEND`: the backend in force until `mdl_set_backend` changes it.
    pub backend: Backend,
    /// `MDL_MAX_MESSAGE_BYTES`: the most bytes one MPI transfer may carry (default and
    /// ceiling: 2^31 - 1, MPI's count limit). Larger gets are split; the collective
    /// engine runs in rounds so that no count or displacement exceeds it. Small values
    /// exist to exercise those paths in tests.
    pub max_message_bytes: u64,
}

impl Config {
    pub fn from_env() -> Result<Config> {
        let backend = match std::env::var("MDL_BACKEND") {
            Ok(text) => Backend::parse(&text).ok_or_else(|| {
                Error::invalid(format!("MDL_BACKEND={text}: expected auto, onesided or collective"))
            })?,
            Err(_) => Backend::Auto,
        };
        let max_message_bytes = match std::env::var("MDL_MAX_MESSAGE_BYTES") {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| (1..=MAX_COUNT).contains(&n))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "MDL_MAX_MESSAGE_BYTES={text}: expected an integer in 1..={MAX_COUNT}"
                    ))
                })?,
            Err(_) => MAX_COUNT,
        };
        Ok(Config { backend, max_message_bytes })
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
