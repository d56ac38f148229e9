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
//! choice without further communication. Deterministic to the bit: no libm function
//! is on that path ([`portable`] has the `ln`/`exp` it needs), since glibc's differ by
//! CPU and build, and one rank choosing apart would hang the job.
//!
//! Online correction, in two levels, per engine: a global scale applied to the model
//! everywhere (calibration errors are mostly the same for all batches: a transport the
//! probes did not see, a cost the model lacks) and a residual per bucket of steps
//! alike (log2 of the remote samples of the busiest rank, log2 of its mean remote
//! sample size), for regimes in which the model errs differently. Both are exponential
//! moving averages of log(measured / predicted): each measurement moves the global
//! scale, then its bucket's residual by what is left, each by at most `MAX_STEP_RATIO`
//! before weighting, so an outlier (a descheduled rank, the first, slower steps on a
//! fresh window) cannot flip a decision on its own, and a probe in one bucket informs
//! all the others. A new bucket starts from the nearest bucket's residuals. An engine
//! not measured yet borrows the other's correction, and its first measurement sets its
//! own, within MAX_STEP_RATIO of the borrowed one: unlike the later ones, not a fifth of
//! the way (see `correction` and `observe`). (A median of the last few measurements, which follows a
//! wrong calibration faster, chose the slower engine far more often in the grid: the
//! first steps of a fresh loader are several times slower, and the engine not in use
//! is measured only by probes, so its few values stayed stale.)
//!
//! What the engine AUTO runs measures moves both engines' prices alike: whatever slows
//! it (a busy core, a loaded network) slows the other as far as anyone can tell, so the
//! steps never reorder the engines; only a look at the other engine does (a probe,
//! measured against the typical of the engine in use's last `RECENT_STEPS` steps, see
//! `judge_probe`). Two steps in a row slower than predicted beyond the noise, the
//! calibration's and what the engine's last steps spread over (a surprise: the machine
//! changed), price both engines up at once by what those steps took beyond it, and
//! make a look due.
//!
//! Probes: now and then the engine not in use runs one step, so that a wrong model is
//! found out at bounded cost. A bucket's k-th probe comes `FIRST_PROBE_AFTER * 2^k`
//! steps after the previous one, at most `probe_interval` (8, 16, 32, 64, 64, ... by
//! default): early evidence is cheap and matters most. The first probe of a bucket
//! happens however slow the other engine looks; while it is predicted more than
//! `PROBE_MAX_RATIO` times slower, later ones come an interval after it was priced out,
//! then further apart, at most `PRICED_OUT_MAX_INTERVALS` intervals (a price a few
//! unlucky measurements made is checked again). Every probe waits until what the probes cost so far, and what this one is
//! predicted to cost (scaled by how far the probes so far overran their predictions),
//! fit in the budget (`Settings::probe_budget`) of all measured steps' time; where the
//! model cannot tell the engines apart or was just found wrong, the budget of one
//! probe interval is lent up front. A bucket switches engine only when the other is
//! predicted faster by more than the hysteresis margin.

pub mod calibrate;
pub mod confidence;
pub mod features;
pub mod model;
mod portable;

use crate::backend::Backend;
use model::{CostParams, StepFeatures};
use std::collections::BTreeMap;

/// The engine not in use is probed on the usual schedule only when predicted at most
/// this much slower (beyond it, see `Bucket::priced_out_look_due`).
const PROBE_MAX_RATIO: f64 = 3.0;
/// An engine priced beyond `PROBE_MAX_RATIO` is looked at again at most this many probe
/// intervals apart.
const PRICED_OUT_MAX_INTERVALS: u64 = 16;
/// Steps of a new bucket before its first probe.
const FIRST_PROBE_AFTER: u64 = 8;
/// Steps of a new bucket before its first probe where the engines' predictions lie
/// within the calibration's noise of each other (see `choose_auto`): after the two
/// steps that can make a surprise, so that a machine far slower than calibrated is
/// priced up before the look (at 2, a look measured 100x its price counted as 100x
/// over its budget, and held the next looks back for thousands of steps).
const FIRST_PROBE_WHEN_UNSURE: u64 = 3;
/// A step slower than its corrected prediction by more than this factor (log), or by
/// `SURPRISE_NOISES` times the calibration's noise where that is more, but at most
/// `SURPRISE_MAX`, is a surprise. The cap: however noisy the calibration, steps 2x
/// slower than their prediction twice in a row are worth a look (the budget bounds
/// what looks cost; the prediction follows the first step, so a 3x slower engine is 2.3x
/// off its prediction at the second).
const SURPRISE_MIN: f64 = 0.262_364_264_467_491; // ln 1.3
const SURPRISE_NOISES: f64 = 3.0;
const SURPRISE_MAX: f64 = std::f64::consts::LN_2;
/// Surprises in a row after which the other engine is looked at again at once (one is
/// a descheduled rank; two in a row, a machine that changed).
const SURPRISES_BEFORE_LOOK: u32 = 2;
/// A probe is measured against the engine in use's last this many steps in its bucket
/// (see `judge_probe`), and they show the machine's noise now.
const RECENT_STEPS: usize = 8;
/// Weight of a new measurement in a bucket's scale.
const CORRECTION_RATE: f64 = 0.2;
/// One measurement moves a scale by at most this factor (before weighting).
const MAX_STEP_RATIO: f64 = 2.0;
/// Global scales and residuals are each kept within [1/MAX_SCALE, MAX_SCALE]. (100 was
/// too tight: beside busy processes, steps take 100-250x what a lockstep calibration
/// measured.)
const MAX_SCALE: f64 = 1000.0;
/// Weight of a new collective step's spread in the job's skew: the correction's rate,
/// but without its cap: a skew the model has not priced in costs a collective step
/// what the last rank is late, orders of magnitude beyond its prediction, and one such
/// step prices the engine out. (0.5 made the estimate follow each step's spread, and
/// AUTO flipped between the engines where MPICH's one-sided steps wait too.)
const SKEW_RATE: f64 = 0.2;
/// A collective step's spread (slowest less fastest rank) up to this many times its
/// fastest rank's time is how ranks leave an exchange, not a late rank.
const SKEW_NOISE: f64 = 2.0;
/// A wait counts at most this many one-sided steps (of the step's batch) in the skew.
const SKEW_CAP: f64 = 100.0;
/// Weight of a collective step in which no rank waited for another.
const SKEW_RATE_DOWN: f64 = 0.5;
/// Weight of a step's arrival spread (one clock: every step has one, whichever its
/// engine). Spreads of a
/// training loop are heavy-tailed (median 200 us, mean 330 us, a tenth beyond 780 us
/// in `benches/lag`'s loop): at the collective steps' weight the average swung enough
/// that the probes, which wait for a low predicted cost, met spreads 3x their price.
const SKEW_RATE_ARRIVALS: f64 = 0.02;

/// A step's engine time on the slowest and on the fastest rank (as agreed), and where
/// every rank reads one clock (one machine), how far apart the ranks started it and
/// when the last one was done.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub slowest: f64,
    pub fastest: f64,
    pub spreads: Option<Spreads>,
}

impl Measured {
    /// What the step made the job wait: on one clock its span, from the first rank's
    /// start to the last rank's end (a data-parallel job goes on when its last rank has
    /// its batch), else the slowest rank's time. The two differ where the ranks start
    /// apart and the last to start has work of its own: at batch 1 on 2 ranks over TCP
    /// a one-sided step's slowest rank took 20-27 us and its span 44-49 us, a
    /// collective step both 33-43 us, and judged by the slowest rank AUTO kept the
    /// one-sided engine, with which a step took 5-15% longer end to end.
    pub fn waited(&self) -> f64 {
        self.spreads.map_or(self.slowest, |s| s.span.max(self.slowest))
    }
}

/// How far apart (seconds) the first and the last rank started a step's engine, and
/// how long from the first rank's start to the last rank's end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spreads {
    pub arrivals: f64,
    pub span: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Steps of a bucket between probes of the other engine, once settled (0: never probe).
    pub probe_interval: u64,
    /// Relative margin by which the other engine must be predicted faster to switch.
    pub hysteresis: f64,
    /// The calibration's noise per engine (log scale, see
    /// [`confidence::Confidence::noise`]): how far apart two predictions must lie before
    /// the model alone may settle a bucket, and how far a step may depart from its
    /// prediction before it is a surprise.
    pub calibration_noise: [f64; 2],
    /// What the probes may cost: their time over the preferred engine's prediction
    /// (spent, and predicted for the next one), as a fraction of every measured step's
    /// time (0: only probes predicted to cost nothing, while none has cost anything).
    pub probe_budget: f64,
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

    /// For a probe, what it was predicted to cost (to be handed back to
    /// [`Estimator::observe`] with its measured time).
    pub fn probe_prediction(&self) -> Option<ProbePrediction> {
        self.probe.then(|| ProbePrediction { preferred: self.predicted(self.engine.other()), probed: self.predicted(self.engine) })
    }
}

/// A probe's corrected predictions at its decision: of the engine it stood in for, and
/// of its own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbePrediction {
    pub preferred: f64,
    pub probed: f64,
}

impl ProbePrediction {
    fn excess(&self) -> f64 {
        (self.probed - self.preferred).max(0.0)
    }
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// log of this bucket's correction on top of the global one, per engine (index: 0
    /// one-sided, 1 collective).
    residual: [f64; 2],
    /// Measurements of each engine in this bucket.
    measured: [u64; 2],
    preferred: Option<Backend>,
    steps_since_probe: u64,
    probes: u32,
    /// Steps in a row that took longer than predicted beyond the noise (see `observe`).
    surprises: u32,
    /// The least of those steps' excess over their corrected prediction (log): how much
    /// slower than predicted the engine in use is now at least.
    surprise_floor: f64,
    /// Surprised: the other engine is looked at with the next probe the budget allows.
    look_now: bool,
    /// Probes in a row that ran faster than the engine in use beyond the hysteresis.
    faster_probes: u32,
    recent: RecentSteps,
    /// Looks at the other engine since it was last priced within `PROBE_MAX_RATIO`.
    priced_out_looks: u32,
    /// The next probe is judged against the steps of the last surprise alone.
    look_against_surprises: bool,
}

impl Bucket {
    /// Steps from one probe to the next: doubling from `FIRST_PROBE_AFTER` (from
    /// `FIRST_PROBE_WHEN_UNSURE` for the first probe of a bucket whose engines the
    /// calibration cannot tell apart) up to the interval; at once after a surprise.
    fn probe_due(&self, probe_interval: u64, unsure: bool) -> bool {
        let first = if unsure && self.probes == 0 { FIRST_PROBE_WHEN_UNSURE } else { FIRST_PROBE_AFTER };
        let gap = doubled(first, self.probes).min(probe_interval);
        probe_interval > 0 && (self.look_now || self.steps_since_probe >= gap)
    }

    /// Whether an engine priced beyond `PROBE_MAX_RATIO` is due a look: an interval
    /// after it was priced out, then ever further apart (doubling), at most
    /// `PRICED_OUT_MAX_INTERVALS` intervals apart. A price that a few unlucky
    /// measurements made (a descheduled rank, a fresh window, a congestion that passed)
    /// is checked again, within the budget; one that holds costs a look per 1,024 steps
    /// at most (by default). Never looked at again, a collective engine priced out by
    /// 600 congested steps was kept out after it turned 2x faster than the other.
    fn priced_out_look_due(&self, probe_interval: u64) -> bool {
        let gap = doubled(probe_interval, self.priced_out_looks).min(PRICED_OUT_MAX_INTERVALS * probe_interval);
        probe_interval > 0 && self.steps_since_probe >= gap
    }

}

/// The engine in use's last `RECENT_STEPS` steps in a bucket, since it became the
/// bucket's engine, newest first (infinite: none), twice: what the job waited
/// ([`Measured::waited`]: probes are judged against it) and the exchange as its model
/// sees it (the skew taken out: surprises are judged on it).
#[derive(Clone, Copy, Debug)]
struct RecentSteps {
    waited: [f64; RECENT_STEPS],
    exchange: [f64; RECENT_STEPS],
}

impl RecentSteps {
    const NONE: RecentSteps = RecentSteps { waited: [f64::INFINITY; RECENT_STEPS], exchange: [f64::INFINITY; RECENT_STEPS] };

    fn push(&mut self, waited: f64, exchange: f64) {
        self.waited.rotate_right(1);
        self.waited[0] = waited;
        self.exchange.rotate_right(1);
        self.exchange[0] = exchange;
    }

    /// The typical wait of the newest `newest` steps (their lower median), if the
    /// engine ran any.
    fn typical_waited(&self, newest: usize) -> Option<f64> {
        let mut seen = [f64::INFINITY; RECENT_STEPS];
        let mut n = 0;
        for &t in self.waited.iter().take(newest).filter(|t| t.is_finite()) {
            seen[n] = t;
            n += 1;
        }
        seen[..n].sort_unstable_by(f64::total_cmp);
        (n > 0).then(|| seen[(n - 1) / 2])
    }

