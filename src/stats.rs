//! Counters of what the loader did, per engine.

use crate::config::Backend;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub steps: u64,
    /// Wall time of the engine's part of the steps (after the agreement).
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub onesided: EngineStats,
    pub collective: EngineStats,
    pub samples: u64,
    pub bytes_local: u64,
    pub bytes_remote: u64,
}

impl Stats {
    pub fn engine_mut(&mut self, engine: Backend) -> &mut EngineStats {
        match engine {
            Backend::Collective => &mut self.collective,
            Backend::OneSided | Backend::Auto => &mut self.onesided,
        }
    }
}
