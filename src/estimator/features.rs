//! Step features travel in the step's agreement: each rank contributes its own counts,
//! the all-reduce (maximum) combines them, and every rank derives the same
//! [`StepFeatures`] from the result.
//!
//! Layout of a rank's contribution: `[G, S, B, R, NB, NS, -RI, -RB, bytes, requests]`,
//! where `NB` and `NS` are the bytes and samples it copies from other ranks of its node
//! (the node-local path: not remote, not in `G`, `S`, `B`), `RI` and `RB` the ids and
//! bytes its exchange buffers hold without growing (negated: the maximum is the least
//! room of any rank, see [`RequestsToOwner`]), and, when the
//! communicator has at most `matrix_max_ranks` ranks, `bytes` and `requests` are P x P
//! matrices of zeros with this rank's row filled in: the bytes it reads from each owner,
//! and how many samples it asks each owner for in the collective exchange. The maximum
//! over ranks is then the whole request matrix: the bytes each rank serves are the
//! column sums of `bytes` (the model's `IN`), and column `q` of `requests` tells owner
//! `q` how many ids each rank will send it (the collective engine then skips its count
//! exchange). Above that size the matrices would make the all-reduce too large: `IN` is
//! estimated as `B` (requests spread evenly) and the counts travel in the engine.

use super::model::StepFeatures;
use crate::engine::{ExchangeShape, RequestsToOwner, ServeRoom};
use crate::plan::BatchPlan;

const FIXED: usize = 8;

fn has_matrix(ranks: usize, matrix_max_ranks: usize) -> bool {
    ranks <= matrix_max_ranks
}

/// Number of values a rank contributes.
pub fn encoded_len(ranks: usize, matrix_max_ranks: usize) -> usize {
    FIXED + if has_matrix(ranks, matrix_max_ranks) { 2 * ranks * ranks } else { 0 }
}

/// This rank's contribution for `plan`, whose collective exchange has `shape`, into
/// `values` (of [`encoded_len`]); `room` is what this rank's exchange buffers hold.
pub fn encode(plan: &BatchPlan, shape: &ExchangeShape, rank: usize, matrix_max_ranks: usize, room: ServeRoom, values: &mut [f64]) {
    let ranks = plan.ranks;
    values.fill(0.0);
    values[0] = plan.gets.len() as f64;
    values[1] = plan.remote.len() as f64;
    values[2] = plan.remote_bytes() as f64;
    values[3] = shape.rounds as f64;
    values[4] = plan.node_bytes as f64;
    values[5] = plan.node_samples as f64;
    values[6] = -(room.ids as f64);
    values[7] = -(room.bytes as f64);
    if has_matrix(ranks, matrix_max_ranks) {
        let row = FIXED + rank * ranks;
        let requests_row = row + ranks * ranks;
        let (bytes, requests) = (plan.bytes_per_owner(), shape.requests_per_owner(&plan.remote, ranks));
        for owner in 0..ranks {
            values[row + owner] = bytes[owner] as f64;
            values[requests_row + owner] = requests[owner] as f64;
        }
    }
}

/// The step's features from the combined contributions; `max_message` is
/// `MDL_MAX_MESSAGE_BYTES` (see [`agreed_rounds`]).
pub fn decode(values: &[f64], ranks: usize, matrix_max_ranks: usize, max_message: u64) -> StepFeatures {
    let (served, served_is_known) = if has_matrix(ranks, matrix_max_ranks) {
        let matrix = &values[FIXED..FIXED + ranks * ranks];
        let columns = (0..ranks).map(|owner| (0..ranks).map(|r| matrix[r * ranks + owner]).sum::<f64>());
        (columns.fold(0.0, f64::max), true)
    } else {
        (values[2], false)
    };
    let rounds = agreed_rounds(values[3], values[2], served_is_known.then_some(served), max_message);
    StepFeatures { gets: values[0], samples: values[1], bytes: values[2], rounds, served }
}

/// The collective exchange's rounds: one wherever the agreed figures show that every
/// rank receives (`bytes`, the most remote bytes of one rank) and sends (`served`, the
/// most bytes one rank serves, where known) at most `max_message` bytes
/// (`MDL_MAX_MESSAGE_BYTES`, the round's limit); otherwise
/// `rounds_per_rank_budget`, the most rounds of one rank when each round carries at
/// most `max_message / P` bytes per rank (which bounds what an owner sends without
/// knowing it). At P = 4096 a batch of 256 x 4 KB then takes one round, not two.
pub fn agreed_rounds(rounds_per_rank_budget: f64, bytes: f64, served: Option<f64>, max_message: u64) -> f64 {
    let fits = |b: f64| b <= max_message as f64;
    match served {
        Some(served) if rounds_per_rank_budget > 1.0 && fits(bytes) && fits(served) => 1.0,
        _ => rounds_per_rank_budget,
    }
}