    /// How far apart (log) the waits lie: the noise the machine shows now, which the
    /// calibration may not have seen (0 before two steps).
    fn waited_spread(&self) -> f64 {
        spread(&self.waited)
    }

    /// How far apart (log) the exchanges lie, the newest `skip` left out.
    fn exchange_spread(&self, skip: usize) -> f64 {
        spread(&self.exchange[skip.min(RECENT_STEPS)..])
    }
}

/// log(slowest / fastest) of the finite, positive `times`; 0 for fewer than two.
fn spread(times: &[f64]) -> f64 {
    let seen = || times.iter().copied().filter(|t| t.is_finite() && *t > 0.0);
    let (fastest, slowest) = (seen().fold(f64::INFINITY, f64::min), seen().fold(0.0, f64::max));
    if seen().count() > 1 { portable::ln(slowest / fastest) } else { 0.0 }
}

/// `first * 2^k`, saturating.
fn doubled(first: u64, k: u32) -> u64 {
    if k >= first.leading_zeros() { u64::MAX } else { first << k }
}

/// What the estimator did, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EstimatorCounters {
    pub decisions: u64,
    pub probes: u64,
    /// Changes of a bucket's preferred engine (probes, which return, are not counted).
    pub switches: u64,
    /// Decisions taken while the two engines' predictions lay within the calibration's
    /// noise of each other (beyond the hysteresis) and the other engine had not been
    /// measured in the step's bucket: the model alone could not tell.
    pub unsure: u64,
    /// Probes taken because the engine in use ran slower than predicted, beyond the
    /// noise, steps in a row.
    pub surprise_probes: u64,
}

pub struct Estimator {
    params: CostParams,
    settings: Settings,
    /// By (batch class, sample-size class). Ordered, so that the search for the nearest
    /// bucket breaks ties alike on every rank.
    buckets: BTreeMap<(usize, usize), Bucket>,
    /// log of the global correction, per engine; an engine not yet measured borrows the
    /// other's (see `correction`).
    global: [f64; 2],
    global_measured: [bool; 2],
    counters: EstimatorCounters,
    /// Seconds of all measured steps, and of the probes' excess over the preferred
    /// engine's prediction: a probe is taken only while the excess is within
    /// `probe_budget` of the total (see `choose_auto`).
    measured_seconds: f64,
    probe_excess_seconds: f64,
    /// The probes predicted to cost something over the preferred engine: their excess
    /// as measured and as predicted (see `probe_overshoot`).
    priced_probes_measured: f64,
    priced_probes_predicted: f64,
    /// The job's skew (seconds): how long a collective step's first rank waits for the
    /// last to arrive, an exponential average. The last one's time is the exchange
    /// itself, which the model predicts. One-sided steps wait for no one where gets
    /// need no target (what they do pay is priced apart: `priced_skew`). Lockstep
    /// calibration cannot see it; a training loop whose ranks arrive apart (compute
    /// that varies, a prefetch thread that waits for a core) has it. Learned from every
    /// step's arrival times where the ranks read one clock (one machine), otherwise
    /// from collective steps alone.
    skew: f64,
    /// Derived from the settings once (a series each, kept off the per-step path): the
    /// log margin within which two predictions are too close to call, the two engines'
    /// calibration noise together, and the factor by which a probe must beat the
    /// preferred engine's prediction to be taken whole (see `observe`).
    close_call: f64,
    noise_together: f64,
    decisively_faster: f64,
    /// What one-sided steps pay of it, where the ranks read one clock: exponential
    /// averages of their arrival spread and of the part of it they paid (see
    /// `learn_onesided_share`).
    onesided_spread: f64,
    onesided_waited: f64,
}

/// A multiplicative hash over 64-bit words: the estimator's fingerprint.
struct Fingerprint(u64);

impl Fingerprint {
    fn new() -> Fingerprint {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    /// One word in: a multiply and a shift (it runs on every step; byte by byte took
    /// a measurable part of a one-sample step).
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
    }
}

fn slot(engine: Backend) -> usize {
    (engine == Backend::Collective) as usize
}

/// log2 of `x`, rounded: buckets are centred on powers of two (batch sizes and sample
/// sizes often are powers of two; with the bounds there, the steps of one workload
/// would jitter between two buckets and learn everything twice). 0 for nothing.
fn log2_class(x: f64) -> usize {
    portable::log2_class(x)
}

/// (batch class, sample-size class) of a step.
fn bucket_of(f: &StepFeatures) -> (usize, usize) {
    let mean_sample = if f.samples > 0.0 { f.bytes / f.samples } else { 0.0 };
    (log2_class(f.samples), log2_class(mean_sample))
}

impl Estimator {
    pub fn new(params: CostParams, settings: Settings) -> Estimator {
        let noise_together = settings.calibration_noise[0] + settings.calibration_noise[1];
        Estimator {
            params,
            settings,
            buckets: BTreeMap::new(),
            global: [0.0; 2],
            global_measured: [false; 2],
            counters: Default::default(),
            measured_seconds: 0.0,
            probe_excess_seconds: 0.0,
            priced_probes_measured: 0.0,
            priced_probes_predicted: 0.0,
            skew: 0.0,
            onesided_spread: 0.0,
            onesided_waited: 0.0,
            close_call: portable::ln(1.0 + settings.hysteresis),
            noise_together,
            decisively_faster: (1.0 - settings.hysteresis).min(portable::exp(-noise_together)),
        }
    }

    #[cfg(test)]
    pub fn params(&self) -> &CostParams {
        &self.params
    }

    pub fn counters(&self) -> EstimatorCounters {
        self.counters
    }

    fn bucket(&mut self, f: &StepFeatures) -> &mut Bucket {
        let key = bucket_of(f);
        if !self.buckets.contains_key(&key) {
            // Neighbouring batch and sample sizes behave alike: start from the nearest
            // bucket's correction.
            let distance = |k: &(usize, usize)| k.0.abs_diff(key.0) + k.1.abs_diff(key.1);
            let nearest = self.buckets.iter().min_by_key(|(k, _)| distance(k)).map(|(_, b)| b);
            let fresh = Bucket {
                residual: nearest.map_or([0.0; 2], |b| b.residual),
                measured: [0; 2],
                preferred: None,
                steps_since_probe: 0,
                probes: 0,
                surprises: 0,
                surprise_floor: 0.0,
                look_now: false,
                faster_probes: 0,
                recent: RecentSteps::NONE,
                priced_out_looks: 0,
                look_against_surprises: false,
            };
            self.buckets.insert(key, fresh);
        }
        self.buckets.get_mut(&key).expect("inserted above")
    }

    /// Everything a decision depends on besides the step's agreed features, hashed to
    /// 52 bits (exact in the agreement's doubles). Equal on every rank while the ranks
    /// would decide alike; the steps' agreements compare it, so that a rank whose model
    /// drifted (a libm, a CPU or a bug that computes differently) fails the step on
    /// every rank instead of entering another engine's collective.
    pub fn fingerprint(&self) -> u64 {
        let mut f = Fingerprint::new();
        let p = &self.params;
        let noise = self.settings.calibration_noise;
        for v in [p.a_os, p.g_os, p.b_os, p.c_os, p.a_coll, p.s_coll, p.b_coll, p.c_coll, self.global[0], self.global[1], noise[0], noise[1]] {
            f.word(v.to_bits());
        }
        f.word(self.global_measured[0] as u64 | (self.global_measured[1] as u64) << 1);
        for (&(batch, size), b) in &self.buckets {
            f.word(batch as u64);
            f.word(size as u64);
            f.word(b.residual[0].to_bits());
            f.word(b.residual[1].to_bits());
            f.word(b.measured[0]);
            f.word(b.measured[1]);
            f.word(b.preferred.map_or(u64::MAX, |e| e as u64));
            f.word(b.steps_since_probe);
            f.word(b.probes as u64);
            f.word(b.surprises as u64 | (b.look_now as u64) << 32 | (b.faster_probes as u64) << 33);
            f.word(b.surprise_floor.to_bits());
            f.word(b.priced_out_looks as u64 | (b.look_against_surprises as u64) << 32);
            for t in b.recent.waited.iter().chain(&b.recent.exchange) {
                f.word(t.to_bits());
            }
        }
        let c = &self.counters;
        let seconds = [
            self.measured_seconds,
            self.probe_excess_seconds,
            self.priced_probes_measured,
            self.priced_probes_predicted,
            self.skew,
            self.onesided_spread,
            self.onesided_waited,
        ]
        .map(f64::to_bits);
        for w in [c.decisions, c.probes, c.switches, c.unsure, c.surprise_probes].into_iter().chain(seconds) {
            f.word(w);
        }
        f.0 >> 12
    }

    /// Corrected predictions for both engines.
    pub fn predict(&mut self, f: &StepFeatures) -> (f64, f64) {
        let params = self.params;
        let bucket = *self.bucket(f);
        let correction = [0, 1].map(|e| self.correction(e, &bucket));
        let predict = |e: Backend| params.predict(e, f) * portable::exp(correction[slot(e)]);
        (predict(Backend::OneSided), predict(Backend::Collective) + self.priced_skew())
    }

    /// The log correction of engine slot `e` in `bucket`: global and the bucket's
    /// residual; until the engine is measured, the other's. Whatever makes the engine
    /// in use slower than calibrated (the caches a large step outgrows, ranks that share
    /// cores) most likely slows the other as well: left at its calibrated cost, the
    /// engine not measured looked cheaper as soon as the one in use was corrected
    /// upwards, and AUTO switched to it outside the probes and their budget. In
    /// `benches/grid` at 4 ranks on 2 cores (Open MPI over TCP, 1024 x 16 KB) the
    /// one-sided steps took 1.7x their calibrated cost, and AUTO ran 6 of 8 steps on
    /// the collective engine, whose steps took 3.2x theirs (medians). The calibrated model names
    /// the faster engine; the probes find out where it does not.
    fn correction(&self, e: usize, bucket: &Bucket) -> f64 {
        let from = if self.global_measured[e] || !self.global_measured[1 - e] { e } else { 1 - e };
        self.global[from] + bucket.residual[from]
    }

    /// The skew a collective step makes the job wait beyond what a one-sided step does:
    /// a collective step ends the spread after its first rank started, and so does a
    /// one-sided step whose last rank to start has gets of its own (its share, learned
    /// from its span, see `learn_onesided_share`). Priced as the collective's alone
    /// (the share 0, as before spans were seen), the skew kept AUTO on the one-sided
    /// engine at batch 1 over TCP where the collective one made each step 5-15% shorter.
    /// Across machines (no one clock) the share is not seen, and the whole skew is
    /// priced.
    fn priced_skew(&self) -> f64 {
        let onesided_share = if self.onesided_spread > 0.0 { self.onesided_waited / self.onesided_spread } else { 0.0 };
        self.skew * (1.0 - onesided_share.clamp(0.0, 1.0))
    }

    /// The engine for a step. `requested` is the backend in force (AUTO or forced).
    pub fn decide(&mut self, f: &StepFeatures, requested: Backend) -> Decision {
        let (os, coll) = self.predict(f);
        let mut decision =
            Decision { engine: requested, predicted_onesided: os, predicted_collective: coll, probe: false };
        if requested == Backend::Auto {
            self.choose_auto(f, &mut decision);
        }
        self.counters.decisions += 1;
        self.counters.probes += decision.probe as u64;
        decision
    }

