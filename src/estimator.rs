//! Predicts each engine's step time from the batch plan and picks the faster one.
//!
//! Cost model for one rank's part of a step (seconds):
//!
//! ```text
//! T_onesided   = a_get * G + b_get * B
//! T_collective = R * (a_coll + a_peer * P) + b_coll * B
//! ```
//!
//! - `G`: gets this rank issues (after coalescing), `B`: remote bytes it receives,
//! - `R`: rounds of the collective exchange, `P`: ranks in the communicator,
//! - `a_get`: fixed cost of one get, `b_get`: one-sided cost per byte,
//! - `a_coll`: fixed cost of one exchange round (three collectives), `a_peer`: its cost
//!   per peer, `b_coll`: collective cost per byte (pack, transfer, unpack).
//!
//! A step is as slow as its slowest rank, so each rank's predictions are combined by
//! maximum in the step's agreement and every rank decides from the same numbers: the
//! decision is identical everywhere by construction.

use crate::config::Backend;
use crate::plan::BatchPlan;

/// The model's parameters, in seconds and seconds per byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    pub a_get: f64,
    pub b_get: f64,
    pub a_coll: f64,
    pub a_peer: f64,
    pub b_coll: f64,
}

impl Default for CostParams {
    /// Rough shared-memory figures; calibration replaces them.
    fn default() -> CostParams {
        CostParams { a_get: 1.0e-6, b_get: 1.0e-10, a_coll: 5.0e-6, a_peer: 1.0e-6, b_coll: 2.0e-10 }
    }
}

/// What the model needs to know about this rank's part of a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepFeatures {
    pub gets: u64,
    pub remote_bytes: u64,
    pub rounds: u64,
    pub ranks: usize,
}

impl StepFeatures {
    pub fn of(plan: &BatchPlan, rounds: u64, ranks: usize) -> StepFeatures {
        StepFeatures { gets: plan.gets.len() as u64, remote_bytes: plan.remote_bytes(), rounds, ranks }
    }
}

/// Predicted seconds for each engine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub onesided: f64,
    pub collective: f64,
}

pub struct Estimator {
    params: CostParams,
}

impl Estimator {
    pub fn new(params: CostParams) -> Estimator {
        Estimator { params }
    }

    pub fn predict(&self, f: &StepFeatures) -> Prediction {
        let p = &self.params;
        let bytes = f.remote_bytes as f64;
        Prediction {
            onesided: p.a_get * f.gets as f64 + p.b_get * bytes,
            collective: f.rounds as f64 * (p.a_coll + p.a_peer * f.ranks as f64) + p.b_coll * bytes,
        }
    }

    /// The engine for a step, from predictions already combined over all ranks.
    pub fn choose(&self, combined: &Prediction) -> Backend {
        if combined.collective < combined.onesided { Backend::Collective } else { Backend::OneSided }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(gets: u64, bytes: u64, ranks: usize) -> StepFeatures {
        StepFeatures { gets, remote_bytes: bytes, rounds: 1, ranks }
    }

    #[test]
    fn predictions_grow_with_bytes_and_gets() {
        let e = Estimator::new(CostParams::default());
        let small = e.predict(&features(10, 1000, 4));
        let large = e.predict(&features(100, 100_000, 4));
        assert!(large.onesided > small.onesided && large.collective > small.collective);
    }

    #[test]
    fn many_small_gets_favour_the_collective() {
        let e = Estimator::new(CostParams::default());
        assert_eq!(e.choose(&e.predict(&features(1, 2000, 2))), Backend::OneSided);
        assert_eq!(e.choose(&e.predict(&features(1000, 256_000, 2))), Backend::Collective);
    }
}
