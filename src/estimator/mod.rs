//! The estimator: predicts each engine's step time from the batch plan, picks the
//! faster one for every step, and corrects itself from what it measures.
//!
//! - [`model`]: the cost formulas and their least-squares fit,
//! - [`calibrate`]: measuring the parameters on the real communicator at registration,
//! - [`features`]: how a step's features ride the step's agreement,
//! - this module: the per-step decision, online correction, probes and hysteresis.
//!
//! Every input of a decision (features, measured times) is agreed on by all ranks
//! before use, and the state updates are deterministic, so all ranks make the same
//! choice without further communication.
//!
//! Online correction: steps are grouped into buckets by batch size and sample size
//! (log2 of the remote samples of the busiest rank, log2 of its mean remote sample
//! size). Each bucket keeps, per engine, a scale applied to the model: log(measured /
//! predicted), averaged, so a model that is wrong in one regime is corrected there
//! without disturbing the others. A new bucket borrows the nearest bucket's scales;
//! its first `FAST_START` measurements of an engine are averaged plainly (the first one
//! replaces the borrowed scale, however far off calibration was), later ones move the
//! scale as an exponential moving average, by at most `MAX_STEP_RATIO` each, so that an
//! outlier cannot flip a settled decision. Every `probe_interval` steps of a bucket the
//! engine not in use is run once (a probe), so that a wrong model is found out at
//! bounded cost: the first probe of a bucket comes early and always happens; later ones
//! are skipped while the other engine is predicted more than `PROBE_MAX_RATIO` times
//! slower. A bucket switches engine only when the other is predicted faster by more
//! than the hysteresis margin.

pub mod calibrate;
pub mod features;
pub mod model;

use crate::config::Backend;
use model::{CostParams, StepFeatures};

/// Weight of a new measurement in a bucket's scale, after the fast start.
const CORRECTION_RATE: f64 = 0.2;
/// Measurements of an engine in a bucket that are averaged with equal weights before
/// the moving average takes over.
const FAST_START: u32 = 4;
/// The engine not in use is probed only when predicted at most this much slower.
const PROBE_MAX_RATIO: f64 = 3.0;
/// Scales are kept within [1/MAX_SCALE, MAX_SCALE] of the model.
const MAX_SCALE: f64 = 100.0;
/// One measurement moves a scale by at most this factor (before weighting), so that an
/// outlier (a descheduled rank, a page fault) cannot flip a decision on its own.
const MAX_STEP_RATIO: f64 = 2.0;

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Steps of a bucket between probes of the other engine (0: never probe).
    pub probe_interval: u64,
    /// Relative margin by which the other engine must be predicted faster to switch.
    pub hysteresis: f64,
}

/// The engine chosen for a step and what was predicted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub engine: Backend,
    pub predicted_onesided: f64,
    pub predicted_collective: f64,
    pub probe: bool,
}

impl Decision {
    pub fn predicted(&self, engine: Backend) -> f64 {
        if engine == Backend::Collective { self.predicted_collective } else { self.predicted_onesided }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// log of the correction scale, per engine (index: 0 one-sided, 1 collective).
    log_scale: [f64; 2],
    /// Measurements of each engine in this bucket (saturating).
    measured: [u32; 2],
    preferred: Option<Backend>,
    steps_since_probe: u64,
}

/// What the estimator did, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EstimatorCounters {
    pub decisions: u64,
    pub probes: u64,
    /// Changes of a bucket's preferred engine (probes, which return, are not counted).
    pub switches: u64,
}

pub struct Estimator {
    params: CostParams,
    settings: Settings,
    buckets: Vec<Option<Bucket>>,
    counters: EstimatorCounters,
}

fn slot(engine: Backend) -> usize {
    (engine == Backend::Collective) as usize
}

fn other(engine: Backend) -> Backend {
    if engine == Backend::Collective { Backend::OneSided } else { Backend::Collective }
}

/// Buckets per dimension: log2 classes of a u64.
const CLASSES: usize = 65;

fn log2_class(x: f64) -> usize {
    let x = x.max(0.0) as u64;
    (u64::BITS - x.leading_zeros()) as usize
}

/// (batch class, sample-size class) of a step.
fn bucket_of(f: &StepFeatures) -> (usize, usize) {
    let mean_sample = if f.samples > 0.0 { f.bytes / f.samples } else { 0.0 };
    (log2_class(f.samples), log2_class(mean_sample))
}

