//! The library's own CPU work in one step, measured in one process that plays rank r of
//! P ranks, without MPI (the benchmark `examples/step_cost.rs`, `benches/scale/`).
//!
//! A step of the built-in sampler on rank r: draw the batch (sampler), plan it (owner,
//! offset, output layout, coalesced gets), build the exchange's shape, encode this
//! rank's part of the agreement and decode the combined one (the all-reduce itself is
//! MPI's, not measured), and, for the collective engine, find what the other ranks ask
//! of r: from the epoch's inverted permutation (now), or by replanning every rank's
//! batch (before; still used for steps of several rounds).

use crate::engine::exchange_shape;
use crate::estimator::features;
use crate::plan::BatchPlan;
use crate::sampler::Epoch;
use crate::store::GlobalIndex;
use std::time::Instant;

/// Microseconds per step of each part.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepCost {
    pub sampler: f64,
    pub plan: f64,
    pub agreement: f64,
    /// What the others ask of this rank, from the inverted permutation (per step; the
    /// inversion itself, once per epoch, is `inversion_per_epoch`).
    pub asked_of_me: f64,
    pub inversion_per_epoch: f64,
    /// The same by replanning every rank's batch (the code before), per step.
    pub replan_all: f64,
}

impl StepCost {
    /// The library's work per step now: everything but the old replanning.
    pub fn total(&self) -> f64 {
        self.sampler + self.plan + self.agreement + self.asked_of_me
    }
}

/// Measure rank `rank` of `ranks` with batches of `batch` samples, each rank holding
/// `per_rank` samples of 100..2100 bytes, over the epoch's steps (at most `max_steps`).
pub fn measure(ranks: usize, rank: usize, batch: u64, per_rank: u64, max_steps: u64, matrix_max_ranks: usize) -> StepCost {
    let n = per_rank * ranks as u64;
    let lengths: Vec<u64> = (0..n).map(|i| 100 + (i * 2_654_435_761) % 2000).collect();
    let index = GlobalIndex::from_lengths(&lengths, &vec![per_rank; ranks]);
    drop(lengths);
    let epoch = Epoch::new(n, ranks, 7, 0, batch, true, false).expect("a valid epoch");
    let steps = epoch.steps().min(max_steps).max(1);
    let owned = index.first_ids()[rank]..index.first_ids()[rank + 1];
    let mut by_rank = vec![Vec::new(); ranks];
    let started = Instant::now();
    epoch.owned_in_batches(0, owned.clone(), &mut by_rank); // builds the inversion
    let inversion_per_epoch = started.elapsed().as_secs_f64() * 1e6;

    let mut cost = StepCost { inversion_per_epoch, ..StepCost::default() };
    let mut ids = Vec::new();
    let time = |total: &mut f64, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        *total += t.elapsed().as_secs_f64() * 1e6;
    };
    let replan_steps = if ranks as u64 * batch > 4_000_000 { 1 } else { steps };
    for step in 0..steps {
        time(&mut cost.sampler, &mut || epoch.batch_into(step, rank, &mut ids));
        let mut plan = None;
        time(&mut cost.plan, &mut || plan = Some(BatchPlan::new(&index, rank, &ids).expect("ids in range")));
        let plan = plan.expect("planned");
        time(&mut cost.agreement, &mut || {
            let shape = exchange_shape(&plan.remote, ranks, i32::MAX as u64);
            let mine = features::encode(&plan, &shape, rank, matrix_max_ranks);
            std::hint::black_box(features::decode(&mine, ranks, matrix_max_ranks));
            std::hint::black_box(features::requests_to(&mine, ranks, matrix_max_ranks, rank));
        });
        time(&mut cost.asked_of_me, &mut || epoch.owned_in_batches(step, owned.clone(), &mut by_rank));
        if step < replan_steps {
            time(&mut cost.replan_all, &mut || {
                let mut theirs = Vec::new();
                for q in (0..ranks).filter(|&q| q != rank) {
                    epoch.batch_into(step, q, &mut theirs);
                    std::hint::black_box(BatchPlan::new(&index, q, &theirs).expect("ids in range"));
                }
            });
        }
    }
    let per_step = |t: f64| t / steps as f64;
    StepCost {
        sampler: per_step(cost.sampler),
        plan: per_step(cost.plan),
        agreement: per_step(cost.agreement),
        asked_of_me: per_step(cost.asked_of_me),
        inversion_per_epoch,
        replan_all: cost.replan_all / replan_steps as f64,
    }
}