    fn choose_auto(&mut self, f: &StepFeatures, decision: &mut Decision) {
        if f.samples == 0.0 {
            // Nothing remote anywhere: the one-sided engine communicates not at all.
            decision.engine = Backend::OneSided;
            return;
        }
        let (os, coll) = (decision.predicted_onesided, decision.predicted_collective);
        let (settings, skew) = (self.settings, self.priced_skew());
        let (close_call, noise_together) = (self.close_call, self.noise_together);
        let (spent, earned) = (self.probe_excess_seconds, settings.probe_budget * self.measured_seconds);
        let overshoot = self.probe_overshoot();
        let bucket = self.bucket(f);
        let predicted = |e: Backend| if e == Backend::Collective { coll } else { os };
        let fastest = if coll < os { Backend::Collective } else { Backend::OneSided };
        let keep = bucket
            .preferred
            .filter(|&p| predicted(p.other()) > predicted(p) * (1.0 - settings.hysteresis))
            .unwrap_or(fastest);
        let switched = bucket.preferred.is_some_and(|p| p != keep);
        if switched {
            bucket.recent = RecentSteps::NONE;
        }
        bucket.preferred = Some(keep);
        bucket.steps_since_probe += 1;
        let never_measured = bucket.measured[slot(keep.other())] == 0;
        // Too close to call (within the hysteresis) either engine is fine; beyond it but
        // within the calibration's noise, the model alone cannot tell which is faster:
        // the other engine is measured early, as soon as the budget allows.
        let apart = if predicted(keep) > 0.0 { portable::ln(predicted(keep.other()) / predicted(keep)) } else { f64::INFINITY };
        let unsure = never_measured && apart >= close_call && apart < noise_together;
        // The looks judge the other engine's exchange without the skew (the budget
        // bounds what a look costs): across machines the skew is learned from
        // collective steps alone, so a job that has come into step would otherwise
        // never show it (on one machine every step's arrivals show it).
        let skew_of = |e: Backend| if e == Backend::Collective { skew } else { 0.0 };
        let exchange_alone = predicted(keep.other()) - skew_of(keep.other());
        let priced_out = !never_measured && exchange_alone > PROBE_MAX_RATIO * predicted(keep);
        if !priced_out {
            bucket.priced_out_looks = 0;
        }
        let worth_a_look = !priced_out || bucket.priced_out_look_due(settings.probe_interval);
        // Within budget: what the probes cost so far over the preferred engine (as
        // measured, which is where a model that has not seen the job's skew is wrong
        // by orders of magnitude) and what this one is predicted to cost over it fit in
        // `probe_budget` of all measured steps' time. A probe predicted to cost much
        // waits until the steps have earned it (the first of a bucket too: a model far
        // off is still found out, once the steps have run 1/budget times the probe's
        // predicted excess), and after a probe that cost more than predicted the next
        // waits until they have earned that back; a due probe waits, it is not skipped.
        // The prediction is scaled by what the probes have cost over theirs so far, so
        // that the budget holds when a probe is taken, not only once the steps after an
        // overrun have earned it back.
        let predicted_excess = (predicted(keep.other()) - predicted(keep)).max(0.0);
        // Where the model cannot tell the engines apart (unsure) or has just been found
        // wrong (surprised), the budget of one probe interval of the engine in use is
        // lent up front: the look is what tells, and waiting until the steps have earned
        // it kept a calibration wrong by 2x on the slower engine for 1/budget steps (25:
        // most of a grid point).
        let lent = if unsure || bucket.look_now { settings.probe_budget * settings.probe_interval as f64 * predicted(keep) } else { 0.0 };
        let affordable = spent + overshoot * predicted_excess <= earned.max(lent);
        let probing = bucket.probe_due(settings.probe_interval, unsure) && worth_a_look && affordable;
        let surprised = probing && bucket.look_now;
        if probing {
            bucket.steps_since_probe = 0;
            bucket.probes += 1;
            bucket.look_now = false;
            bucket.priced_out_looks += priced_out as u32;
        }
        if surprised && bucket.measured[slot(keep)] <= RECENT_STEPS as u64 {
            // In a bucket's first steps the surprising steps count as one look that found
            // the other engine faster (see `judge_probe`): the calibration is what they
            // found wrong (beside busy processes, 100x too cheap), and the look decides
            // at once. Later the engine's own steps are the evidence to beat: on a machine
            // that deschedules ranks at random, two slow steps after eight fast ones
            // happen, and a look counted twice moved AUTO to the slower engine (with the
            // fast steps 6 in 10: 40% of the steps on it, 9-23% with one look counted once).
            bucket.faster_probes = bucket.faster_probes.max(1);
        }
        self.counters.switches += switched as u64;
        self.counters.unsure += unsure as u64;
        self.counters.surprise_probes += surprised as u64;
        decision.probe = probing;
        decision.engine = if probing { keep.other() } else { keep };
    }

    /// Feed back the measured times of a step run with `engine`; `probe`: for a probe,
    /// what was predicted at its decision ([`Decision::probe_prediction`]). A one-sided step's cost is
    /// its slowest rank's time; a collective step's is what its first ranks waited for
    /// the last (the skew: the ranks' arrival spread where they read one clock, else the
    /// spread of their times beyond `SKEW_NOISE` times the fastest rank's) plus the rest
    /// (the exchange). On one clock every step shows the skew, one-sided ones too.
    pub fn observe(&mut self, engine: Backend, f: &StepFeatures, times: Measured, probe: Option<ProbePrediction>) {
        let measured = times.slowest;
        let mut modelled_time = measured;
        let collective = engine == Backend::Collective && times.fastest > 0.0 && times.fastest <= measured;
        if let Some(spreads) = times.spreads {
            let spread = spreads.arrivals;
            // Every step shows what a collective step's first rank waits for the last,
            // one-sided ones too: the skew is seen without running the engine that pays it.
            self.learn_skew(f, spread, SKEW_RATE_ARRIVALS);
            // A step that failed on some rank (its fastest time 0) is skipped: that
            // rank's departure is not the end of an engine's work; so is a step that ran
            // no engine (see below).
            if engine != Backend::Collective && times.fastest > 0.0 && f.samples > 0.0 {
                self.learn_onesided_share(f, spreads, times.slowest);
            }
            if collective {
                // Only the exchange itself is what its model learns.
                modelled_time = measured - spread.min(measured - times.fastest);
            }
        } else if collective {
            // The ranks leave an exchange apart even in lockstep (MPICH, 2 ranks: a
            // spread of half the step is common): without the arrivals, only a spread
            // beyond twice the fastest rank's time counts as waiting for a late rank. A
            // step in which no rank waited is strong evidence that the ranks are in
            // step now: it counts more.
            let waited = (measured - times.fastest - SKEW_NOISE * times.fastest).max(0.0);
            self.learn_skew(f, waited, if waited == 0.0 { SKEW_RATE_DOWN } else { SKEW_RATE });
            modelled_time = measured - waited;
        }
        if measured.is_finite() && measured > 0.0 {
            self.measured_seconds += measured;
            if let Some(probe) = probe {
                // What the probe made the job wait beyond what the engine in use does
                // here (its typical step, else its prediction): on one clock both spans
                // hold the skew both engines pay, which the probe does not cost.
                let in_use_waits = self.bucket(f).recent.typical_waited(RECENT_STEPS).unwrap_or(probe.preferred);
                let excess = (times.waited() - in_use_waits).max(0.0);
                self.probe_excess_seconds += excess;
                if probe.excess() > 0.0 {
                    self.priced_probes_measured += excess;
                    self.priced_probes_predicted += probe.excess();
                }
            }
        }
        // A step with no remote sample on any rank ran no engine: its time is the ranks'
        // wait for each other, no engine's cost. (At batch 1 on 2 ranks a step in four is
        // one; counted as one-sided steps they priced that engine by the waits.)
        let modelled = self.params.predict(engine, f);
        if !(modelled_time > 0.0 && modelled > 0.0) || f.samples == 0.0 {
            return;
        }
        let e = slot(engine);
        let error = portable::ln(modelled_time / modelled);
        if probe.is_none() {
            self.notice_surprise(e, f, error);
        }
        // A step of the engine AUTO runs here: what moves its correction moves the
        // other's alike (below), and a probe is measured against it.
        let in_use = probe.is_none() && self.bucket(f).preferred == Some(engine);
        let before = (self.global[e], self.bucket(f).residual[e], self.global_measured[e]);
        let residual = self.bucket(f).residual[e];
        let global = if !self.global_measured[e] && self.global_measured[1 - e] {
            // The first measurement of an engine that borrowed the other's correction
            // replaces it, by at most MAX_STEP_RATIO: moved a fifth of the way, a probe
            // that found the model's pick slower than the other left the borrowed
            // correction nearly whole, and AUTO kept the slower engine until the next.
            let bucket = *self.bucket(f);
            let borrowed = self.correction(e, &bucket) - residual;
            let limit = portable::ln(MAX_STEP_RATIO);
            let bound = portable::ln(MAX_SCALE);
            (error - residual).clamp(borrowed - limit, borrowed + limit).clamp(-bound, bound)
        } else {
            corrected(self.global[e], error - residual)
        };
        self.global[e] = global;
        self.global_measured[e] = true;
        let bucket = self.bucket(f);
        bucket.measured[e] += 1;
        bucket.residual[e] = corrected(bucket.residual[e], error - global);
        // A step that failed on some rank (its fastest time 0) ended there early or
        // late (up to MDL_TIMEOUT): its span is no engine's.
        let completed = times.fastest > 0.0;
        if in_use && completed {
            bucket.recent.push(times.waited(), modelled_time);
        }
        if in_use && before.2 {
            // What the engine in use measures moves the other engine's price alike: a
            // busy core, a loaded network, the caches a step outgrows slow both engines
            // as far as anyone can tell, and only a look at the other engine can tell
            // them apart. Left behind, the other engine's price went stale: on a machine
            // whose steps took 100x their calibrated time (cores shared with busy
            // processes), the correction of the engine in use climbed past the other's
            // stale price step after step, and AUTO switched back and forth between
            // engines 1.5x apart at nearly every step with no probe.
            let moved = [global - before.0, bucket.residual[e] - before.1];
            let bound = portable::ln(MAX_SCALE);
            bucket.residual[1 - e] = (bucket.residual[1 - e] + moved[1]).clamp(-bound, bound);
            if self.global_measured[1 - e] {
                self.global[1 - e] = (self.global[1 - e] + moved[0]).clamp(-bound, bound);
            }
        }
        if let (Some(probe), true) = (probe, completed) {
            self.judge_probe(e, f, times.waited(), modelled_time, probe.preferred);
        }
    }

    /// A probe of engine slot `e` that made the job wait `seconds` ([`Measured::waited`]),
    /// against the engine in use: the lower median of its last steps
    /// here (a step, as the probe is: the engine in use's last step alone may have been
    /// a slow one; its fastest of 8, a low quantile against one draw, kept AUTO off
    /// engines 13-15% faster on a quiet machine), of its surprising steps alone for the
    /// look a surprise made due, or, before it ran any, its prediction at the probe's
    /// decision (`preferred`). Faster beyond the calibration's noise of both engines and
    /// the machine's noise, or beyond the hysteresis twice in a row (a surprise in a
    /// bucket's first steps counts as once), the probe is taken whole: its engine is
    /// priced, skew and all, at the engine in use's price times what the probe measured over it, but at most
    /// `MAX_STEP_RATIO` cheaper, and AUTO moves now. (Moved by the usual rate, a
    /// calibration wrong by 3x took a probe every 16-64 steps for dozens of probes to
    /// undo: a whole grid point, an epoch at worst; with a busy machine's calibration
    /// noise, 3.4 in log, no single probe is decisive. Unbounded, one probe that looked
    /// 1,000x faster, a clock's glitch, priced its engine so, and the surprises of its
    /// real steps then priced the engine left 1,000x too dear: 14,000 steps on the
    /// slower engine.) Where it was luck, the next looks at the engine left find that
    /// one faster and move back.
    fn judge_probe(&mut self, e: usize, f: &StepFeatures, seconds: f64, exchange: f64, preferred: f64) {
        let (params, hysteresis, decisively_faster) = (self.params, self.settings.hysteresis, self.decisively_faster);
        let engines = [Backend::OneSided, Backend::Collective];
        let (probed, in_use) = (engines[e], engines[1 - e]);
        let bucket = *self.bucket(f);
        let against = if bucket.look_against_surprises { SURPRISES_BEFORE_LOOK as usize } else { RECENT_STEPS };
        let ratio = seconds / bucket.recent.typical_waited(against).unwrap_or(preferred);
        let faster = ratio < 1.0 - hysteresis;
        let faster_probes = if faster { bucket.faster_probes + 1 } else { 0 };
        // Decisive beyond the calibration's noise, and beyond what the engine in use's
        // last steps spread over past 2x (the machine's noise now: a quiet machine's
        // steps spread by 10-30%, and counted whole that kept AUTO off an engine 15%
        // faster; a machine that deschedules ranks spreads them 10-100x).
        let machine_noise = (bucket.recent.waited_spread() - std::f64::consts::LN_2).max(0.0);
        let decisive = ratio < decisively_faster * portable::exp(-machine_noise);
        let whole = decisive || (faster && faster_probes >= 2);
        // The ratio is of what the job waited, skew and all: it prices the probed engine
        // in all (its corrected model and, for the collective, the skew priced beyond a
        // one-sided step) at the engine in use's in all times the ratio, and its model
        // at that less its own skew. (Applied to the models alone, the skew in a
        // collective probe's span was priced a second time on top: where one-sided
        // steps hold the skew in their own time, as MPICH's early ranks do waiting for a
        // late target, a collective engine 12% faster stayed priced above the one in
        // use.) A probe that met little of a heavy-tailed skew can come in under the
        // skew's average price: its model is then priced at most MAX_STEP_RATIO below
        // its own share of the target (`exchange`, what its model learns of its
        // `seconds`), not near nothing.
        let skew_of = |engine: Backend| if engine == Backend::Collective { self.priced_skew() } else { 0.0 };
        let in_use_in_all = params.predict(in_use, f) * portable::exp(self.correction(1 - e, &bucket)) + skew_of(in_use);
        let target = in_use_in_all * ratio.max(1.0 / MAX_STEP_RATIO);
        let own_share = (exchange / seconds).clamp(0.0, 1.0);
        let model = (target - skew_of(probed)).max(target * own_share / MAX_STEP_RATIO);
        let priced = portable::ln(model / params.predict(probed, f));
        let global = self.global[e];
        let bound = portable::ln(MAX_SCALE);
        let bucket = self.bucket(f);
        bucket.look_against_surprises = false;
        bucket.faster_probes = if whole { 0 } else { faster_probes };
        if faster {
            // The next look at an engine priced out comes an interval later, not as far
            // apart as its price had held (after a congestion: 1,024 steps).
            bucket.priced_out_looks = 0;
        }
        if whole {
            bucket.residual[e] = (priced - global).clamp(-bound, bound);
        }
    }

