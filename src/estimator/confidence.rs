//! How far a calibration can be trusted: the noise of its repetitions, how well the
//! model fits its probes, and how much each fitted parameter depends on any one probe.
//!
//! A calibration taken during a burst of load (another job, a daemon, the trainer's own
//! threads) measures the engines as they ran then; its parameters say nothing of that.
//! These figures do, and the estimator acts on them: where the two engines' predictions
//! lie within the calibration's noise of each other, it measures both online before it
//! settles (see `Estimator::choose_auto`); where a step departs from its prediction by
//! more than the noise, it looks at the other engine again.
//!
//! Everything here is computed from agreed times with `+ - * /`, `sqrt` and
//! [`portable::ln`], so every rank gets the same bits: the noise steers decisions.

use super::model::CostParams;
use super::portable;
use crate::backend::Backend;

/// The noise assumed where nothing was measured (the default parameters, a rank alone):
/// a factor of 2 either way. Then every bucket whose engines are predicted within 4x of
/// each other measures both before it settles.
pub const UNCALIBRATED_NOISE: f64 = std::f64::consts::LN_2;

/// The log-scale spread of a probe's repetitions (each engine's, as agreed: the
/// slowest rank's times): ln of its upper over its lower quartile (of 3 repetitions,
/// the largest over the smallest). How much one measurement of a step this size may
/// move on this machine now.
pub fn repetition_spread(sorted_reps: &[f64]) -> f64 {
    let n = sorted_reps.len();
    if n < 2 || sorted_reps[n / 4] <= 0.0 {
        return 0.0;
    }
    portable::ln(sorted_reps[n - 1 - n / 4] / sorted_reps[n / 4])
}

/// The median of `values` (0 for none); the mean of the middle two for an even count.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

/// The median of |ln(fitted / measured)| over the probes: how far the model's shape
/// misses what was measured, whatever the noise. The median, not the root mean square:
/// where the fit drops a term (a fixed cost fitted to 0 beside large batches), the one
/// batch that term served is missed by a factor of 40, and a mean made that the noise
/// of every prediction (ln 40 / sqrt 7 = 1.4 at 4 ranks on a busy machine: every bucket
/// "unsure", no step ever a surprise).
pub fn fit_miss(rows: &[Vec<f64>], times: &[f64], coefficients: &[f64]) -> f64 {
    let misses: Vec<f64> = rows
        .iter()
        .zip(times)
        .filter(|&(_, &t)| t > 0.0)
        .map(|(row, &t)| {
            let fitted: f64 = row.iter().zip(coefficients).map(|(x, c)| x * c).sum();
            if fitted > 0.0 { portable::ln(fitted / t).abs() } else { 0.0 }
        })
        .collect();
    median(&misses)
}

/// Each coefficient's jackknife spread relative to its value: the fit repeated with
/// each probe left out in turn (`fit`: the same weighted fit as the calibration's).
/// 0 where the coefficient and all its refits are 0 (a term the probes do not hold);
/// `f64::INFINITY` where a refit is impossible (fewer probes than coefficients + 1)
/// or the coefficient is 0 but some refit is not.
pub fn jackknife_spread(rows: &[Vec<f64>], times: &[f64], full: &[f64], fit: impl Fn(&[Vec<f64>], &[f64]) -> Option<Vec<f64>>) -> Vec<f64> {
    let n = rows.len();
    let k = full.len();
    if n <= k {
        return vec![f64::INFINITY; k];
    }
    let mut refits = Vec::with_capacity(n);
    for left_out in 0..n {
        let keep = |i: &usize| *i != left_out;
        let r: Vec<Vec<f64>> = (0..n).filter(keep).map(|i| rows[i].clone()).collect();
        let t: Vec<f64> = (0..n).filter(keep).map(|i| times[i]).collect();
        match fit(&r, &t) {
            Some(c) => refits.push(c),
            None => return vec![f64::INFINITY; k],
        }
    }
    (0..k)
        .map(|j| {
            let mean = refits.iter().map(|c| c[j]).sum::<f64>() / n as f64;
            let variance = refits.iter().map(|c| (c[j] - mean) * (c[j] - mean)).sum::<f64>() * (n - 1) as f64 / n as f64;
            match (full[j] > 0.0, variance > 0.0) {
                (true, _) => variance.sqrt() / full[j],
                (false, false) => 0.0,
                (false, true) => f64::INFINITY,
            }
        })
        .collect()
}

/// What the calibration knows of its own quality: per engine, the noise of a
/// prediction (log scale: 0.1 is about 10%), and per parameter its jackknife spread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Confidence {
    /// Per engine (0 one-sided, 1 collective): the larger of the probes' median
    /// repetition spread and the fit's miss.
    pub noise: [f64; 2],
    /// Each parameter's jackknife spread over its value (0: exact or unused; infinite:
    /// not measurable from the probes taken).
    pub spread: CostParams,
}

