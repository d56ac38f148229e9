//! What a step measured, carried to the other ranks by a later step's agreement: each
//! rank's engine time and when it entered and left the engine, combined there into the
//! slowest and fastest rank's times and the ranks' spreads (see [`agreement_values`]).

use crate::backend::Backend;
use crate::estimator::model::StepFeatures;
use crate::estimator::{ProbePrediction, Spreads};

pub struct PendingMeasurement {
    /// The step's number on this loader (its estimator decisions so far), for the log.
    pub step: u64,
    pub engine: Backend,
    pub features: StepFeatures,
    /// This rank's time; 0 when the step failed here.
    pub seconds: f64,
    /// When this rank started the step's engine (`node::monotonic_seconds`).
    pub arrived: f64,
    /// When this rank left it, on the same clock: `arrived + seconds` would mix the
    /// shared clock with `MPI_Wtime`, which may be another clock (MPICH's may follow
    /// wall time, and a wall clock may be stepped between the two readings).
    pub departed: f64,
    /// For a probe: what was predicted at its decision.
    pub probe: Option<ProbePrediction>,
}

/// The values each rank contributes to a step's agreement: the times of the steps it
/// ran since the last agreement started (the same number on every rank, since all
/// ran the same steps), then the same times negated (the all-reduce's maximum of
/// those is the fastest rank's time), then when it started each of those steps'
/// engines, and the same negated (the last and the first rank's arrival), then when
/// it left them (the last departure), then the step's features (see
/// `estimator::features`). The features start at [`times_len`].
pub fn agreement_values(measured: &[PendingMeasurement], features_len: usize) -> Vec<f64> {
    let n = measured.len();
    let mut values = vec![0.0; times_len(measured) + features_len];
    for (k, m) in measured.iter().enumerate() {
        values[k] = m.seconds;
        values[n + k] = -m.seconds;
        values[2 * n + k] = m.arrived;
        values[3 * n + k] = -m.arrived;
        values[4 * n + k] = m.departed;
    }
    values
}

/// Values per measured step in an agreement (see [`agreement_values`]).
pub(crate) const VALUES_PER_MEASUREMENT: usize = 5;

/// One earlier step as the ranks agreed on it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgreedStep {
    /// The slowest and the fastest rank's engine time.
    pub slowest: f64,
    pub fastest: f64,
    /// How far apart the ranks started the engine, and how long from the first rank's
    /// start to the last rank's end (on one clock).
    pub spreads: Spreads,
}

/// The `n` measured steps of an agreement, from the maxima of every rank's
/// [`agreement_values`] (its first [`times_len`] values).
pub fn agreed_steps(maxima: &[f64], n: usize) -> impl Iterator<Item = AgreedStep> + '_ {
    let column = move |c: usize, k: usize| maxima[c * n + k];
    (0..n).map(move |k| AgreedStep {
        slowest: column(0, k),
        fastest: -column(1, k),
        spreads: Spreads {
            arrivals: (column(2, k) + column(3, k)).max(0.0),
            span: (column(4, k) + column(3, k)).max(0.0),
        },
    })
}

pub fn times_len(measured: &[PendingMeasurement]) -> usize {
    VALUES_PER_MEASUREMENT * measured.len()
}

/// The most measured steps one agreement brings: its buffers are reserved ahead for a
/// bounded number of values. Each step adds one measurement and each agreement takes up
/// to this many, so the ones left (after an epoch's last steps, which start no
/// agreement) come with the next agreements.
pub(crate) const MEASUREMENTS_PER_AGREEMENT: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// `departed` is not `arrived + seconds` here: the departure is read on its own, on
    /// the arrivals' clock, after the engine.
    fn measurement(seconds: f64, arrived: f64, departed: f64) -> PendingMeasurement {
        let features = StepFeatures { gets: 1.0, samples: 1.0, bytes: 1.0, rounds: 1.0, served: 1.0 };
        PendingMeasurement { step: 0, engine: Backend::OneSided, features, seconds, arrived, departed, probe: None }
    }

    /// What each rank proposes, combined as the agreement's all-reduce does (maximum),
    /// reads back as the slowest and fastest rank's times and the arrivals' spread.
    #[test]
    fn the_agreement_brings_each_steps_extremes() {
        let ranks = [
            vec![measurement(3e-6, 100.000_010, 100.000_020), measurement(9e-6, 100.000_500, 100.000_600)],
            vec![measurement(5e-6, 100.000_002, 100.000_012), measurement(4e-6, 100.000_900, 100.000_950)],
            vec![measurement(1e-6, 100.000_004, 100.000_009), measurement(6e-6, 100.000_800, 100.000_820)],
        ];
        let proposals: Vec<Vec<f64>> = ranks.iter().map(|m| agreement_values(m, 3)).collect();
        assert_eq!(proposals[0].len(), 5 * 2 + 3, "five values per step, then the features");
        let maxima: Vec<f64> = (0..proposals[0].len()).map(|i| proposals.iter().map(|p| p[i]).fold(f64::MIN, f64::max)).collect();
        let agreed: Vec<AgreedStep> = agreed_steps(&maxima[..times_len(&ranks[0])], 2).collect();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert_eq!((agreed[0].slowest, agreed[0].fastest), (5e-6, 1e-6));
        assert_eq!((agreed[1].slowest, agreed[1].fastest), (9e-6, 4e-6));
        assert!(close(agreed[0].spreads.arrivals, 8e-6), "{:?}", agreed[0]);
        assert!(close(agreed[1].spreads.arrivals, 400e-6), "{:?}", agreed[1]);
        // From the first arrival to the last departure as read (each rank's arrival
        // plus its time would give 11 and 404 us).
        assert!(close(agreed[0].spreads.span, 18e-6), "{:?}", agreed[0]);
        assert!(close(agreed[1].spreads.span, 450e-6), "{:?}", agreed[1]);
    }
}