    /// A step of engine slot `e` (not a probe) whose time is `error` (log) off the
    /// uncorrected model: against its corrected prediction, slower by more than the
    /// noise twice in a row makes a look at the other engine due at once. What slows
    /// one engine (a neighbour on the network, a busy core) need not slow the other
    /// alike, and the corrections move both engines alike.
    fn notice_surprise(&mut self, e: usize, f: &StepFeatures, error: f64) {
        let bucket = *self.bucket(f);
        // Beyond what the engine's steps here before this run of surprises spread over,
        // too: on a machine that deschedules ranks at random, two slow steps in a row
        // are the machine as it is, not a change (each such look found the other engine
        // "faster" by luck, and AUTO flapped).
        let calibrated = (SURPRISE_NOISES * self.settings.calibration_noise[e]).clamp(SURPRISE_MIN, SURPRISE_MAX);
        let threshold = calibrated.max(bucket.recent.exchange_spread(bucket.surprises as usize));
        let off = error - self.correction(e, &bucket);
        let bucket = self.bucket(f);
        if bucket.preferred.is_some_and(|p| slot(p) != e) {
            return;
        }
        if off > threshold {
            bucket.surprise_floor = if bucket.surprises == 0 { off } else { bucket.surprise_floor.min(off) };
        }
        bucket.surprises = if off > threshold { bucket.surprises + 1 } else { 0 };
        if bucket.surprises >= SURPRISES_BEFORE_LOOK {
            // The look is judged against the surprising steps (this one joins them when
            // it is remembered): against the steps before them, it found the other
            // engine slower than the engine in use had been, and was wasted.
            bucket.look_against_surprises = true;
            bucket.surprises = 0;
            bucket.look_now = true;
            // The next probes follow closely again, as in a new bucket.
            bucket.probes = 0;
            // The machine changed: both engines are priced up by what the engine in use
            // is now at least slower than predicted (its correction alone follows a
            // bounded step at a time: from a calibration 100x too cheap, 30 steps), so
            // that the look measures the other engine against that, and what it finds
            // faster or slower orders the engines.
            let raise = bucket.surprise_floor;
            let bound = portable::ln(MAX_SCALE);
            for engine in [e, 1 - e] {
                if self.global_measured[engine] {
                    self.global[engine] = (self.global[engine] + raise).clamp(-bound, bound);
                }
            }
        }
    }

    /// How many times their predicted excess the probes predicted to cost something
    /// have cost, at least 1 (at most `MAX_SCALE`). A collective probe in a training
    /// loop meets the ranks' arrival spread, which is heavy-tailed, while its price
    /// holds the spread's average: in `benches/lag`'s loop on Open MPI the probes cost
    /// 5.2-5.4% of the fetch time at a budget of 5%, the last probe's overrun.
    fn probe_overshoot(&self) -> f64 {
        if self.priced_probes_predicted > 0.0 {
            (self.priced_probes_measured / self.priced_probes_predicted).clamp(1.0, MAX_SCALE)
        } else {
            1.0
        }
    }

    /// What a one-sided step made the job wait of the ranks' arrival spread beyond its
    /// slowest rank's time (`slowest`, which its model learns): its span less that. A
    /// late rank with gets of its own ends the step the spread after the first rank
    /// started (Open MPI, where gets need no target: the whole spread); an early rank
    /// whose gets wait for a late target's progress (MPICH) holds the spread in its own
    /// time, which its model has learned already (none of it). Capped as the skew's own
    /// samples, so that one rank's pause does not move the share for long.
    fn learn_onesided_share(&mut self, f: &StepFeatures, spreads: Spreads, slowest: f64) {
        let cap = SKEW_CAP * self.predict(f).0;
        let spread = spreads.arrivals.min(cap);
        let waited = (spreads.span - slowest).clamp(0.0, spread);
        self.onesided_spread += SKEW_RATE_ARRIVALS * (spread - self.onesided_spread);
        self.onesided_waited += SKEW_RATE_ARRIVALS * (waited - self.onesided_waited);
    }

    /// One step's wait for the last rank (`waited`, seconds) into the job's skew, with
    /// weight `rate`.
    fn learn_skew(&mut self, f: &StepFeatures, waited: f64, rate: f64) {
        // Beyond SKEW_CAP one-sided steps a wait prices the collective engine out all
        // the same; counted whole, one rank's pause (a checkpoint, a second) would keep
        // it out for thousands of steps after the job is back in step (10 steps was too
        // few: a real loop's skew, 100-500 one-sided steps, then let the collective
        // engine back in buckets of larger steps).
        let onesided = self.predict(f).0;
        let sample = waited.min(SKEW_CAP * onesided);
        self.skew += rate * (sample - self.skew);
    }
}

