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

/// The node-local path: samples of other ranks of this rank's node, copied from their
/// shards with memcpy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeLocalStats {
    /// Steps that copied at least one such sample.
    pub steps: u64,
    pub bytes: u64,
    pub samples: u64,
    /// This rank's time copying its local and node-local samples, in all steps.
    pub seconds: f64,
}

impl NodeLocalStats {
    pub fn record(&mut self, bytes: u64, samples: u64, seconds: f64) {
        self.steps += (samples > 0) as u64;
        self.bytes += bytes;
        self.samples += samples;
        self.seconds += seconds;
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub onesided: EngineStats,
    pub collective: EngineStats,
    pub node_local: NodeLocalStats,
    /// Steps in which no rank had a remote sample: no engine ran.
    pub engine_free_steps: u64,
    pub samples: u64,
    /// This rank's own samples' bytes.
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
        self.onesided.steps + self.collective.steps + self.engine_free_steps
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} steps: one-sided {} ({:.3} s), collective {} ({:.3} s), no engine {}; {} samples, {} bytes remote, {} node-local, {} local",
            self.steps(),
            self.onesided.steps,
            self.onesided.seconds,
            self.collective.steps,
            self.collective.seconds,
            self.engine_free_steps,
            self.samples,
            self.bytes_remote,
            self.node_local.bytes,
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
             \"onesided\": {}, \"collective\": {}, \"node_local\": {{\"steps\": {}, \"bytes\": {}, \"samples\": {}, \
             \"seconds\": {}}}, \"engine_free_steps\": {}, \"samples\": {}, \"bytes_local\": {}, \
             \"bytes_remote\": {}, \"decisions\": {}, \"probes\": {}, \"switches\": {}, \
             \"calibration\": {{\"source\": \"{}\", \"seconds\": {}, \"points_onesided\": {}, \
             \"points_collective\": {}, {params}}}}}",
            backend.name(),
            self.steps(),
            engine(&self.onesided),
            engine(&self.collective),
            self.node_local.steps,
            self.node_local.bytes,
            self.node_local.samples,
            number(self.node_local.seconds),
            self.engine_free_steps,
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
