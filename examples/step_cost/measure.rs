//! The library's own CPU work in one step, measured in one process that plays rank r of
//! P ranks, without MPI (`benches/scale/`).
//!
//! A step of the built-in sampler on rank r, as `loader::pipeline` runs it: draw the
//! batch (sampler), plan it (owner, offset, output layout, coalesced gets), look up
//! the bytes r serves the others this step (summed per step with the epoch's inverted
//! permutation, once per epoch), and
//! encode r's part of the step's agreement and decode the combined one (O(1) values;
//! the reduction itself is MPI's, not measured). For the collective engine, r also
//! finds which ids each rank asks of it (from the same inversion). Before, r replanned
//! every rank's batch for that (still measured, for comparison).

use mdloader::bench::{BatchPlan, Epoch, GlobalIndex, Topology, exchange_shape, features};
use std::time::Instant;

/// Microseconds per step of each part: medians over the steps measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepCost {
    pub sampler: f64,
    pub plan: f64,
    /// The bytes this rank serves, from the inverted permutation (precomputed per step
    /// with it).
    pub served: f64,
    pub agreement: f64,
    /// Which ids each rank asks of this one (collective engine only), from the inverted
    /// permutation (per step; the inversion itself, once per epoch, is
    /// `inversion_per_epoch`).
    pub asked_of_me: f64,
    pub inversion_per_epoch: f64,
    /// The same by replanning every rank's batch (the code before), per step.
    pub replan_all: f64,
}

impl StepCost {
    /// The library's work in a step of the collective engine (AUTO pays the same, but
    /// `asked_of_me` only in the steps it runs collectively).
    pub fn total(&self) -> f64 {
        self.sampler + self.plan + self.served + self.agreement + self.asked_of_me
    }
}

/// Measure rank `rank` of `ranks` with batches of `batch` samples, each rank holding
/// `per_rank` samples of 100..2100 bytes, over the epoch's steps (at most `max_steps`).
pub fn measure(ranks: usize, rank: usize, batch: u64, per_rank: u64, max_steps: u64) -> StepCost {
    let n = per_rank * ranks as u64;
    let lengths: Vec<u64> = (0..n).map(|i| 100 + (i * 2_654_435_761) % 2000).collect();
    let index = GlobalIndex::from_lengths(&lengths, &vec![per_rank; ranks]);
    drop(lengths);
    let epoch = Epoch::new(n, ranks, 7, 0, batch, true, false).expect("a valid epoch");
    let steps = epoch.steps().min(max_steps).max(1);
    let owned = index.first_ids()[rank]..index.first_ids()[rank + 1];
    let mut asked = Vec::new();
    let started = Instant::now();
    epoch.prepare_owned(owned.clone(), &|_| true, &|q| q != rank, &|id| index.len_of(id).unwrap_or(0)).expect("the inversion fits in memory");
    let inversion_per_epoch = started.elapsed().as_secs_f64() * 1e6;

    let mut parts: [Vec<f64>; 6] = Default::default();
    let time = |samples: &mut Vec<f64>, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    };
    let replan_steps = if ranks as u64 * batch > 4_000_000 { 1 } else { steps };
    let mut ids = Vec::new();
    for step in 0..steps {
        time(&mut parts[0], &mut || epoch.batch_into(step, rank, &mut ids));
        let mut plan = None;
        time(&mut parts[1], &mut || plan = Some(BatchPlan::new(&index, rank, &ids).expect("ids in range")));
        let plan = plan.expect("planned");
        let mut served = 0;
        time(&mut parts[2], &mut || served = epoch.served_bytes(step, owned.clone()));
        time(&mut parts[3], &mut || {
            let shape = exchange_shape(&plan.remote, ranks, i32::MAX as u64);
            let mine = features::encode_known(&plan, &shape, served);
            std::hint::black_box(features::decode_known(&mine, i32::MAX as u64));
        });
        time(&mut parts[4], &mut || {
            // As the collective engine does: the ids asked of this rank, grouped by
            // requester, and the P counts its MPI_Alltoallv needs.
            asked.clear();
            let mut counts = vec![0u64; ranks];
            epoch.for_each_request(step, owned.clone(), |q, id| {
                if q != rank {
                    asked.push(id);
                    counts[q] += 1;
                }
            });
            std::hint::black_box(counts);
        });
        if step < replan_steps {
            time(&mut parts[5], &mut || {
                let mut theirs = Vec::new();
                for q in (0..ranks).filter(|&q| q != rank) {
                    epoch.batch_into(step, q, &mut theirs);
                    std::hint::black_box(BatchPlan::new(&index, q, &theirs).expect("ids in range"));
                }
            });
        }
    }
    let [sampler, plan, served, agreement, asked_of_me, replan_all] = parts.map(median);
    StepCost { sampler, plan, served, agreement, asked_of_me, inversion_per_epoch, replan_all }
}

/// The epoch's inversion on an owner with replica groups: `ranks` ranks in groups of
/// `group`, `n` samples, each group holding all of them (the owner `n / group`).
/// Returns (seconds, positions kept) for the owner's own group asking it (what the
/// loader does), and the same with every rank asking, which walks every owned id as
/// the inversion did for groups before it scanned the group's positions.
pub fn replica_inversion(n: u64, ranks: usize, group: usize, batch: u64) -> [(f64, u64); 2] {
    let owned = 0..n / group as u64;
    let len_of = |_: u64| 1;
    let time = |asks: &dyn Fn(usize) -> bool| {
        let fresh = Epoch::new(n, ranks, 7, 0, batch, true, false).expect("a valid epoch");
        let started = Instant::now();
        fresh.prepare_owned(owned.clone(), asks, &|q| asks(q) && q != 0, &len_of).expect("memory for the inversion");
        let seconds = started.elapsed().as_secs_f64();
        let kept = (0..fresh.steps()).map(|s| {
            let mut count = 0;
            fresh.for_each_request(s, owned.clone(), |_, _| count += 1);
            count
        });
        (seconds, kept.sum())
    };
    [time(&|q| q < group), time(&|_| true)]
}

/// The sampler's part of a step on one node, where every sample is copied from the
/// node's shared memory (the default path on one node, `MDL_NODE_LOCAL=on`): rank 0
/// of `ranks` draws its batch of `batch` samples of `sample_bytes` each (one length:
/// no index table) and plans it. Microseconds per step, medians over `steps` steps:
/// (drawing the batch, planning it).
pub fn one_node(ranks: usize, batch: u64, sample_bytes: u64, steps: u64) -> (f64, f64) {
    let per_rank = (batch * steps).max(1);
    let n = per_rank * ranks as u64;
    let index = GlobalIndex::uniform(&vec![per_rank; ranks], sample_bytes);
    let topology = Topology::from_leaders(vec![0; ranks]);
    let epoch = Epoch::new(n, ranks, 7, 0, batch, true, false).expect("a valid epoch");
    let (mut sampler, mut plan, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for step in 0..epoch.steps().min(steps) {
        let t = Instant::now();
        epoch.batch_into(step, 0, &mut ids);
        sampler.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        std::hint::black_box(BatchPlan::on_node(&index, 0, &ids, &topology).expect("ids in range"));
        plan.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median(sampler), median(plan))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
