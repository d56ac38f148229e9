//! What the loader did, for `mdl_stats_json` and the periodic log summary.

use crate::backend::Backend;
use crate::estimator::EstimatorCounters;
use crate::estimator::calibrate::Calibration;
use std::fmt::Write;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub steps: u64,
    /// This rank's wall time in the engine's steps (the copies from this rank's own
    /// and its node's shards excluded: they are timed apart, see `NodeLocalStats`).
    pub seconds: f64,
    /// The estimator's predictions for those steps (slowest rank).
    pub predicted_seconds: f64,
    /// What it predicted for the other engine in those steps: why this one ran.
    pub predicted_other_seconds: f64,
    /// Measured step times of the slowest rank, as fed back to the estimator (known
    /// at the next agreement, so the latest steps are not yet included).
    pub measured_slowest_seconds: f64,
    /// The steps `measured_slowest_seconds` covers.
    pub measured_steps: u64,
}

/// The estimator's probes (steps run with the engine it did not prefer, to check its
/// model), as measured on the slowest rank: what exploring cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProbeStats {
    /// Probe steps measured so far (known at the next agreement).
    pub steps: u64,
    /// Their time on the slowest rank.
    pub seconds: f64,
    /// That time minus what the preferred engine was predicted to take in those
    /// steps: the probes' cost over not probing (negative when probing found a faster
    /// engine).
    pub excess_seconds: f64,
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
    pub probes: ProbeStats,
    /// Steps in which no rank had a remote sample: no engine ran.
    pub engine_free_steps: u64,
    /// The collective engine's exchanges of samples (`MPI_Alltoallv`): one per step,
    /// unless a step moves more than `MDL_MAX_MESSAGE_BYTES` to or from some rank.
    pub exchange_rounds: u64,
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

    /// What happened since `earlier` (a copy of these statistics taken then).
    pub fn since(&self, earlier: &Stats) -> Stats {
        let engine = |now: &EngineStats, then: &EngineStats| EngineStats {
            steps: now.steps - then.steps,
            seconds: now.seconds - then.seconds,
            predicted_seconds: now.predicted_seconds - then.predicted_seconds,
            predicted_other_seconds: now.predicted_other_seconds - then.predicted_other_seconds,
            measured_slowest_seconds: now.measured_slowest_seconds - then.measured_slowest_seconds,
            measured_steps: now.measured_steps - then.measured_steps,
        };
        Stats {
            onesided: engine(&self.onesided, &earlier.onesided),
            collective: engine(&self.collective, &earlier.collective),
            node_local: NodeLocalStats {
                steps: self.node_local.steps - earlier.node_local.steps,
                bytes: self.node_local.bytes - earlier.node_local.bytes,
                samples: self.node_local.samples - earlier.node_local.samples,
                seconds: self.node_local.seconds - earlier.node_local.seconds,
            },
            probes: ProbeStats {
                steps: self.probes.steps - earlier.probes.steps,
                seconds: self.probes.seconds - earlier.probes.seconds,
                excess_seconds: self.probes.excess_seconds - earlier.probes.excess_seconds,
            },
            engine_free_steps: self.engine_free_steps - earlier.engine_free_steps,
            exchange_rounds: self.exchange_rounds - earlier.exchange_rounds,
            samples: self.samples - earlier.samples,
            bytes_local: self.bytes_local - earlier.bytes_local,
            bytes_remote: self.bytes_remote - earlier.bytes_remote,
        }
    }

    /// Which engine ran the steps and why: per engine, its steps, the mean predicted
    /// time per step of it and of the other engine, and the slowest rank's mean
    /// measured time (of the steps measured so far).
    pub fn engines_and_why(&self) -> String {
        let engine = |name: &str, other: &str, e: &EngineStats| {
            let per_step = |x: f64| x / e.steps.max(1) as f64 * 1e6;
            let measured = e.measured_slowest_seconds / e.measured_steps.max(1) as f64 * 1e6;
            format!(
                "{name} {} (predicted {:.1} us a step against {:.1} us {other}; measured {measured:.1} us over {} steps)",
                e.steps,
                per_step(e.predicted_seconds),
                per_step(e.predicted_other_seconds),
                e.measured_steps
            )
        };
        let mut parts = Vec::new();
        if self.onesided.steps > 0 {
            parts.push(engine("one-sided", "collective", &self.onesided));
        }
        if self.collective.steps > 0 {
            parts.push(engine("collective", "one-sided", &self.collective));
        }
        format!("{} steps: {}", self.steps(), if parts.is_empty() { "none".to_string() } else { parts.join(", ") })
    }

    /// What the probes measured so far cost, for the summary line.
    pub fn probe_cost(&self) -> String {
        let p = &self.probes;
        format!(
            "{} probes measured: {:.3} ms on the slowest rank, {:+.3} ms against the preferred engine's prediction",
            p.steps,
            p.seconds * 1e3,
            p.excess_seconds * 1e3
        )
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
        // Flat keys, so that the object loads back with MDL_CALIBRATION=<file>.
        let confidence = &calibration.confidence;
        for (name, value) in confidence.spread.named() {
            let _ = write!(params, ", \"spread_{name}\": {}", number(value));
        }
        let _ = write!(
            params,
            ", \"noise_onesided\": {}, \"noise_collective\": {}",
            number(confidence.noise[0]),
            number(confidence.noise[1])
        );
        format!(
            "{{\"rank\": {rank}, \"ranks\": {ranks}, \"backend\": \"{}\", \"steps\": {}, \
             \"onesided\": {}, \"collective\": {}, \"samples\": {}, \"bytes_local\": {}, \
             \"bytes_remote\": {}, \"decisions\": {}, \"probes\": {}, \"switches\": {}, \"unsure_decisions\": {}, \"surprise_probes\": {}, \
             \"node_local\": {{\"steps\": {}, \"bytes\": {}, \"samples\": {}, \"seconds\": {}}}, \
             \"probe_cost\": {{\"steps\": {}, \"seconds\": {}, \"excess_seconds\": {}}}, \
             \"engine_free_steps\": {}, \"exchange_rounds\": {}, \"calibration\": {{\"source\": \"{}\", \"seconds\": {}, \"setup_seconds\": {}, \
             \"last_probe_seconds\": {}, \"points_onesided\": {}, \"points_collective\": {}, {params}}}}}",
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
            counters.unsure,
            counters.surprise_probes,
            self.node_local.steps,
            self.node_local.bytes,
            self.node_local.samples,
            number(self.node_local.seconds),
            self.probes.steps,
            number(self.probes.seconds),
            number(self.probes.excess_seconds),
            self.engine_free_steps,
            self.exchange_rounds,
            calibration.source,
            number(calibration.seconds),
            number(calibration.setup_seconds),
            number(calibration.last_probe_seconds),
            calibration.points[0],
            calibration.points[1],
        )
    }
}

