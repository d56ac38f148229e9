//! Step features travel in the step's agreement: each rank contributes its own counts,
//! the all-reduce (maximum) combines them, and every rank derives the same
//! [`StepFeatures`] from the result.
//!
//! Layout of a rank's contribution: `[G, S, B, R, row]`, where `row` is, when the
//! communicator has at most `matrix_max_ranks` ranks, a P x P matrix of zeros with this
//! rank's bytes per owner in row `rank`: the maximum over ranks is then the whole
//! request matrix, and the bytes each rank serves are its column sums. Above that size
//! the matrix would make the all-reduce too large, and `IN` is estimated as `B`
//! (requests spread evenly).

use super::model::StepFeatures;
use crate::plan::BatchPlan;

const FIXED: usize = 4;

/// Number of values a rank contributes.
pub fn encoded_len(ranks: usize, matrix_max_ranks: usize) -> usize {
    FIXED + if ranks <= matrix_max_ranks { ranks * ranks } else { 0 }
}

/// This rank's contribution for `plan`, which needs `rounds` collective rounds.
pub fn encode(plan: &BatchPlan, rounds: u64, rank: usize, matrix_max_ranks: usize) -> Vec<f64> {
    let ranks = plan.bytes_per_owner.len();
    let mut values = vec![0.0; encoded_len(ranks, matrix_max_ranks)];
    values[0] = plan.gets.len() as f64;
    values[1] = plan.remote.len() as f64;
    values[2] = plan.remote_bytes() as f64;
    values[3] = rounds as f64;
    if ranks <= matrix_max_ranks {
        let row = &mut values[FIXED + rank * ranks..FIXED + (rank + 1) * ranks];
        for (cell, &bytes) in row.iter_mut().zip(&plan.bytes_per_owner) {
            *cell = bytes as f64;
        }
    }
    values
}

/// The step's features from the combined contributions.
pub fn decode(values: &[f64], ranks: usize, matrix_max_ranks: usize) -> StepFeatures {
    let served = if ranks <= matrix_max_ranks {
        let matrix = &values[FIXED..FIXED + ranks * ranks];
        (0..ranks).map(|owner| (0..ranks).map(|r| matrix[r * ranks + owner]).sum::<f64>()).fold(0.0, f64::max)
    } else {
        values[2]
    };
    StepFeatures { gets: values[0], samples: values[1], bytes: values[2], rounds: values[3], served }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GlobalIndex;

    #[test]
    fn served_bytes_are_column_sums_of_the_request_matrix() {
        // Three ranks holding one sample each: 10, 20 and 30 bytes.
        let index = GlobalIndex::from_lengths(&[10, 20, 30], &[1, 1, 1]);
        // Ranks 0 and 1 both read sample 2 from rank 2; rank 2 reads sample 0.
        let plans = [vec![2], vec![2, 2], vec![0]];
        let mut combined = vec![0.0f64; encoded_len(3, 16)];
        for (rank, ids) in plans.iter().enumerate() {
            let plan = BatchPlan::new(&index, rank, ids).unwrap();
            for (c, v) in combined.iter_mut().zip(encode(&plan, 1, rank, 16)) {
                *c = c.max(v);
            }
        }
        let f = decode(&combined, 3, 16);
        assert_eq!(f.served, 90.0); // rank 2 serves 30 + 60
        assert_eq!(f.bytes, 60.0);
        assert_eq!(f.samples, 2.0);
        assert_eq!(f.gets, 2.0);
        // Without the matrix, IN is estimated from B.
        assert_eq!(decode(&combined[..FIXED], 3, 2).served, 60.0);
    }
}