/// The node-local term of a step: the most bytes and samples one rank copies from
/// other ranks of its node. The engines do not move them, so they are not part of
/// either engine's cost and do not steer the choice; the loader times and reports the
/// copy on its own, and the estimator learns from the engines' time alone.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeFeatures {
    pub bytes: f64,
    pub samples: f64,
}

/// The node-local term from the combined [`encode`] contributions.
pub fn decode_node(values: &[f64]) -> NodeFeatures {
    NodeFeatures { bytes: values[4], samples: values[5] }
}

/// The node-local term from the combined [`encode_known`] contributions.
pub fn decode_known_node(values: &[f64]) -> NodeFeatures {
    NodeFeatures { bytes: values[5], samples: values[6] }
}

/// From the combined contributions: what each rank asks `owner` for in the collective
/// exchange, when the matrices were carried. The bytes matrix counts the samples read
/// with gets too; an owner sends at most `max_message` bytes in the one round of a
/// step that carries its requests, so no more room is asked of it.
pub fn requests_to(values: &[f64], ranks: usize, matrix_max_ranks: usize, owner: usize, max_message: u64) -> Option<RequestsToOwner> {
    has_matrix(ranks, matrix_max_ranks).then(|| {
        let bytes = &values[FIXED..FIXED + ranks * ranks];
        let requests = &values[FIXED + ranks * ranks..FIXED + 2 * ranks * ranks];
        let column_sum = |matrix: &[f64], q: usize| (0..ranks).map(|r| matrix[r * ranks + q] as u64).sum::<u64>();
        let sent_bytes = |q: usize| column_sum(bytes, q).min(max_message);
        let least_room = ServeRoom { ids: -values[6] as u64, bytes: -values[7] as u64 };
        let some_owner_lacks_room =
            (0..ranks).any(|q| column_sum(requests, q) > least_room.ids || sent_bytes(q) > least_room.bytes);
        RequestsToOwner {
            counts: (0..ranks).map(|r| requests[r * ranks + owner] as u64).collect(),
            serves: ServeRoom { ids: column_sum(requests, owner), bytes: sent_bytes(owner) },
            some_owner_lacks_room,
        }
    })
}

/// A sampler step's contribution, `[G, S, B, R, IN, NB, NS]`: with every batch known, each
/// rank works out the bytes it serves itself (`served`, from the epoch's inversion),
/// so no matrix is needed at any number of ranks. O(1) values.
pub fn encode_known(plan: &BatchPlan, shape: &ExchangeShape, served: u64) -> Vec<f64> {
    vec![
        plan.gets.len() as f64,
        plan.remote.len() as f64,
        plan.remote_bytes() as f64,
        shape.rounds as f64,
        served as f64,
        plan.node_bytes as f64,
        plan.node_samples as f64,
    ]
}

/// The features of a sampler step from the combined [`encode_known`] contributions
/// (`served` is then known: see [`agreed_rounds`]).
pub fn decode_known(values: &[f64], max_message: u64) -> StepFeatures {
    let rounds = agreed_rounds(values[3], values[2], Some(values[4]), max_message);
    StepFeatures { gets: values[0], samples: values[1], bytes: values[2], rounds, served: values[4] }
}

