//! Which engine moves a step's bytes: a leaf type that the settings, the agreements,
//! the estimator, the engines and the C API all name.

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

    /// The engine that is not `self` (`Auto` has none: itself).
    pub fn other(self) -> Backend {
        match self {
            Backend::OneSided => Backend::Collective,
            Backend::Collective => Backend::OneSided,
            Backend::Auto => Backend::Auto,
        }
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

    #[test]
    fn the_other_engine() {
        assert_eq!(Backend::OneSided.other(), Backend::Collective);
        assert_eq!(Backend::Collective.other(), Backend::OneSided);
    }
}