impl Estimator {
    pub fn new(params: CostParams, settings: Settings) -> Estimator {
        Estimator { params, settings, buckets: vec![None; CLASSES * CLASSES], counters: Default::default() }
    }

    #[cfg(test)]
    pub fn params(&self) -> &CostParams {
        &self.params
    }

    pub fn counters(&self) -> EstimatorCounters {
        self.counters
    }

    fn bucket(&mut self, f: &StepFeatures) -> &mut Bucket {
        let (batch, size) = bucket_of(f);
        let index = batch * CLASSES + size;
        // A new bucket starts from the nearest bucket's correction: neighbouring batch
        // and sample sizes behave alike.
        if self.buckets[index].is_none() {
            let distance = |i: usize| (i / CLASSES).abs_diff(batch) + (i % CLASSES).abs_diff(size);
            let nearest = (0..self.buckets.len()).filter(|&i| self.buckets[i].is_some()).min_by_key(|&i| distance(i));
            let log_scale = nearest.map_or([0.0; 2], |i| self.buckets[i].expect("filtered").log_scale);
            // The first probe comes early (after 8 steps): a new bucket's correction is
            // borrowed, and least to be trusted.
            let interval = self.settings.probe_interval;
            let steps_since_probe = interval.saturating_sub(8.min(interval / 2));
            self.buckets[index] = Some(Bucket { log_scale, measured: [0; 2], preferred: None, steps_since_probe });
        }
        self.buckets[index].as_mut().expect("created above")
    }

    /// Corrected predictions for both engines.
    pub fn predict(&mut self, f: &StepFeatures) -> (f64, f64) {
        let params = self.params;
        let bucket = *self.bucket(f);
        let predict = |e: Backend| params.predict(e, f) * bucket.log_scale[slot(e)].exp();
        (predict(Backend::OneSided), predict(Backend::Collective))
    }

    /// The engine for a step. `requested` is the backend in force (AUTO or forced).
    pub fn decide(&mut self, f: &StepFeatures, requested: Backend) -> Decision {
        let (os, coll) = self.predict(f);
        let mut decision =
            Decision { engine: requested, predicted_onesided: os, predicted_collective: coll, probe: false };
        if requested == Backend::Auto {
            decision.engine = self.choose_auto(f, os, coll, &mut decision.probe);
        }
        self.counters.decisions += 1;
        self.counters.probes += decision.probe as u64;
        decision
    }

    fn choose_auto(&mut self, f: &StepFeatures, os: f64, coll: f64, probe: &mut bool) -> Backend {
        if f.samples == 0.0 {
            // Nothing remote anywhere: the one-sided engine communicates not at all.
            return Backend::OneSided;
        }
        let settings = self.settings;
        let bucket = self.bucket(f);
        let predicted = |e: Backend| if e == Backend::Collective { coll } else { os };
        let fastest = if coll < os { Backend::Collective } else { Backend::OneSided };
        let keep = bucket
            .preferred
            .filter(|&p| predicted(other(p)) > predicted(p) * (1.0 - settings.hysteresis))
            .unwrap_or(fastest);
        let switched = bucket.preferred.is_some_and(|p| p != keep);
        bucket.preferred = Some(keep);
        bucket.steps_since_probe += 1;
        let due = settings.probe_interval > 0 && bucket.steps_since_probe >= settings.probe_interval;
        self.counters.switches += switched as u64;
        let bucket = self.bucket(f);
        let never_measured = bucket.measured[slot(other(keep))] == 0;
        if due && (never_measured || predicted(other(keep)) <= PROBE_MAX_RATIO * predicted(keep)) {
            bucket.steps_since_probe = 0;
            *probe = true;
            return other(keep);
        }
        keep
    }

    /// Feed back the measured time (maximum over ranks) of a step run with `engine`.
    pub fn observe(&mut self, engine: Backend, f: &StepFeatures, measured: f64) {
        let modelled = self.params.predict(engine, f);
        if !(measured > 0.0 && modelled > 0.0) {
            return;
        }
        let bucket = self.bucket(f);
        let n = &mut bucket.measured[slot(engine)];
        let s = &mut bucket.log_scale[slot(engine)];
        let deviation = (measured / modelled).ln() - *s;
        let step = if *n < FAST_START {
            deviation / (*n + 1) as f64
        } else {
            CORRECTION_RATE * deviation.clamp(-MAX_STEP_RATIO.ln(), MAX_STEP_RATIO.ln())
        };
        *s = (*s + step).clamp(-MAX_SCALE.ln(), MAX_SCALE.ln());
        *n = n.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { probe_interval: 10, hysteresis: 0.05 }
    }