/// Number of values of [`encode_known`].
pub(crate) const KNOWN_LEN: usize = 7;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::exchange_shape;
    use crate::store::GlobalIndex;

    #[test]
    fn served_bytes_are_column_sums_of_the_request_matrix() {
        // Three ranks holding one sample each: 10, 20 and 30 bytes.
        let index = GlobalIndex::from_lengths(&[10, 20, 30], &[1, 1, 1]);
        // Ranks 0 and 1 both read sample 2 from rank 2; rank 2 reads sample 0.
        let plans = [vec![2], vec![2, 2], vec![0]];
        let mut combined = vec![f64::NEG_INFINITY; encoded_len(3, 16)];
        for (rank, ids) in plans.iter().enumerate() {
            let plan = BatchPlan::new(&index, rank, ids).unwrap();
            let shape = exchange_shape(&plan.remote, 3, u64::MAX);
            let mut mine = vec![0.0; encoded_len(3, 16)];
            encode(&plan, &shape, rank, 16, ServeRoom { ids: 3, bytes: 100 }, &mut mine);
            for (c, v) in combined.iter_mut().zip(mine) {
                *c = c.max(v);
            }
        }
        let f = decode(&combined, 3, 16, u64::MAX);
        assert_eq!(f.served, 90.0); // rank 2 serves 30 + 60
        assert_eq!(f.bytes, 60.0);
        assert_eq!(f.samples, 2.0);
        assert_eq!(f.gets, 2.0);
        // Rank 2 is asked for one sample by rank 0 and two by rank 1; rank 0 for one by rank 2.
        let to_2 = requests_to(&combined, 3, 16, 2, u64::MAX).unwrap();
        assert_eq!(to_2.counts, vec![1, 2, 0]);
        assert_eq!(to_2.serves, ServeRoom { ids: 3, bytes: 90 });
        assert_eq!(requests_to(&combined, 3, 16, 0, u64::MAX).unwrap().counts, vec![0, 0, 1]);
        // Every rank's buffers hold 3 ids and 100 bytes: room for what any owner serves.
        assert!(!to_2.some_owner_lacks_room);
        // One rank's buffers that hold 89 bytes make every rank see a lack of room,
        // though that rank serves nothing.
        let mut short = combined.clone();
        short[7] = short[7].max(-89.0);
        assert!(requests_to(&short, 3, 16, 0, u64::MAX).unwrap().some_owner_lacks_room);
        // An owner sends at most the message limit in a step's one round: room for 89
        // bytes is enough where that limit is 89 (the rest goes by gets).
        assert_eq!(requests_to(&short, 3, 16, 2, 89).unwrap().serves.bytes, 89);
        assert!(!requests_to(&short, 3, 16, 0, 89).unwrap().some_owner_lacks_room);
        // Without the matrices, IN is estimated from B and the counts are unknown.
        assert_eq!(decode(&combined[..FIXED], 3, 2, u64::MAX).served, 60.0);
        assert_eq!(requests_to(&combined[..FIXED], 3, 2, 0, u64::MAX), None);
    }

    #[test]
    fn one_round_where_the_agreed_bytes_fit_the_message_limit() {
        // 4 rounds at the per-rank budget; every rank receives and serves at most 100.
        assert_eq!(agreed_rounds(4.0, 100.0, Some(100.0), 100), 1.0);
        // One rank serves more than the limit, or what owners serve is not known.
        assert_eq!(agreed_rounds(4.0, 100.0, Some(101.0), 100), 4.0);
        assert_eq!(agreed_rounds(4.0, 100.0, None, 100), 4.0);
        assert_eq!(agreed_rounds(4.0, 101.0, Some(50.0), 100), 4.0);
        assert_eq!(agreed_rounds(0.0, 0.0, Some(0.0), 100), 0.0);
        // The sampler's contributions always carry what each rank serves.
        let known = [1.0, 2.0, 100.0, 4.0, 100.0, 0.0, 0.0];
        assert_eq!(decode_known(&known, 100).rounds, 1.0);
        assert_eq!(decode_known(&known, 99).rounds, 4.0);
    }

    #[test]
    fn node_local_samples_are_a_term_of_their_own_not_remote() {
        // Ranks 0 and 1 share a node, rank 2 is alone: 10, 20 and 30 bytes.
        let index = GlobalIndex::from_lengths(&[10, 20, 30], &[1, 1, 1]);
        let topology = crate::store::Topology::from_leaders(vec![0, 0, 2]);
        let plan = BatchPlan::on_node(&index, 0, &[1, 2, 1, 0], &topology).unwrap();
        let shape = exchange_shape(&plan.remote, 3, u64::MAX);
        let mut values = vec![0.0; encoded_len(3, 16)];
        encode(&plan, &shape, 0, 16, ServeRoom::default(), &mut values);
        let f = decode(&values, 3, 16, u64::MAX);
        assert_eq!((f.samples, f.bytes, f.gets), (1.0, 30.0, 1.0));
        assert_eq!(decode_node(&values), NodeFeatures { bytes: 40.0, samples: 2.0 });
        // The sampler's contributions carry the same split.
        let known = encode_known(&plan, &shape, 0);
        assert_eq!(known.len(), KNOWN_LEN);
        assert_eq!((decode_known(&known, u64::MAX).samples, decode_known(&known, u64::MAX).bytes), (1.0, 30.0));
        assert_eq!(decode_known_node(&known), NodeFeatures { bytes: 40.0, samples: 2.0 });
    }
}