/// A log scale moved towards `target` by one measurement: by `CORRECTION_RATE` of the
/// difference, the difference capped at `MAX_STEP_RATIO`, the result at `MAX_SCALE`.
fn corrected(log_scale: f64, target: f64) -> f64 {
    let limit = portable::ln(MAX_STEP_RATIO);
    let step = CORRECTION_RATE * (target - log_scale).clamp(-limit, limit);
    (log_scale + step).clamp(-portable::ln(MAX_SCALE), portable::ln(MAX_SCALE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { probe_interval: 10, hysteresis: 0.05, probe_budget: 0.05, calibration_noise: [0.0; 2] }
    }

    /// A step's time on every rank alike (lockstep: no skew).
    fn same(seconds: f64) -> Measured {
        Measured { slowest: seconds, fastest: seconds, spreads: None }
    }

    /// A training loop's ranks arrive up to 6 ms apart: a collective step's first ranks
    /// wait that long, its last one only exchanges. One such step prices the skew into
    /// the collective engine (from then on the slower by far), leaves the exchange's
    /// model and the one-sided engine's prediction alone, and lockstep steps wear it
    /// off.
    #[test]
    fn the_skew_of_a_collective_step_is_priced_into_the_collective_engine() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(64.0, 65536.0);
        let (os, coll) = e.predict(&f);
        // Measured as predicted: the one-sided engine has a correction of its own.
        e.observe(Backend::OneSided, &f, same(os), None);
        let exchange = e.params().predict(Backend::Collective, &f);
        e.observe(Backend::Collective, &f, Measured { slowest: 6e-3 + exchange, fastest: exchange, spreads: None }, None);
        let (os_after, coll_after) = e.predict(&f);
        assert_eq!(os_after, os, "one-sided steps wait for no one");
        let waited = (6e-3 - SKEW_NOISE * exchange).min(SKEW_CAP * os);
        assert!(coll_after >= coll + SKEW_RATE * waited, "{coll} -> {coll_after}: a share of the 6 ms waited");
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::OneSided);
        for _ in 0..200 {
            e.observe(Backend::Collective, &f, same(exchange), None);
        }
        assert!((e.predict(&f).1 - coll).abs() < 1e-9 * coll.max(1.0) + 1e-12, "the skew wears off in lockstep");
    }

    /// On one clock the ranks' arrivals show the skew in one-sided steps too: the
    /// collective engine is priced with what it makes the job wait beyond a one-sided
    /// step before it ever runs. Ranks that start 0.3 ms apart, the last of them with
    /// nothing to fetch: a one-sided step ends the spread after the first start, a
    /// collective one the spread and its exchange after it; the one-sided engine's own
    /// price stays.
    #[test]
    fn one_sided_steps_show_the_skew_on_one_clock() {
        let mut e = Estimator::new(CostParams::default(), Settings { probe_interval: 64, ..settings() });
        let f = step(4.0, 4096.0);
        let (os, coll) = e.predict(&f);
        assert!(os < coll, "one-sided preferred at first");
        let spread = 3e-4;
        let arriving_apart = |seconds: f64| Measured {
            slowest: seconds,
            fastest: seconds,
            spreads: Some(Spreads { arrivals: spread, span: spread.max(seconds) }),
        };
        // One step moves the average by its small weight: a loop's spreads are heavy-tailed.
        e.observe(Backend::OneSided, &f, arriving_apart(os), None);
        assert_eq!(e.skew, SKEW_RATE_ARRIVALS * spread);
        for _ in 0..200 {
            e.observe(Backend::OneSided, &f, arriving_apart(os), None);
        }
        let (os_after, coll_after) = e.predict(&f);
        assert!(e.skew > 0.98 * spread, "{}: the 0.3 ms the ranks arrive apart", e.skew);
        let beyond = e.skew * os / spread;
        assert!((coll_after - coll - beyond).abs() < 1e-3 * beyond, "{coll} -> {coll_after}: {beyond} beyond the one-sided step");
        assert!((os_after / os - 1.0).abs() < 1e-9, "one-sided steps wait for no one");
        // Across machines (no common clock) nothing is learned from one-sided steps.
        let mut apart = Estimator::new(CostParams::default(), settings());
        apart.observe(Backend::OneSided, &f, same(os), None);
        assert_eq!(apart.predict(&f).1, coll);
    }

    /// What of the skew a one-sided step makes the job wait is not priced into the
    /// collective engine: where the last rank to start has gets of its own (Open MPI,
    /// whose gets need no target) the step ends the whole spread after the first start,
    /// as a collective one does; where an early rank's gets wait for a late target's
    /// progress (MPICH) the wait is in its own time, which the one-sided model learns,
    /// and the whole skew is the collective's to pay beyond it. A failed step teaches
    /// nothing; one rank's pause moves the share for some 120 steps (uncapped: 320).
    #[test]
    fn the_skew_one_sided_steps_pay_too_is_not_priced_into_the_collective_engine() {
        let f = step(64.0, 65536.0);
        let spread = 3e-4;
        let after_one_sided_steps = |slowest_beyond: f64, span_beyond: f64, fastest_factor: f64| {
            let mut e = Estimator::new(CostParams::default(), settings());
            let os = e.predict(&f).0;
            let spreads = Spreads { arrivals: spread, span: os + span_beyond };
            let step_times = Measured { slowest: os + slowest_beyond, fastest: fastest_factor * os, spreads: Some(spreads) };
            for _ in 0..500 {
                e.observe(Backend::OneSided, &f, step_times, None);
            }
            (e.skew, e.priced_skew())
        };
        let (skew, priced) = after_one_sided_steps(0.0, spread, 1.0);
        assert!(skew > 0.99 * spread && priced < 1e-9 * skew, "the late rank's gets end the step: none, {priced} of {skew}");
        let (skew, priced) = after_one_sided_steps(spread, spread, 1.0);
        assert!((priced - skew).abs() < 1e-12, "the early rank's gets wait for the late target: the whole skew, {priced} of {skew}");
        let (skew, priced) = after_one_sided_steps(0.0, 0.25 * spread, 1.0);
        assert!((priced - 0.75 * skew).abs() < 1e-9 * skew, "a quarter of the spread on the step's path: {priced} of {skew}");
        let (skew, priced) = after_one_sided_steps(0.0, spread, 0.0);
        assert!((priced - skew).abs() < 1e-12, "failed steps: nothing learned, {priced} of {skew}");
        // A one-sided loop that makes the job wait 70% of a 300 us spread beyond its own
        // time, and one step in which a rank paused for 2 s (a checkpoint).
        let mut e = Estimator::new(CostParams::default(), settings());
        let os = e.predict(&f).0;
        let step_with = |arrivals: f64| Measured {
            slowest: os,
            fastest: os,
            spreads: Some(Spreads { arrivals, span: os + 0.7 * arrivals }),
        };
        for _ in 0..500 {
            e.observe(Backend::OneSided, &f, step_with(spread), None);
        }
        let share = |e: &Estimator| 1.0 - e.priced_skew() / e.skew;
        assert!((share(&e) - 0.7).abs() < 1e-6, "{}", share(&e));
        // The paused rank had gets of its own: the step ended 2 s after the first start.
        let paused = Measured { slowest: os, fastest: os, spreads: Some(Spreads { arrivals: 2.0, span: 2.0 + os }) };
        e.observe(Backend::OneSided, &f, paused, None);
        let back = (1..=1000).find(|_| {
            e.observe(Backend::OneSided, &f, step_with(spread), None);
            (share(&e) - 0.7).abs() < 0.05
        });
        assert!(back.is_some_and(|steps| steps <= 150), "back within 0.05 of the share after {back:?} steps");
    }

    /// With the arrivals known, a collective step's skew is what its first rank waited,
    /// not a share of its time spread (MPICH: ranks leave an exchange apart), and it
    /// weighs as much as any step's.
    #[test]
    fn a_collective_step_on_one_clock_takes_the_arrivals_as_its_wait() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(64.0, 65536.0);
        let exchange = e.params().predict(Backend::Collective, &f);
        let spreads = Spreads { arrivals: 1.5 * exchange, span: 3.0 * exchange };
        let late = Measured { slowest: 3.0 * exchange, fastest: exchange, spreads: Some(spreads) };
        e.observe(Backend::Collective, &f, late, None);
        assert_eq!(e.skew, SKEW_RATE_ARRIVALS * (1.5 * exchange), "the arrivals' spread, weighted as every step's");
        // Without the arrivals, only the spread beyond twice the fastest rank's time.
        let mut apart = Estimator::new(CostParams::default(), settings());
        apart.observe(Backend::Collective, &f, Measured { spreads: None, ..late }, None);
        assert_eq!(apart.skew, 0.0);
    }

    #[test]
    fn a_lockstep_spread_is_not_skew() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(64.0, 65536.0);
        let exchange = e.params().predict(Backend::Collective, &f);
        for _ in 0..50 {
            e.observe(Backend::Collective, &f, Measured { slowest: 2.0 * exchange, fastest: 0.8 * exchange, spreads: None }, None);
        }
        assert_eq!(e.skew, 0.0);
        let mut lockstep = Estimator::new(CostParams::default(), settings());
        for _ in 0..50 {
            lockstep.observe(Backend::Collective, &f, same(2.0 * exchange), None);
        }
        assert_eq!(e.predict(&f), lockstep.predict(&f));
    }

    /// A job whose ranks came into step after a skewed start: the skew priced the
    /// collective engine out, and only collective steps measure it; the periodic probes
    /// judge the exchange without it, find the job in lockstep, and AUTO returns to the
    /// collective engine where it is the faster.
    #[test]
    fn a_skew_that_is_gone_is_found_out_by_the_probes() {
        // Gets that cost 1 us each: the collective engine moves many small samples faster.
        let params = CostParams { g_os: 1e-6, ..CostParams::default() };
        let mut e = Estimator::new(params, Settings { probe_budget: 1.0, ..settings() });
        let f = step(1024.0, 1024.0 * 64.0);
        let (os, coll) = e.predict(&f);
        assert!(coll < os, "a batch the collective engine moves faster ({coll} vs {os})");
        let exchange = e.params().predict(Backend::Collective, &f);
        // One rank a second late.
        e.observe(Backend::Collective, &f, Measured { slowest: 1.0 + exchange, fastest: exchange, spreads: None }, None);
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::OneSided, "priced out by the skew");
        let collective_steps = (0..200)
            .filter(|_| {
                let d = e.decide(&f, Backend::Auto);
                let t = e.params().predict(d.engine, &f);
                e.observe(d.engine, &f, same(t), d.probe_prediction());
                d.engine == Backend::Collective
            })
            .count();
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::Collective, "{collective_steps} collective steps");
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
            e.observe(d.engine, &f, same(if d.engine == first { 20.0 * modelled } else { modelled }), None);
        }
        assert_eq!(e.decide(&f, Backend::Auto).engine, first.other());
    }

    /// The model names the one-sided engine (10 us against 12 us), whose steps then
    /// take 3x that: the collective engine, not measured, borrows the correction and
    /// stays the slower one, so AUTO does not switch to it outside the probes. Two
    /// steps that slow in a row are a surprise: the first probe comes at the third
    /// step, not on the schedule's eighth. A probe that measures the collective engine
    /// faster than the one-sided engine was predicted (12 us) is taken whole, and AUTO
    /// moves to it; one that finds it slower (40 us, within 2x of the borrowed price)
    /// replaces the borrowed correction with what it measured.
    #[test]
    fn an_engine_not_measured_borrows_the_correction_of_the_one_in_use() {
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 12e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let f = step(16.0, 32768.0);
        let until_the_first_probe = || {
            let mut e = Estimator::new(params, Settings { probe_budget: 1e9, ..settings() });
            for k in 1..=SURPRISES_BEFORE_LOOK {
                let d = e.decide(&f, Backend::Auto);
                assert!(!d.probe && d.engine == Backend::OneSided, "step {k}: no switch to an engine not measured");
                e.observe(Backend::OneSided, &f, same(30e-6), None);
            }
            let (os, coll) = e.predict(&f);
            assert!((coll / os - 1.2).abs() < 1e-9, "borrowed: the model's ratio stands ({os} vs {coll})");
            let d = e.decide(&f, Backend::Auto);
            assert!(d.probe && d.engine == Backend::Collective, "the first probe comes after two surprises");
            assert_eq!(e.counters().surprise_probes, 1);
            (e, d)
        };
        let (mut e, probe) = until_the_first_probe();
        let os = e.predict(&f).0;
        e.observe(Backend::Collective, &f, same(12e-6), probe.probe_prediction());
        let (os_after, coll_after) = e.predict(&f);
        assert_eq!(os_after, os, "the probe leaves the one-sided engine's correction alone");
        assert!((coll_after / 15e-6 - 1.0).abs() < 1e-9, "taken whole, at most 2x cheaper than one-sided's 30 us: {coll_after}");
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::Collective);

        let (mut e, probe) = until_the_first_probe();
        let coll = e.predict(&f).1;
        assert!(40e-6 > coll && 40e-6 < MAX_STEP_RATIO * coll);
        e.observe(Backend::Collective, &f, same(40e-6), probe.probe_prediction());
        assert!((e.predict(&f).1 / 40e-6 - 1.0).abs() < 1e-9, "within 2x of the borrowed price: what it measured");
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::OneSided);
    }

    /// The calibration's noise steers decisions (unsure buckets, surprises), so it is
    /// part of the fingerprint the ranks compare at every step: two estimators that
    /// differ in it alone must not agree, or ranks holding different noise (a source
    /// not agreed on, as MDL_CALIBRATION files were) would choose apart unseen.
    #[test]
    fn the_fingerprint_holds_the_calibrations_noise() {
        let with = |noise: [f64; 2]| Estimator::new(CostParams::default(), Settings { calibration_noise: noise, ..settings() }).fingerprint();
        assert_eq!(with([0.1, 0.2]), with([0.1, 0.2]));
        assert_ne!(with([0.1, 0.2]), with([0.1 + 1e-12, 0.2]));
        assert_ne!(with([0.1, 0.2]), with([0.1, 0.3]));
        assert_ne!(with([0.0, 0.0]), with([-0.0, 0.0]), "bit for bit: the file's -0 is loaded as 0");
    }

    /// Runs `steps` AUTO steps whose engines take `truth(engine)`; the steps' total time.
    fn run(e: &mut Estimator, f: &StepFeatures, steps: usize, mut truth: impl FnMut(Backend) -> f64) -> f64 {
        (0..steps)
            .map(|_| {
                let d = e.decide(f, Backend::Auto);
                let t = truth(d.engine);
                e.observe(d.engine, f, same(t), d.probe_prediction());
                t
            })
            .sum()
    }

    /// A calibration taken under a burst of load priced the collective engine 3x above
    /// the one-sided one, where it is 3x below (the grid's MPICH points of 256 B
    /// samples, batch 1024, under load: one-sided 0.22 ms, collective 0.076 ms). The
    /// first probe waits until the budget covers its predicted excess, finds the
    /// collective engine faster, and AUTO keeps it from then on: over 1,000 steps the
    /// wrong calibration costs what the steps before that probe lost.
    #[test]
    fn a_calibration_wrong_by_3x_costs_the_steps_before_one_probe() {
        let params = CostParams { a_os: 220e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 660e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, ..settings() });
        let f = step(1024.0, 262144.0);
        let truth = |engine: Backend| if engine == Backend::Collective { 76e-6 } else { 220e-6 };
        let total = run(&mut e, &f, 1000, truth);
        let oracle = 1000.0 * 76e-6;
        assert!(total < 1.15 * oracle, "AUTO {total} s against {oracle} s");
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::Collective);
        assert_eq!(e.counters().switches, 1, "one switch, and it holds");
    }

    /// With a noisy calibration (0.5 each, a factor 2.7 for both together) a probe 1.5x
    /// faster than the engine in use is one lucky step, not evidence: moved the usual
    /// fifth of the way, AUTO keeps its engine; 3x faster is taken whole. (The collective
    /// engine measured once before, at its calibrated cost: a first measurement replaces
    /// a borrowed correction anyway, see `an_engine_not_measured_borrows...`.)
    #[test]
    fn a_probe_faster_only_within_the_noise_is_not_taken_whole() {
        let params = CostParams { a_os: 100e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 150e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let f = step(64.0, 65536.0);
        let after_a_probe_of = |seconds: f64| {
            let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 1e9, calibration_noise: [0.5; 2] });
            e.observe(Backend::Collective, &f, same(150e-6), None);
            let d = (0..100).map(|_| {
                let d = e.decide(&f, Backend::Auto);
                if !d.probe {
                    e.observe(d.engine, &f, same(100e-6), None);
                }
                d
            }).find(|d| d.probe).expect("a probe within 100 steps");
            e.observe(d.engine, &f, same(seconds), d.probe_prediction());
            e.decide(&f, Backend::Auto).engine
        };
        assert_eq!(after_a_probe_of(100e-6 / 1.5), Backend::OneSided);
        assert_eq!(after_a_probe_of(100e-6 / 3.0), Backend::Collective);
    }

    /// The model was right, then the engine in use turns 3x slower (a neighbour's
    /// traffic, a busy core) while the other does not: two steps in a row beyond the
    /// noise make a probe due, within the budget, and AUTO moves.
    #[test]
    fn a_machine_that_changes_under_the_engine_in_use_is_noticed() {
        let params = CostParams { a_os: 100e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 150e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [0.05; 2] });
        let f = step(64.0, 65536.0);
        run(&mut e, &f, 500, |engine| if engine == Backend::Collective { 150e-6 } else { 100e-6 });
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::OneSided);
        let moved = (1..=100).find(|_| {
            run(&mut e, &f, 1, |engine| if engine == Backend::Collective { 150e-6 } else { 300e-6 });
            e.decide(&f, Backend::Auto).engine == Backend::Collective
        });
        assert!(moved.is_some_and(|steps| steps <= 10), "moved after {moved:?} steps");
        assert!(e.counters().surprise_probes >= 1);
        // As noisy a calibration as a busy machine gives (measured at 4 ranks, load 10):
        // 3x slower steps are still a surprise.
        let mut noisy = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [1.488, 1.956] });
        run(&mut noisy, &f, 500, |engine| if engine == Backend::Collective { 150e-6 } else { 100e-6 });
        let surprises = noisy.counters().surprise_probes;
        run(&mut noisy, &f, 20, |engine| if engine == Backend::Collective { 150e-6 } else { 300e-6 });
        assert!(noisy.counters().surprise_probes > surprises, "a 3x slower engine in use is a surprise however noisy the calibration");
        // Steps within the noise are no surprise: no probe beyond the schedule.
        let mut calm = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 1e9, calibration_noise: [0.2; 2] });
        let mut slower = false;
        run(&mut calm, &f, 300, |engine| {
            slower = !slower;
            if engine == Backend::Collective { 150e-6 } else if slower { 180e-6 } else { 100e-6 }
        });
        assert_eq!(calm.counters().surprise_probes, 0, "1.8x steps within 3 x 0.2 of noise");
    }

    /// After a surprise the probes follow closely again, as in a new bucket: the machine
    /// changed, and one look at the other engine is one step of evidence. Here the
    /// engine in use turns 3x slower and the other 4x: AUTO looks at the other, finds
    /// it slower and stays, and the looks that follow come on a new schedule, not the
    /// settled one's 64 steps apart.
    #[test]
    fn a_surprise_restarts_the_probe_schedule() {
        let params = CostParams { a_os: 100e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 150e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 1e9, calibration_noise: [0.05; 2] });
        let f = step(64.0, 65536.0);
        run(&mut e, &f, 1000, |engine| if engine == Backend::Collective { 150e-6 } else { 100e-6 });
        let probes_at: Vec<usize> = (0..100)
            .filter(|_| {
                let d = e.decide(&f, Backend::Auto);
                e.observe(d.engine, &f, same(if d.engine == Backend::Collective { 600e-6 } else { 300e-6 }), d.probe_prediction());
                d.probe
            })
            .collect();
        assert_eq!(e.counters().surprise_probes, 1, "{probes_at:?}");
        assert_eq!(e.decide(&f, Backend::Auto).engine, Backend::OneSided);
        // The look right after the second surprising step, then gaps of 16 and 32:
        // restarted (settled, the next look would come 64 steps after it). Both engines
        // priced up by the surprise, no step after it is one.
        assert_eq!(probes_at, [2, 18, 50]);
    }

    /// Engines predicted 1.3x apart: with a calibration this noisy (0.3 each, sum 0.6 >
    /// ln 1.3) the model cannot tell them apart, and the other engine is measured at
    /// the second step; with a quiet one (0.05 each), on the schedule (the eighth); too
    /// close to call (within the hysteresis), on the schedule as well.
    #[test]
    fn engines_within_the_calibrations_noise_are_both_measured_early() {
        let first_probe = |a_coll: f64, noise: f64| {
            let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
            let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 1e9, calibration_noise: [noise; 2] });
            let f = step(16.0, 32768.0);
            let probe = (1..=20).find(|_| {
                let d = e.decide(&f, Backend::Auto);
                e.observe(d.engine, &f, same(d.predicted(d.engine)), d.probe_prediction());
                d.probe
            });
            (probe, e.counters().unsure)
        };
        assert_eq!(first_probe(13e-6, 0.3), (Some(FIRST_PROBE_WHEN_UNSURE), FIRST_PROBE_WHEN_UNSURE));
        assert_eq!(first_probe(13e-6, 0.05), (Some(FIRST_PROBE_AFTER), 0));
        assert_eq!(first_probe(10.5e-6, 0.3), (Some(FIRST_PROBE_AFTER), 0), "too close to call");
        // 1.6x apart (ln 0.47): beyond either engine's noise, within both together.
        assert_eq!(first_probe(16e-6, 0.3), (Some(FIRST_PROBE_WHEN_UNSURE), FIRST_PROBE_WHEN_UNSURE));
    }

    #[test]
    fn one_outlier_moves_a_scale_by_a_bounded_factor() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(16.0, 32768.0);
        let d = e.decide(&f, Backend::Auto);
        let modelled = e.params().predict(d.engine, &f);
        e.observe(d.engine, &f, same(100.0 * modelled), None);
        let (os, coll) = e.predict(&f);
        let corrected = if d.engine == Backend::Collective { coll } else { os };
        // The global scale and the bucket's residual move once each.
        let bound = MAX_STEP_RATIO.powf(2.0 * CORRECTION_RATE);
        assert!(corrected > modelled && corrected <= bound * modelled * (1.0 + 1e-12), "{corrected} vs {modelled}");
    }

    #[test]
    fn what_one_bucket_learns_corrects_the_others() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let (small, large) = (step(4.0, 4096.0), step(1024.0, 16.0 * 1048576.0));
        for _ in 0..100 {
            let modelled = e.params().predict(Backend::OneSided, &small);
            e.observe(Backend::OneSided, &small, same(5.0 * modelled), None);
        }
        let (os, _) = e.predict(&large);
        let ratio = os / e.params().predict(Backend::OneSided, &large);
        assert!(ratio > 4.0 && ratio < 6.0, "a bucket never measured is corrected by {ratio}");
    }

    #[test]
    fn the_first_probe_of_a_bucket_happens_however_slow_the_other_engine_looks() {
        // A budget that covers any probe: only the schedule and the ratio decide. The
        // collective engine is modelled 100x slower (and borrows the one-sided engine's
        // correction until measured, so it looks that much slower).
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 1e-3, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_budget: 1e9, ..settings() });
        let f = step(16.0, 32768.0);
        for _ in 0..100 {
            e.observe(Backend::OneSided, &f, same(10e-6), None);
        }
        let (os, coll) = e.predict(&f);
        assert!(coll > PROBE_MAX_RATIO * os);
        let probes: Vec<Decision> = (0..10).map(|_| e.decide(&f, Backend::Auto)).filter(|d| d.probe).collect();
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].engine, Backend::Collective);
        // Measured once, and as slow as it looked: looked at again an interval (10) after
        // the probe (2 decisions ago), then 20 and 40 steps apart, doubling up to 16
        // intervals.
        e.observe(Backend::Collective, &f, same(1e-3), None);
        let looks: Vec<u32> = (1..=100).filter(|_| e.decide(&f, Backend::Auto).probe).collect();
        assert_eq!(looks, [8, 28, 68]);
    }

    /// The engine in use takes `T` a step as predicted, the other is predicted 3T: its
    /// first probe waits until the budget (5%) of the steps' time covers the 2T it is
    /// predicted to cost over the preferred engine, about 40 steps, not the 8 of the
    /// schedule.
    #[test]
    fn an_expensive_first_probe_waits_until_the_steps_have_earned_it() {
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 30e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, ..settings() });
        let f = step(16.0, 32768.0);
        let first_probe = (1..=200).find(|_| {
            let d = e.decide(&f, Backend::Auto);
            e.observe(d.engine, &f, same(d.predicted(d.engine)), d.probe_prediction());
            d.probe
        });
        assert_eq!(first_probe, Some(41), "2T of excess fits in 5% of 40 steps of T");
    }

    /// A probe of the engine predicted faster (kept out by the hysteresis) is predicted to
    /// cost nothing: even a zero budget lets it run on schedule.
    #[test]
    fn a_probe_predicted_cheaper_needs_no_budget() {
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 10.5e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.0, ..settings() });
        let f = step(16.0, 32768.0);
        // The collective engine measured once, at 10 us: its correction is its own.
        e.observe(Backend::Collective, &f, same(10e-6), None);
        let first_probe = (1..=16).find(|_| {
            let d = e.decide(&f, Backend::Auto);
            // One-sided measures 11 us: predicted above collective's 10.5 us, within the margin.
            e.observe(d.engine, &f, same(11e-6), d.probe_prediction());
            assert!(d.probe || d.engine == Backend::OneSided);
            d.probe
        });
        assert_eq!(first_probe, Some(8), "on the schedule, not held back");
    }

    #[test]
    fn probes_are_bounded_and_periodic() {
        let mut e = Estimator::new(CostParams::default(), Settings { probe_budget: 1e9, ..settings() });
        let f = step(16.0, 32768.0);
        let probes = (0..100)
            .filter(|_| {
                let d = e.decide(&f, Backend::Auto);
                e.observe(d.engine, &f, same(d.predicted(d.engine)), d.probe_prediction());
                d.probe
            })
            .count();
        assert!((9..=11).contains(&probes), "{probes} probes in 100 steps");
        let mut never = Estimator::new(CostParams::default(), Settings { probe_interval: 0, ..settings() });
        assert!((0..100).all(|_| !never.decide(&f, Backend::Auto).probe));
    }

    /// A training loop the calibration never saw: the preferred engine takes 40 us a
    /// step, the other (predicted close) 6 ms when probed, as a collective step that
    /// waits for the ranks' skew does. The probes' excess stays within the budget of
    /// all steps' time, plus the one probe that found it out; cheap probes keep their
    /// schedule.
    #[test]
    fn probes_cost_at_most_their_budget() {
        for (probe_cost, budget) in [(6e-3, 0.05), (6e-3, 0.2), (6e-3, 0.0)] {
            let settings = Settings { probe_budget: budget, ..settings() };
            let mut e = Estimator::new(CostParams::default(), settings);
            let f = step(64.0, 65536.0);
            let (mut total, mut excess, mut probes) = (0.0, 0.0, 0);
            for _ in 0..4000 {
                let d = e.decide(&f, Backend::Auto);
                let (measured, instead) = if d.probe {
                    probes += 1;
                    (probe_cost, Some(ProbePrediction { preferred: 40e-6, probed: d.predicted(d.engine) }))
                } else {
                    (40e-6, None)
                };
                total += measured;
                excess += instead.map_or(0.0, |p| measured - p.preferred);
                // What the model learns is beside the point: keep it from learning that
                // the probed engine is slow, so that only the budget holds the probes.
                e.observe(d.engine, &f, same(measured), instead);
                e.global = [0.0; 2];
                e.buckets.values_mut().for_each(|b| b.residual = [0.0; 2]);
            }
            assert!(excess <= budget * total + probe_cost, "budget {budget}: {probes} probes cost {excess} of {total} s");
            if budget > 0.0 {
                assert!(probes >= 1, "the first probe is taken once the steps have earned its predicted cost");
            } else {
                assert_eq!(probes, 0, "a zero budget allows no probe predicted to cost anything");
            }
        }
        // Probes predicted and measured to cost nothing over the preferred engine (the
        // engines predicted alike) keep their schedule.
        let alike = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 10e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(alike, settings());
        let f = step(16.0, 32768.0);
        let probes = (0..100)
            .filter(|_| {
                let d = e.decide(&f, Backend::Auto);
                let instead = d.probe.then_some(ProbePrediction { preferred: 1e-5, probed: 1e-5 });
                e.observe(d.engine, &f, same(1e-5), instead);
                d.probe
            })
            .count();
        assert!((9..=11).contains(&probes), "{probes} probes in 100 steps");
    }

    /// The engine in use takes `T` a step, as predicted; the other is predicted 3T, and
    /// its probes take 7T: three times the 2T of excess predicted (the heavy tail of a
    /// loop's arrival spread). From the second probe on, each is priced at what the
    /// probes have cost over their predictions, so the budget holds whenever one is
    /// taken, not only once the steps after it have earned its overrun back.
    #[test]
    fn probes_that_overran_their_prediction_are_priced_at_what_they_cost() {
        let t = 10e-6;
        let params = CostParams { a_os: t, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 3.0 * t, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 8, ..settings() });
        let f = step(16.0, 32768.0);
        let (mut total, mut excess, mut probes) = (0.0, 0.0, 0);
        for _ in 0..20_000 {
            let d = e.decide(&f, Backend::Auto);
            let measured = if d.probe { 7.0 * t } else { t };
            e.observe(d.engine, &f, same(measured), d.probe_prediction());
            // Keep the model from learning the probed engine's time: only the budget holds the probes.
            e.global = [0.0; 2];
            e.buckets.values_mut().for_each(|b| b.residual = [0.0; 2]);
            total += measured;
            if d.probe {
                probes += 1;
                excess += measured - t;
                if probes > 1 {
                    assert!(excess <= 0.05 * total * (1.0 + 1e-12), "probe {probes}: {excess} of {total} s");
                }
            }
        }
        assert!((e.probe_overshoot() - 3.0).abs() < 1e-9, "{}", e.probe_overshoot());
        assert!(probes >= 100, "{probes} probes: the budget still lets them run");
    }

    /// Steps of `f` run with AUTO, the one-sided engine taking 10 us but its first
    /// measurements `first` times that, the collective engine 15 us; the steps run on the
    /// collective (slower) engine.
    fn on_the_slower_engine(params: CostParams, noise: f64, first: &[f64], steps: usize) -> usize {
        let f = step(16.0, 32768.0);
        let settings = Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [noise; 2] };
        let mut e = Estimator::new(params, settings);
        let mut onesided_steps = 0;
        let mut slower = 0;
        for _ in 0..steps {
            let d = e.decide(&f, Backend::Auto);
            let t = if d.engine == Backend::Collective {
                slower += 1;
                15e-6
            } else {
                onesided_steps += 1;
                10e-6 * first.get(onesided_steps - 1).copied().unwrap_or(1.0)
            };
            e.observe(d.engine, &f, same(t), d.probe_prediction());
        }
        slower
    }

    /// One slow first measurement (a fresh window, a descheduled rank: 5-10x) of the
    /// faster engine, in use or probed, must not price it out for good: beyond
    /// `PROBE_MAX_RATIO` it is not probed again. (A change that took an engine's first
    /// measurements whole, 44237b9, ran 4,999 of 5,000 steps on the 1.5x slower engine
    /// here; found by a hostile review and reverted.)
    #[test]
    fn one_slow_first_measurement_does_not_price_the_faster_engine_out() {
        let model = |a_os: f64, a_coll: f64| CostParams { a_os, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        for noise in [0.0, 0.1, 0.3] {
            for first in [&[5.0][..], &[10.0], &[10.0, 3.0, 2.0]] {
                let slower = on_the_slower_engine(model(10e-6, 12e-6), noise, first, 5000);
                assert!(slower < 250, "noise {noise}, one-sided's first steps {first:?}x: {slower} of 5000 steps on the slower engine");
            }
        }
        // The model names the collective engine; the one-sided engine's first measurement,
        // a probe, lands on a descheduled slice.
        for noise in [0.0, 0.1] {
            for outlier in [1.0, 3.0, 5.0, 10.0] {
                let slower = on_the_slower_engine(model(12e-6, 10e-6), noise, &[outlier], 5000);
                assert!(slower < 2500, "noise {noise}, a first probe {outlier}x: {slower} of 5000 steps on the slower engine");
            }
        }
    }

    /// Runs AUTO for `steps` steps of one bucket, 20 times with seeds 0..20, on a
    /// machine whose engines take `truth(engine, rng)`, with a calibration that prices
    /// the one-sided engine at `calibrated.0` and the collective at `calibrated.1`, as
    /// noisy as `noise` says. Per seed: the steps on the collective engine in the first
    /// `early` steps and in all, and the switches.
    fn auto_on(calibrated: (f64, f64), noise: f64, early: usize, steps: usize, truth: impl Fn(Backend, &mut crate::rng::SplitMix64) -> f64) -> Vec<(usize, usize, u64)> {
        let params = CostParams { a_os: calibrated.0, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: calibrated.1, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let f = step(64.0, 131072.0);
        (0..20)
            .map(|seed| {
                let mut rng = crate::rng::SplitMix64::new(seed);
                let settings = Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [noise; 2] };
                let mut e = Estimator::new(params, settings);
                let (mut early_collective, mut collective) = (0, 0);
                for k in 0..steps {
                    let d = e.decide(&f, Backend::Auto);
                    let t = truth(d.engine, &mut rng);
                    e.observe(d.engine, &f, same(t), d.probe_prediction());
                    let on_collective = (d.engine == Backend::Collective) as usize;
                    collective += on_collective;
                    early_collective += if k < early { on_collective } else { 0 };
                }
                (early_collective, collective, e.counters().switches)
            })
            .collect()
    }

    /// A machine whose cores are shared with busy processes (4 ranks and two `yes` on 2
    /// cores): a step takes whole scheduler slices of 4 ms, the one-sided engine 4 and
    /// the collective 6, give or take one a step in four (Open MPI over TCP in the
    /// loaded grid: one-sided 16 ms, collective 24 ms, medians, at every batch). The
    /// calibration, taken in lockstep, prices both 100-200x too cheap, in either order,
    /// as noisy as a busy machine makes it or quiet. Before both engines' prices moved
    /// together, the correction of the engine in use climbed past the other's stale
    /// price step after step: AUTO ran 11-18 of the first 30 steps on the slower engine.
    #[test]
    fn a_sliced_machine_settles_on_the_engine_of_fewer_slices_at_once() {
        let sliced = |engine: Backend, rng: &mut crate::rng::SplitMix64| {
            let slices = if engine == Backend::Collective { 6.0 } else { 4.0 };
            let jitter = [-1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0][rng.below(8) as usize];
            4e-3 * (slices + jitter)
        };
        for calibrated in [(100e-6, 200e-6), (200e-6, 100e-6), (150e-6, 160e-6)] {
            for noise in [0.1, 1.5] {
                let runs = auto_on(calibrated, noise, 30, 1000, sliced);
                let case = format!("calibrated {calibrated:?}, noise {noise}: (early, all, switches) by seed {runs:?}");
                // A look that lands a slice late (1 in 8) finds the engines alike, and
                // the next looks come 16 and 32 steps later: rare, not never.
                let late = runs.iter().filter(|r| r.0 > 4).count();
                assert!(late <= 2, "{case}: more than 4 of the first 30 steps on the slower engine in {late} runs of 20");
                assert!(runs.iter().all(|r| r.1 <= 70 && r.2 <= 2), "{case}");
            }
        }
    }

    /// A machine that deschedules ranks at random: a step takes its engine's time (the
    /// one-sided 100 us, the collective 150 us) or, a time in `1 - p_fast`, 4-28 ms more,
    /// whichever the engine. Where the slow steps are most (p_fast 0.1, 0.3) which engine
    /// runs hardly matters and no estimator can tell them apart in a few steps: AUTO
    /// must not flap (before both engines' prices moved together: a median of 30-57
    /// switches in 1,000 steps; 1-5 now). Where the fast steps are most (0.6) the
    /// engines' own times show: over the six calibrations, the seeds' median steps on
    /// the slower engine sum to 2,130 of 6,000 before, 1,835 now (a wrong calibration,
    /// confident, still keeps AUTO on the slower engine until its look is affordable).
    #[test]
    fn a_machine_that_deschedules_at_random_does_not_make_auto_flap() {
        let median = |mut v: Vec<u64>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut on_the_slower = 0;
        for p_fast in [0.1, 0.3, 0.6] {
            let descheduled = move |engine: Backend, rng: &mut crate::rng::SplitMix64| {
                let own = if engine == Backend::Collective { 150e-6 } else { 100e-6 };
                if (rng.below(1000) as f64) < p_fast * 1000.0 { own } else { own + 4e-3 * (1 + rng.below(7)) as f64 }
            };
            for calibrated in [(100e-6, 200e-6), (200e-6, 100e-6), (150e-6, 160e-6)] {
                for noise in [0.1, 1.5] {
                    let runs = auto_on(calibrated, noise, 30, 1000, descheduled);
                    let case = format!("p_fast {p_fast}, calibrated {calibrated:?}, noise {noise}: (early, all, switches) by seed {runs:?}");
                    assert!(median(runs.iter().map(|r| r.2).collect()) <= 8, "{case}");
                    if p_fast > 0.5 {
                        on_the_slower += median(runs.iter().map(|r| r.1 as u64).collect());
                    }
                }
            }
        }
        assert!(on_the_slower <= 2000, "fast steps 6 in 10: {on_the_slower} of 6,000 steps on the slower engine");
    }

    /// The model is right (one-sided 10 us, collective 15 us) until one collective probe
    /// looks 1,000x faster than it ran: its fastest rank done at once across machines (a
    /// step's cost is then 3x the fastest rank's), or a clock's glitch. Taken whole
    /// without a bound, it priced the collective engine 1,000x too cheap, the surprises
    /// of its real steps then priced the one-sided engine 1,000x too dear, and AUTO ran
    /// 2,800-14,000 steps on the slower engine (found by a hostile review).
    #[test]
    fn one_probe_that_looks_a_thousand_times_faster_costs_a_few_steps() {
        let f = step(64.0, 131072.0);
        for glitch in [Measured { slowest: 15e-6, fastest: 15e-9, spreads: None }, same(15e-9), same(1e-12), same(f64::MIN_POSITIVE)] {
            let settings = Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [0.1; 2] };
            let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 15e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
            let mut e = Estimator::new(params, settings);
            let (mut glitched, mut slower) = (false, 0);
            for k in 0..20_000 {
                let d = e.decide(&f, Backend::Auto);
                let times = if d.probe && k >= 5000 && !glitched {
                    glitched = true;
                    glitch
                } else {
                    same(if d.engine == Backend::Collective { 15e-6 } else { 10e-6 })
                };
                e.observe(d.engine, &f, times, d.probe_prediction());
                slower += (!d.probe && d.engine == Backend::Collective) as usize;
            }
            assert!(glitched && slower < 100, "{glitch:?}: {slower} steps on the 1.5x slower engine");
        }
    }

    /// The collective engine (15 us, one-sided 10 us) is congested for 600 steps (60 us),
    /// then turns 2x faster than the one-sided one (5 us): priced out late in a run, it
    /// must be looked at again. (Counted from the bucket's first probe, the gap to the
    /// next look had grown to 2^51 steps: 16,400 of 16,400 steps on the slower engine,
    /// before this change and after its first version; found by a hostile review.)
    #[test]
    fn an_engine_priced_out_late_in_a_run_is_looked_at_again() {
        let f = step(64.0, 131072.0);
        let settings = Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [0.1; 2] };
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 15e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, settings);
        let collective = |k: usize| if k < 3000 { 15e-6 } else if k < 3600 { 60e-6 } else { 5e-6 };
        let mut slower = 0;
        for k in 0..20_000 {
            let d = e.decide(&f, Backend::Auto);
            e.observe(d.engine, &f, same(if d.engine == Backend::Collective { collective(k) } else { 10e-6 }), d.probe_prediction());
            slower += (k >= 3600 && !d.probe && d.engine == Backend::OneSided) as usize;
        }
        assert!(slower < 1000, "{slower} of 16,400 steps on the 2x slower engine");
    }

    /// Steps of one bucket (64 x 2 KB) with AUTO, the engines' times given by
    /// `truth(step, engine)`, one-sided calibrated at 10 us and collective at
    /// `collective_calibrated`; the steps from `from` on that ran the engine `slower(step)`
    /// names (probes not counted).
    fn steps_on_the_slower(collective_calibrated: f64, noise: f64, from: usize, steps: usize, truth: impl Fn(usize, Backend) -> Measured, slower: impl Fn(usize) -> Backend) -> usize {
        let f = step(64.0, 131072.0);
        let params = CostParams { a_os: 10e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: collective_calibrated, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let mut e = Estimator::new(params, Settings { probe_interval: 64, hysteresis: 0.1, probe_budget: 0.04, calibration_noise: [noise; 2] });
        (0..steps)
            .filter(|&k| {
                let d = e.decide(&f, Backend::Auto);
                e.observe(d.engine, &f, truth(k, d.engine), d.probe_prediction());
                k >= from && !d.probe && d.engine == slower(k)
            })
            .count()
    }

    /// One-sided (10 us) turns 3x slower; the collective engine (20 us) is now the
    /// faster. The look the surprise makes due is judged against the surprising steps:
    /// against the last steps, some from before the change, it found the collective
    /// engine slower than one-sided had been, and was wasted (48 steps on the slower
    /// engine; found by a hostile review). Now it counts as one look that found it
    /// faster, and the next, 16 steps on, moves AUTO. (Counted twice, such looks moved
    /// AUTO to the slower engine on a machine that deschedules ranks at random.)
    #[test]
    fn the_look_after_a_surprise_is_judged_against_the_steps_since_the_change() {
        let truth = |k: usize, engine: Backend| same(if engine == Backend::Collective { 20e-6 } else if k >= 3000 { 30e-6 } else { 10e-6 });
        let slower = |k: usize| if k >= 3000 { Backend::OneSided } else { Backend::Collective };
        let wrong = steps_on_the_slower(20e-6, 0.1, 3000, 4000, truth, slower);
        assert!(wrong < 20, "{wrong} steps on the 1.5x slower one-sided engine after it turned 3x slower");
    }

    /// The collective engine congested for 3,000 steps (60 us; one-sided 10 us), then 2x
    /// faster (5 us), with a calibration as noisy as 0.5 (a look 2x faster is then not
    /// decisive): the looks, doubled apart during the congestion, come an interval apart
    /// again once one finds it faster (before: the next 1,024 steps later, 1,160 of
    /// 14,000 steps on the slower engine; found by a hostile review).
    #[test]
    fn a_look_that_finds_a_priced_out_engine_faster_brings_the_next_closer() {
        let collective = |k: usize| if k < 3000 { 15e-6 } else if k < 6000 { 60e-6 } else { 5e-6 };
        let truth = |k: usize, engine: Backend| same(if engine == Backend::Collective { collective(k) } else { 10e-6 });
        let wrong = steps_on_the_slower(15e-6, 0.5, 6000, 20_000, truth, |_| Backend::OneSided);
        assert!(wrong < 300, "{wrong} of 14,000 steps on the 2x slower engine");
    }

    /// Across machines, the collective engine in use (exchange 2 ms, one-sided 8 ms), its
    /// ranks arriving 1-6 ms apart at random, then its exchange 4x slower. Surprises are
    /// judged on the exchange against the exchanges' spread: against the waits' spread,
    /// the arrivals' jitter hid the change for 48 steps (17 with a steady skew; found
    /// by a hostile review).
    #[test]
    fn a_skew_that_jitters_does_not_hide_a_slower_exchange() {
        let rng = std::cell::RefCell::new(crate::rng::SplitMix64::new(7));
        let exchange = |k: usize| if k >= 3000 { 8e-3 } else { 2e-3 };
        let truth = |k: usize, engine: Backend| {
            let arrivals = 1e-3 + 5e-3 * rng.borrow_mut().below(1000) as f64 / 1000.0;
            if engine == Backend::Collective {
                Measured { slowest: exchange(k) + arrivals, fastest: exchange(k), spreads: None }
            } else {
                same(8e-3)
            }
        };
        let slower = |k: usize| if k >= 3000 { Backend::Collective } else { Backend::OneSided };
        let wrong = steps_on_the_slower(2e-3, 0.1, 3000, 6000, truth, slower);
        assert!(wrong < 25, "{wrong} steps on the collective engine after its exchange turned 4x slower");
    }

    /// A quiet machine, the engines 1.2x apart (one-sided 39.6 us, collective 33 us, each
    /// step off by a log-normal 10%), the collective engine calibrated 3x too dear (Open
    /// MPI and MPICH over TCP at batch 1 in the quiet grid). Judged against the fastest
    /// of the engine in use's last 8 steps (a low quantile against one draw) and beyond
    /// their spread, the probes found the collective engine "not faster" and AUTO ran
    /// 160 of 200 steps on one-sided (seeds' median); against their median, it moves
    /// once its first look is affordable.
    #[test]
    fn a_quiet_machine_lets_a_probe_show_an_engine_a_fifth_faster() {
        let quiet = |engine: Backend, rng: &mut crate::rng::SplitMix64| {
            let own = if engine == Backend::Collective { 33e-6 } else { 39.6e-6 };
            let (u, v) = ((rng.below(1 << 30) as f64 + 0.5) / (1u64 << 30) as f64, (rng.below(1 << 30) as f64 + 0.5) / (1u64 << 30) as f64);
            own * (0.1 * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()).abs().exp()
        };
        let mut on_one_sided: Vec<usize> = auto_on((33e-6, 100e-6), 0.05, 30, 200, quiet).iter().map(|r| 200 - r.1).collect();
        on_one_sided.sort();
        assert!(on_one_sided[10] <= 70, "steps on the 1.2x slower engine by seed: {on_one_sided:?}");
    }

    /// Steps with no remote sample on any rank run no engine (the loader reports them as
    /// one-sided, at what the ranks waited for each other): they leave both engines'
    /// prices alone.
    #[test]
    fn a_step_that_ran_no_engine_prices_neither() {
        let mut e = Estimator::new(CostParams::default(), settings());
        let f = step(1.0, 256.0);
        let before = e.predict(&f);
        for _ in 0..50 {
            e.observe(Backend::OneSided, &step(0.0, 0.0), same(70e-6), None);
        }
        assert_eq!(e.predict(&f), before);
        assert_eq!(e.decide(&step(0.0, 0.0), Backend::Auto).engine, Backend::OneSided);
    }

    #[test]
    fn hysteresis_keeps_the_engine_when_costs_are_equal() {
        let mut e = Estimator::new(CostParams::default(), Settings { probe_interval: 0, hysteresis: 0.1, probe_budget: 0.05, ..settings() });
        let f = step(16.0, 32768.0);
        let first = e.decide(&f, Backend::Auto).engine;
        // Make the other engine look 5% faster: within the margin, no switch.
        let (os, coll) = e.predict(&f);
        let target = if first == Backend::OneSided { os } else { coll } * 0.95;
        let modelled = e.params().predict(first.other(), &f);
        for _ in 0..30 {
            e.observe(first.other(), &f, same(target / modelled * modelled), None);
        }
        assert_eq!(e.decide(&f, Backend::Auto).engine, first);
        assert_eq!(e.counters().switches, 0);
    }

    #[test]
    fn buckets_are_centred_on_powers_of_two() {
        assert_eq!(log2_class(0.0), 0);
        assert_eq!(log2_class(1.0), 1);
        for p in [16.0f64, 512.0, 16384.0] {
            let c = log2_class(p);
            assert!([0.8 * p, 0.99 * p, 1.01 * p, 1.4 * p].iter().all(|&x| log2_class(x) == c), "{p}");
            assert_ne!(log2_class(0.7 * p), c);
            assert_ne!(log2_class(1.42 * p), c);
        }
    }

    #[test]
    fn empty_steps_use_onesided() {
        let mut e = Estimator::new(CostParams::default(), settings());
        assert_eq!(e.decide(&step(0.0, 0.0), Backend::Auto).engine, Backend::OneSided);
    }

    /// Two ranks on one clock, the last to start `s` late with gets of its own. A
    /// one-sided step: the early rank's time holds `alpha * s` (0: Open MPI, gets need no
    /// target; 1: MPICH, its gets wait for the late target's progress) and its own `t`;
    /// the job waits `s + t` (the span). A collective step: the first rank waits `s`, then
    /// the exchange `x`; the job waits `s + x`. Returns (steps on collective, probes,
    /// switches, probe overshoot) over `steps` AUTO steps.
    fn one_clock_loop(alpha: f64, s: f64, t: f64, x: f64, calibrated: (f64, f64), steps: usize) -> (usize, u64, u64, f64) {
        one_clock_loop_late_by(alpha, || s, t, x, calibrated, steps)
    }

    /// As `one_clock_loop`, the last rank `late()` behind at each step.
    fn one_clock_loop_late_by(
        alpha: f64,
        mut late: impl FnMut() -> f64,
        t: f64,
        x: f64,
        calibrated: (f64, f64),
        steps: usize,
    ) -> (usize, u64, u64, f64) {
        let params = CostParams { a_os: calibrated.0, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: calibrated.1, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
        let settings = Settings { probe_interval: 64, hysteresis: 0.05, probe_budget: 0.04, calibration_noise: [0.1; 2] };
        let mut e = Estimator::new(params, settings);
        let f = step(64.0, 131072.0);
        let mut on_collective = 0;
        for _ in 0..steps {
            let s = late();
            let d = e.decide(&f, Backend::Auto);
            let times = if d.engine == Backend::Collective {
                on_collective += 1;
                Measured { slowest: s + x, fastest: x, spreads: Some(Spreads { arrivals: s, span: s + x }) }
            } else {
                Measured { slowest: alpha * s + t, fastest: t, spreads: Some(Spreads { arrivals: s, span: s + t }) }
            };
            e.observe(d.engine, &f, times, d.probe_prediction());
        }
        let c = e.counters();
        (on_collective, c.probes, c.switches, e.probe_overshoot())
    }

    /// Where a one-sided step's early rank waits for the late target (alpha 1, MPICH),
    /// the share is 0 and the whole skew is priced into the collective engine; a
    /// collective probe faster by span (350 vs 400 us) is taken whole at the one-sided
    /// engine's price (which holds the skew) times the spans' ratio, and `priced_skew`
    /// is added on top: the skew counted twice, the collective engine priced at
    /// 2s + x = 650 us, AUTO stays on the slower engine.
    #[test]
    fn a_collective_engine_faster_by_span_is_chosen_where_one_sided_steps_hold_the_skew() {
        let mut failed = vec![];
        for calibrated in [(100e-6, 50e-6), (100e-6, 150e-6), (400e-6, 350e-6)] {
            let (coll, probes, switches, overshoot) = one_clock_loop(1.0, 300e-6, 100e-6, 50e-6, calibrated, 5000);
            if coll <= 4000 {
                failed.push(format!("calibrated {calibrated:?}: {coll} of 5000 steps on the collective (faster by span), probes {probes}, switches {switches}, overshoot {overshoot}"));
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }

    /// The same with gets that need no target (alpha 0, Open MPI): a sanity check of the
    /// commit's own case.
    #[test]
    fn a_collective_engine_faster_by_span_is_chosen_where_gets_need_no_target() {
        for calibrated in [(100e-6, 50e-6), (100e-6, 150e-6), (400e-6, 350e-6)] {
            let (coll, probes, switches, overshoot) = one_clock_loop(0.0, 300e-6, 100e-6, 50e-6, calibrated, 5000);
            assert!(coll > 4000, "calibrated {calibrated:?}: {coll} of 5000 steps on the collective (faster by span), probes {probes}, switches {switches}, overshoot {overshoot}");
        }
    }

    /// And the reverse: the one-sided engine faster by span (400 vs 450 us) is kept, for
    /// either alpha.
    #[test]
    fn a_one_sided_engine_faster_by_span_is_kept() {
        for alpha in [0.0, 0.5, 1.0] {
            for calibrated in [(100e-6, 150e-6), (100e-6, 50e-6), (100e-6, 300e-6)] {
                let (coll, probes, switches, overshoot) = one_clock_loop(alpha, 300e-6, 100e-6, 150e-6, calibrated, 5000);
                assert!(coll < 1000, "alpha {alpha}, calibrated {calibrated:?}: {coll} of 5000 steps on the collective (slower by span), probes {probes}, switches {switches}, overshoot {overshoot}");
            }
        }
    }

    /// The probe budget charges a collective probe its slowest rank's time (s + x) over
    /// the one-sided prediction (t), but with the share at 1 (Open MPI) its predicted
    /// excess holds no skew: the overshoot (measured over predicted excess) climbs to
    /// (s + x - t) / (x - t) and throttles the looks, though in span the probe cost x - t.
    #[test]
    fn the_probe_budget_counts_no_skew_both_engines_pay() {
        let (coll, probes, switches, overshoot) = one_clock_loop(0.0, 300e-6, 100e-6, 110e-6, (100e-6, 110e-6), 5000);
        assert!(overshoot < 2.0, "overshoot {overshoot}: probes {probes} (64-step interval: ~78), {coll} steps on collective, switches {switches}");
    }

    /// As `one_clock_loop`, but the late rank's lateness varies per step (exponential,
    /// mean `s`: a loop's spreads are heavy-tailed).
    /// Fractions of steps on the collective engine over 20 seeds.
    fn noisy_one_clock_loop(alpha: f64, s: f64, t: f64, x: f64, calibrated: (f64, f64), steps: usize) -> Vec<f64> {
        (0..20)
            .map(|seed| {
                let mut rng = crate::rng::SplitMix64::new(seed);
                let exponential = || -s * ((rng.below(1 << 20) as f64 + 1.0) / (1u64 << 20) as f64).ln();
                let (on_collective, ..) = one_clock_loop_late_by(alpha, exponential, t, x, calibrated, steps);
                on_collective as f64 / steps as f64
            })
            .collect()
    }

    /// A heavy-tailed skew (mean 300 us) that both engines pay, where gets need no
    /// target; the collective engine's own part 70 us against the one-sided 100 us (the
    /// job waits ~7% less with it), or 130 us. Judged by each step's span, a probe's one
    /// draw of the skew against the engine in use's median: AUTO runs the faster engine
    /// at 91-92% of the steps where it is the collective. (Where an early rank's gets wait for the late target, the
    /// one-sided model learns the skew's draws too and AUTO finds it at 35-77%: a known
    /// limit of judging by spans, see docs/estimator.md.)
    #[test]
    fn a_heavy_tailed_skew_both_engines_pay_hides_neither() {
        let mut failed = vec![];
        for alpha in [0.0] {
            for (x, faster_is_collective) in [(70e-6, true), (130e-6, false)] {
                for calibrated in [(100e-6, 70e-6), (100e-6, 130e-6)] {
                    let runs = noisy_one_clock_loop(alpha, 300e-6, 100e-6, x, calibrated, 5000);
                    let mut sorted = runs.clone();
                    sorted.sort_by(f64::total_cmp);
                    let median = sorted[10];
                    let on_faster = if faster_is_collective { median } else { 1.0 - median };
                    eprintln!("alpha {alpha}, x {x:e}, calibrated {calibrated:?}: median fraction on the faster engine {on_faster:.3}, per seed on collective {runs:.2?}");
                    if on_faster < 0.8 {
                        failed.push(format!("alpha {alpha}, x {x:e}, calibrated {calibrated:?}: median {on_faster:.3} on the faster engine"));
                    }
                }
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }

    /// Open MPI-like (alpha 0), the ranks 50 us apart, the collective engine's span
    /// 80 us against the one-sided 150 us (decisively faster), calibrated the other way
    /// round. Every `every` steps one rank pauses 20 ms before its step (a log line, a
    /// checkpoint): on one clock that step's span holds the pause, and the engine in use's
    /// last 8 waits spread by ln(20 ms / 150 us), which no probe can beat decisively.
    /// Steps until AUTO is on the collective engine, with and without pauses.
    #[test]
    fn a_paused_rank_does_not_delay_a_decisive_switch() {
        let until_switch = |every: usize| {
            let params = CostParams { a_os: 100e-6, g_os: 0.0, b_os: 0.0, c_os: 0.0, a_coll: 150e-6, s_coll: 0.0, b_coll: 0.0, c_coll: 0.0 };
            let settings = Settings { probe_interval: 64, hysteresis: 0.05, probe_budget: 0.04, calibration_noise: [0.1; 2] };
            let mut e = Estimator::new(params, settings);
            let f = step(64.0, 131072.0);
            let mut on_collective_since = None;
            for k in 0..5000 {
                let late = if every > 0 && k % every == every - 1 { 20e-3 } else { 50e-6 };
                let d = e.decide(&f, Backend::Auto);
                let times = if d.engine == Backend::Collective {
                    Measured { slowest: late + 30e-6, fastest: 30e-6, spreads: Some(Spreads { arrivals: late, span: late + 30e-6 }) }
                } else {
                    Measured { slowest: 100e-6, fastest: 100e-6, spreads: Some(Spreads { arrivals: late, span: late + 100e-6 }) }
                };
                e.observe(d.engine, &f, times, d.probe_prediction());
                match (d.engine == Backend::Collective && !d.probe, on_collective_since) {
                    (true, None) => on_collective_since = Some(k),
                    (false, _) if !d.probe => on_collective_since = None,
                    _ => {}
                }
            }
            on_collective_since
        };
        let quiet = until_switch(0);
        let paused = until_switch(8);
        eprintln!("on the collective engine for good from step {quiet:?} (no pauses), {paused:?} (a pause every 8 steps)");
        assert!(paused.is_some_and(|p| p <= quiet.unwrap() + 64), "no pauses: {quiet:?}, a pause every 8 steps: {paused:?}");
    }
}