    fn step(samples: f64, bytes: f64) -> StepFeatures {
        StepFeatures { gets: samples, samples, bytes, served: bytes, rounds: 1.0 }
    }

    #[test]
    fn forced_backends_are_obeyed() {
        let mut e = Estimator::new(CostParams::default(), settings());
        for forced in [Backend::OneSided, Backend::Collective] {
            for _ in 0..50 {
                assert_eq!(e.decide(&step(64.0, 1e5), forced).engine, forced);
            }
        }
    }

    #[test]
    fn correction_moves_the_choice_to_the_engine_that_measures_faster() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(16.0, 32768.0);
        let first = e.decide(&f, Backend::Auto).engine;
        // The chosen engine turns out 20x slower than modelled; the other as modelled.
        for _ in 0..40 {
            let d = e.decide(&f, Backend::Auto);
            let modelled = e.params().predict(d.engine, &f);
            e.observe(d.engine, &f, if d.engine == first { 20.0 * modelled } else { modelled });
        }
        assert_eq!(e.decide(&f, Backend::Auto).engine, other(first));
    }

    #[test]
    fn the_first_measurement_replaces_the_borrowed_scale() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(16.0, 32768.0);
        let d = e.decide(&f, Backend::Auto);
        let modelled = e.params().predict(d.engine, &f);
        e.observe(d.engine, &f, 7.0 * modelled);
        let (os, coll) = e.predict(&f);
        let corrected = if d.engine == Backend::Collective { coll } else { os };
        assert!((corrected / (7.0 * modelled) - 1.0).abs() < 1e-9, "{corrected} vs {}", 7.0 * modelled);
    }

    #[test]
    fn the_first_probe_of_a_bucket_happens_however_slow_the_other_engine_looks() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(16.0, 32768.0);
        let first = e.decide(&f, Backend::Auto).engine;
        // The engine in use measures 100x faster than modelled: the other looks far slower.
        let modelled = e.params().predict(first, &f);
        e.observe(first, &f, modelled / 100.0);
        let probes: Vec<Decision> = (0..10).map(|_| e.decide(&f, Backend::Auto)).filter(|d| d.probe).collect();
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].engine, other(first));
        // Measured once, and as slow as it looked: no more probes while it stays that slow.
        e.observe(other(first), &f, e.params().predict(other(first), &f));
        assert!((0..30).all(|_| !e.decide(&f, Backend::Auto).probe));
    }

    #[test]
    fn probes_are_bounded_and_periodic() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(16.0, 32768.0);
        let probes = (0..100).filter(|_| e.decide(&f, Backend::Auto).probe).count();
        assert!((9..=11).contains(&probes), "{probes} probes in 100 steps");
        let mut never = Estimator::new(CostParams::default(), Settings { probe_interval: 0, ..settings() });
        assert!((0..100).all(|_| !never.decide(&f, Backend::Auto).probe));
    }

    #[test]
    fn hysteresis_keeps_the_engine_when_costs_are_equal() {
        let mut e = Estimator::new(CostParams::default(), Settings { probe_interval: 0, hysteresis: 0.1 });
        let f = step(16.0, 32768.0);
        let first = e.decide(&f, Backend::Auto).engine;
        // Make the other engine look 5% faster: within the margin, no switch.
        let (os, coll) = e.predict(&f);
        let target = if first == Backend::OneSided { os } else { coll } * 0.95;
        let modelled = e.params().predict(other(first), &f);
        for _ in 0..30 {
            e.observe(other(first), &f, target / modelled * modelled);
        }
        assert_eq!(e.decide(&f, Backend::Auto).engine, first);
        assert_eq!(e.counters().switches, 0);
    }

    #[test]
    fn empty_steps_use_onesided() {
        let mut e = Estimator::new(CostParams::default(), settings());
        assert_eq!(e.decide(&step(0.0, 0.0), Backend::Auto).engine, Backend::OneSided);
    }
}
