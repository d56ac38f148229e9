//! What the loader did, for `mdl_stats_json` and the periodic log summary.

use crate::config::Backend;
use crate::estimator::EstimatorCounters;
use crate::estimator::calibrate::Calibration;
use std::fmt::Write;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub steps: u64,
    /// This rank's wall time in the engine's steps (local copies included).
    pub seconds: f64,
    /// The estimator's predictions for those steps (slowest rank).
    pub predicted_seconds: f64,
    /// Measured step times of the slowest rank, as fed back to the estimator (known
    /// one step late, so the latest step is not yet included).
    pub measured_slowest_seconds: f64,
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

    pub fn steps(&self) -> u64 {
        self.onesided.steps + self.collective.steps
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} steps: one-sided {} ({:.3} s), collective {} ({:.3} s); {} samples, {} bytes remote, {} local",
            self.steps(),
            self.onesided.steps,
            self.onesided.seconds,
            self.collective.steps,
            self.collective.seconds,
            self.samples,
            self.bytes_remote,
            self.bytes_local
        )
    }

    /// The statistics as a JSON object.
    pub fn to_json(
        &self,
        rank: usize,
        ranks: usize,
        backend: Backend,
        counters: &EstimatorCounters,
        calibration: &Calibration,
    ) -> String {
        let engine = |e: &EngineStats| {
            format!(
                "{{\"steps\": {}, \"seconds\": {}, \"predicted_seconds\": {}, \"measured_slowest_seconds\": {}}}",
                e.steps,
                number(e.seconds),
                number(e.predicted_seconds),
                number(e.measured_slowest_seconds)
            )
        };
        let mut params = String::new();
        for (i, (name, value)) in calibration.params.named().iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(params, "{sep}\"{name}\": {}", number(*value));
        }
        format!(
            "{{\"rank\": {rank}, \"ranks\": {ranks}, \"backend\": \"{}\", \"steps\": {}, \
             \"onesided\": {}, \"collective\": {}, \"samples\": {}, \"bytes_local\": {}, \
             \"bytes_remote\": {}, \"decisions\": {}, \"probes\": {}, \"switches\": {}, \
             \"calibration\": {{\"source\": \"{}\", \"seconds\": {}, \"points_onesided\": {}, \
             \"points_collective\": {}, {params}}}}}",
            backend.name(),
            self.steps(),
            engine(&self.onesided),
            engine(&self.collective),
            self.samples,
            self.bytes_local,
            self.bytes_remote,
            counters.decisions,
            counters.probes,
            counters.switches,
            calibration.source,
            number(calibration.seconds),
            calibration.points[0],
            calibration.points[1],
        )
    }
}

/// A JSON number (JSON has no NaN or infinity).
fn number(x: f64) -> String {
    if x.is_finite() { format!("{x:e}") } else { "null".to_string() }
}