impl Confidence {
    /// Nothing measured: the default noise, every parameter unknown.
    pub fn unmeasured() -> Confidence {
        let unknown = f64::INFINITY;
        Confidence {
            noise: [UNCALIBRATED_NOISE; 2],
            spread: CostParams { a_os: unknown, g_os: unknown, b_os: unknown, c_os: unknown, a_coll: unknown, s_coll: unknown, b_coll: unknown, c_coll: unknown },
        }
    }

    /// Parameters given by the user (a file): as trusted as the file says.
    pub fn given(noise: [f64; 2]) -> Confidence {
        Confidence { noise, ..Confidence::unmeasured() }
    }

    /// Of a fitted engine: its probes' repetition spreads, rows, times and coefficients.
    /// The noise is the larger of the median repetition spread and the fit's miss.
    pub fn set_engine(&mut self, engine: Backend, spreads: &[f64], rows: &[Vec<f64>], times: &[f64], coefficients: &[f64], fit: impl Fn(&[Vec<f64>], &[f64]) -> Option<Vec<f64>>) {
        let e = (engine == Backend::Collective) as usize;
        self.noise[e] = median(spreads).max(fit_miss(rows, times, coefficients));
        self.spread.set_coefficients(engine, &jackknife_spread(rows, times, coefficients, fit));
    }

    /// An engine whose default parameters were scaled to too few batches to fit them:
    /// its level is measured, its shape is not, so its noise is at least the
    /// uncalibrated one and no parameter has a spread.
    pub fn set_scaled_engine(&mut self, engine: Backend, spreads: &[f64], rows: &[Vec<f64>], times: &[f64], coefficients: &[f64]) {
        let e = (engine == Backend::Collective) as usize;
        self.noise[e] = median(spreads).max(fit_miss(rows, times, coefficients)).max(UNCALIBRATED_NOISE);
        self.spread.set_coefficients(engine, &[f64::INFINITY; 4]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::model::fit_nonnegative;

    #[test]
    fn repetitions_spread_by_their_quartiles() {
        assert_eq!(repetition_spread(&[1.0, 1.0, 1.0]), 0.0);
        assert!((repetition_spread(&[1.0, 1.5, 2.0]) - portable::ln(2.0)).abs() < 1e-15);
        // Six repetitions: one slow outlier at either end does not count.
        assert!((repetition_spread(&[0.1, 1.0, 1.1, 1.2, 1.3, 9.0]) - portable::ln(1.3)).abs() < 1e-15);
        assert_eq!(repetition_spread(&[1.0]), 0.0);
    }

    #[test]
    fn an_exact_linear_model_has_no_miss_and_no_spread() {
        let rows: Vec<Vec<f64>> = (1..=6).map(|i| vec![1.0, i as f64]).collect();
        let times: Vec<f64> = rows.iter().map(|r| 2e-6 + 3e-7 * r[1]).collect();
        let fit = |r: &[Vec<f64>], t: &[f64]| fit_nonnegative(r, t);
        let c = fit(&rows, &times).unwrap();
        assert!(fit_miss(&rows, &times, &c) < 1e-9);
        for s in jackknife_spread(&rows, &times, &c, fit) {
            assert!(s < 1e-6, "{s}");
        }
    }

    /// One probe measured 3x slower than the others show (a burst of load): the fit
    /// misses it, the parameters it moves most spread most, and the noise (a median)
    /// stays that of the other probes.
    #[test]
    fn a_probe_taken_under_load_shows_as_miss_and_spread() {
        let rows: Vec<Vec<f64>> = (1..=6).map(|i| vec![1.0, (i * i) as f64]).collect();
        let mut times: Vec<f64> = rows.iter().map(|r| 2e-6 + 3e-7 * r[1]).collect();
        times[5] *= 3.0;
        let fit = |r: &[Vec<f64>], t: &[f64]| fit_nonnegative(r, t);
        let c = fit(&rows, &times).unwrap();
        let worst = rows.iter().zip(&times).map(|(r, t)| portable::ln((r[0] * c[0] + r[1] * c[1]) / t).abs()).fold(0.0, f64::max);
        assert!(worst > 0.3, "the fit misses the slow probe: {worst}");
        assert!(fit_miss(&rows, &times, &c) < worst / 2.0, "a median, not moved by one probe: {}", fit_miss(&rows, &times, &c));
        let spread = jackknife_spread(&rows, &times, &c, fit);
        assert!(spread[1] > 0.1, "{spread:?}");
        // Too few probes to leave one out.
        assert!(jackknife_spread(&rows[..2], &times[..2], &c, fit_nonnegative).iter().all(|s| s.is_infinite()));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