/// The job's statistics (`mdl_stats_json_job`): this rank's numbers combined with
/// every rank's. Steps and the slowest rank's times are the same on every rank; bytes,
/// samples and seconds are summed (and the seconds' maximum kept).
pub struct JobStats {
    pub ranks: usize,
    pub backend: Backend,
    pub counters: EstimatorCounters,
}

impl Stats {
    /// This rank's numbers that the job sums, in the order [`JobStats::to_json`] reads.
    pub fn summed(&self) -> Vec<f64> {
        vec![
            self.samples as f64,
            self.bytes_local as f64,
            self.bytes_remote as f64,
            self.onesided.seconds,
            self.collective.seconds,
            self.node_local.bytes as f64,
            self.node_local.samples as f64,
        ]
    }

    /// This rank's numbers whose maximum over the job is kept.
    pub fn maximised(&self) -> Vec<f64> {
        vec![self.onesided.seconds, self.collective.seconds]
    }
}

impl JobStats {
    /// The JSON object, from `stats` (this rank's) and the job's sums and maxima of
    /// [`Stats::summed`] and [`Stats::maximised`].
    pub fn to_json(&self, stats: &Stats, sums: &[f64], maxima: &[f64]) -> String {
        let ranks = self.ranks.max(1) as f64;
        let engine = |e: &EngineStats, sum: f64, max: f64| {
            format!(
                "{{\"steps\": {}, \"seconds_max\": {}, \"seconds_mean\": {}, \"predicted_seconds\": {}, \
                 \"measured_slowest_seconds\": {}}}",
                e.steps,
                number(max),
                number(sum / ranks),
                number(e.predicted_seconds),
                number(e.measured_slowest_seconds)
            )
        };
        format!(
            "{{\"ranks\": {}, \"backend\": \"{}\", \"steps\": {}, \"onesided\": {}, \"collective\": {}, \
             \"samples\": {}, \"bytes_local\": {}, \"bytes_remote\": {}, \"decisions\": {}, \"probes\": {}, \
             \"switches\": {}, \"unsure_decisions\": {}, \"surprise_probes\": {}, \"node_local\": {{\"bytes\": {}, \"samples\": {}}}, \
             \"engine_free_steps\": {}}}",
            self.ranks,
            self.backend.name(),
            stats.steps(),
            engine(&stats.onesided, sums[3], maxima[0]),
            engine(&stats.collective, sums[4], maxima[1]),
            sums[0] as u64,
            sums[1] as u64,
            sums[2] as u64,
            self.counters.decisions,
            self.counters.probes,
            self.counters.switches,
            self.counters.unsure,
            self.counters.surprise_probes,
            sums[5] as u64,
            sums[6] as u64,
            stats.engine_free_steps
        )
    }
}

/// A JSON number (JSON has no NaN or infinity).
fn number(x: f64) -> String {
    if x.is_finite() { format!("{x:e}") } else { "null".to_string() }
}
