//! Calibration: measure the cost model's parameters on the real communicator.
//!
//! At registration, every rank registers a scratch shard of small (64 B) and large
//! (8 KiB) samples, then runs both real engines on a few synthetic batches chosen so
//! that the features vary independently: one small sample, many small samples, a few
//! large ones, many large ones, (at three ranks or more) every rank reading one
//! target, and two steps of megabytes (the large samples over again), each where the
//! budget left and the memory allow. Each batch runs once to warm up and `REPS` times
//! measured; the step time is the slowest rank's. Where the first pass over the
//! batches took at most half the budget, a second pass runs the affordable ones again,
//! so that a burst of load spoils at most half of a batch's repetitions; the median
//! over all of them is kept. How far the result can be trusted (the repetitions'
//! spread, the fit's miss, each parameter's jackknife spread) goes with it
//! ([`super::confidence`]). The probes run as a training loop's steps do: each batch also holds this
//! rank's own share of samples (a uniform batch's: as many as each target serves it),
//! copied before the engine's clock starts; the engines take turns; each run starts
//! with the ranks lined up. Bytes served are told apart from bytes received only by
//! the hot-target probe (uniform batches serve about what they receive): without it,
//! the served terms are left at 0. A non-negative least squares fit of the model's
//! terms to these times gives the parameters.
//!
//! The time spent is bounded: after each batch all ranks see the same elapsed time (it
//! rides the timing all-reduce) and stop together once the budget is spent, fitting
//! whatever they measured (an engine with too few points for a fit has the default
//! parameters, its fixed cost raised to the points it has: see `raised_defaults`).
//!
//! With the node-local path in force the engines only ever move other nodes' samples,
//! so the probes read from other nodes' ranks alone; a job of one node, where the
//! engines never run, is not calibrated at all. The copies from the node's shared
//! memory are not a term of the engines' model: they are timed apart in each step.

use super::confidence::{self, Confidence};
use super::features;
use crate::agree::agree_on_fallback;
use super::model::{CostParams, SERVED_TERM, StepFeatures, features_of, fit_nonnegative};
use crate::backend::Backend;
use crate::engine::{ExchangeBuffers, StepContext, copy_local, exchange_shape, fetch_remote};
use crate::error::{Error, Result, mdl_status, outcome_of};
use crate::memory;
use crate::mpi::{self, Comm};
use std::cell::RefCell;
use crate::plan::BatchPlan;
use crate::rng::SplitMix64;
use crate::store::{ShardView, Store, StoreSettings, Topology};

const SMALL_BYTES: u64 = 64;
const SMALL_COUNT: u64 = 256;
const LARGE_BYTES: u64 = 8192;
const LARGE_COUNT: u64 = 64;
/// Bytes of each rank's scratch shard: the registration's shared-memory check counts
/// its window too, which calibration makes after the registered store's.
pub(crate) const SCRATCH_SHARD_BYTES: u64 = SMALL_COUNT * SMALL_BYTES + LARGE_COUNT * LARGE_BYTES;
const REPS: usize = 3;
/// How much more a byte may cost in a costly probe than in the largest probe before it:
/// a byte cost the collective engine 0.53 ns in the probe of 4 MiB and 0.66 ns in the
/// one of 8 MiB (TCP, 2 ranks, an Intel Xeon): scaled by the bytes alone, that probe's
/// time is predicted a fifth too short.
const COSTLY_GROWTH: f64 = 1.5;

#[derive(Clone, Copy)]
enum Size {
    Small,
    Large,
}

/// A synthetic batch: `count` samples of one size per rank, from random other ranks or
/// all from one hot target, and (not for the hot target) this rank's own share.
struct Probe {
    size: Size,
    count: usize,
    hot_target: bool,
    /// Taken only where the budget left covers its time, predicted from the largest
    /// probe before it (see `run_probes`).
    costly: bool,
}

/// Most informative first, since the budget may cut the list short.
const PROBES: [Probe; 8] = [
    Probe { size: Size::Small, count: 1, hot_target: false, costly: false },
    Probe { size: Size::Small, count: 32, hot_target: false, costly: false },
    Probe { size: Size::Large, count: 8, hot_target: false, costly: false },
    Probe { size: Size::Small, count: 256, hot_target: false, costly: false },
    Probe { size: Size::Large, count: 64, hot_target: false, costly: false },
    Probe { size: Size::Large, count: 16, hot_target: true, costly: false },
    // 4 and 8 MiB per rank from the others, the scratch shard's 64 large samples over
    // again, and at 2 ranks as much again copied from this rank's own: the buffers of
    // steps this size outgrow the caches, and the cost of a byte grows with them (the
    // collective engine's most: it packs and unpacks every byte). Over TCP at 2
    // ranks, the collective engine moved a byte in 0.5 ns in steps of 4-8 MiB from the
    // others alone, but in 0.7 ns in steps of 16 MiB with half of them copied locally,
    // as in a uniform batch (an Intel Xeon). Without these probes the model named the
    // wrong engine for such steps (benches/grid: the model alone right at 91-94% of
    // the decisive points); with the 4 MiB one alone, at 93-97%, missing the steps of
    // 4-16 MiB with 16 KB samples in most runs. The costliest probes: the last, each
    // only within the budget (4 MiB at 8 ranks on 2 cores took 0.5 s alone).
    Probe { size: Size::Large, count: 512, hot_target: false, costly: true },
    Probe { size: Size::Large, count: 1024, hot_target: false, costly: true },
];

impl Probe {
    /// The bytes each rank fetches.
    fn bytes(&self) -> u64 {
        self.count as u64 * match self.size {
            Size::Small => SMALL_BYTES,
            Size::Large => LARGE_BYTES,
        }
    }
}

pub struct CalibrationSettings {
    pub budget_seconds: f64,
    pub matrix_max_ranks: usize,
    /// How the scratch store is built (its warm-up gets make calibration measure the
    /// steady state).
    pub store: StoreSettings,
    /// Which ranks the registered store's node-local path serves (empty: none): the
    /// probes read only from ranks outside the reader's node.
    pub topology: Topology,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub params: CostParams,
    /// "measured", "default" (skipped, or one rank) or "file".
    pub source: &'static str,
    pub seconds: f64,
    /// Batches measured per engine (one-sided, collective).
    pub points: [usize; 2],
    /// What of `seconds` the budget cannot cut short: building and freeing the scratch
    /// store, and the last probe, which runs to its end once started (the budget is
    /// checked between probes).
    pub setup_seconds: f64,
    pub last_probe_seconds: f64,
    /// How far the parameters can be trusted (see [`confidence`]).
    pub confidence: Confidence,
}

impl Calibration {
    pub fn default_params(source: &'static str) -> Calibration {
        Calibration {
            params: CostParams::default(),
            source,
            seconds: 0.0,
            points: [0, 0],
            setup_seconds: 0.0,
            last_probe_seconds: 0.0,
            confidence: Confidence::unmeasured(),
        }
    }
}

/// Collective: measure the parameters.
pub fn measure(comm: &Comm, settings: &CalibrationSettings) -> Result<Calibration> {
    if comm.size() < 2 {
        return Ok(Calibration::default_params("default"));
    }
    // The topology is the same on every rank, so every rank skips alike.
    if settings.topology.is_one_node() {
        log::info!("calibration skipped: one node, whose samples are all copied from shared memory");
        return Ok(Calibration::default_params("not needed (one node)"));
    }
    // A budget of 0 is the user's "no calibration"; the same on every rank (agreed at
    // init).
    if settings.budget_seconds == 0.0 {
        log::info!("calibration skipped: MDL_CALIBRATION_SECONDS=0; the default parameters stand");
        return Ok(Calibration::default_params("default"));
    }
    let started = mpi::wtime();
    // A rank that cannot hold the scratch shard (a tight memory limit on it alone)
    // makes every rank go on with the default parameters: registration itself may still
    // fit, and an abort here would take the whole job down.
    let shard = scratch_shard();
    if let Some(short) = agree_on_fallback(comm, outcome_of(&shard))? {
        short.log("calibration skipped: the scratch shard does not fit in memory; the default parameters stand");
        return Ok(Calibration::default_params("default"));
    }
    let (data, offsets) = shard?;
    // The engines' costs are what is calibrated: the scratch store keeps every other
    // rank's shard behind RMA (no node-local copies), as on other nodes.
    let scratch = StoreSettings { node_local: false, ..settings.store.clone() };
    // Where its registration fails (most often for memory: a copy of the shard and its
    // window), every rank goes on without calibrating, as above; where some rank timed
    // out (a peer may be stuck), every rank fails with MDL_ERR_TIMEOUT. Decided on what
    // the ranks agree, not on each rank's own error: the rank that timed out knows it,
    // the others only that some rank failed.
    let registered = Store::register(comm, &ShardView::new(&data, &offsets)?, &scratch);
    let store = match agree_on_fallback(comm, outcome_of(&registered))? {
        None => registered.expect("agreed that every rank registered the scratch store"),
        Some(failed) => {
            // A store registered here while another rank failed would be freed alone
            // (freeing is collective): it is left to the end of the job.
            let own = registered.map(std::mem::forget).err();
            if failed.status == mdl_status::MDL_ERR_TIMEOUT {
                return Err(own.filter(|e| e.status == mdl_status::MDL_ERR_TIMEOUT).unwrap_or_else(|| {
                    Error::timeout(format!("calibration's scratch store: {}", failed.reason))
                }));
            }
            failed.log("calibration skipped: its scratch store could not be registered; the default parameters stand");
            return Ok(Calibration::default_params("default"));
        }
    };
    let probing_began = mpi::wtime();
    let measured = run_probes(comm, &store, settings, started);
    let probing = mpi::wtime() - probing_began;
    if mpi::timed_out(&measured) {
        // A peer is stuck in a probe: freeing the window would wait for it, for ever
        // (MPI_Win_free is collective), and it may still read the scratch shard.
        std::mem::forget((store, data, offsets));
        return Err(measured.expect_err("a timeout is an error"));
    }
    let freed = store.free();
    let measured = measured?;
    freed?;
    let last_probe_seconds = measured.last_probe;
    let mut params = CostParams::default();
    let mut confidence = Confidence::unmeasured();
    let (mut fitted, mut raised) = (0, [None; 2]);
    for engine in [Backend::OneSided, Backend::Collective] {
        let e = (engine == Backend::Collective) as usize;
        let (rows, times) = (&measured.rows[e], measured.times(e));
        // At least one point per coefficient, or the fit is a guess.
        if rows.len() >= params.coefficients(engine).len()
            && let Some(c) = fit_weighted(rows, &times)
        {
            params.set_coefficients(engine, &c);
            confidence.set_engine(engine, &measured.spreads(e), rows, &times, &c, fit_weighted);
            fitted += 1;
        } else if let Some(c) = raised_defaults(engine, rows, &times) {
            params.set_coefficients(engine, &c);
            confidence.set_scaled_engine(engine, &measured.spreads(e), rows, &times, &c);
            raised[e] = Some(c[0]);
        }
    }
    let seconds = mpi::wtime() - started;
    let points = [measured.rows[0].len(), measured.rows[1].len()];
    let setup_seconds = seconds - probing;
    if fitted == 0 && raised == [None; 2] {
        // Not one batch measured: said as it is, not as "measured". (The same on every
        // rank: the rows follow agreed times.)
        log::info!(
            "calibration measured no batch in {seconds:.3} s (MDL_CALIBRATION_SECONDS={}): the default parameters stand",
            settings.budget_seconds
        );
        return Ok(Calibration { source: "default", seconds, points, setup_seconds, last_probe_seconds, ..Calibration::default_params("default") });
    }
    if raised != [None; 2] {
        log::info!(
            "calibration measured {} + {} batches in {seconds:.3} s, too few to fit every parameter \
             (MDL_CALIBRATION_SECONDS={}): the default model's fixed cost raised to meet them, one-sided \
             {:?} s, collective {:?} s",
            points[0],
            points[1],
            settings.budget_seconds,
            raised[0],
            raised[1]
        );
    }
    log::info!(
        "calibration ({seconds:.3} s, {} + {} batches, noise one-sided {:.3} collective {:.3}): {params:?}",
        points[0],
        points[1],
        confidence.noise[0],
        confidence.noise[1]
    );
    Ok(Calibration { params, confidence, source: "measured", seconds, points, setup_seconds, last_probe_seconds })
}

/// Where an engine has fewer batches than coefficients (a busy machine spends the
/// budget on a few slow probes): the default parameters with the fixed cost a step
/// pays raised to meet them (the median over the batches of what each measured beyond
/// the default's other terms), or None without a batch. The default parameters are
/// rough shared-memory figures: left as they are beside an engine measured at 4-12 ms
/// a step (Open MPI over TCP, 4 ranks on 2 cores beside two busy processes, where
/// 2-3 batches an engine were all the budget allowed) they made AUTO start on the
/// collective engine, which those very batches measured 2-3x slower. What such a
/// machine adds is mostly a fixed cost (the steps wait for scheduler slices whatever
/// their size: 4.0, 4.3 and 4.1 ms for batches of 1 x 64 B, 32 x 64 B and 8 x 8 KiB);
/// the whole model scaled by the same factor instead priced each get at 0.9 ms and sent
/// AUTO to the collective engine at batch 256. The shape stays a guess, which the
/// engine's noise says (see `Confidence::set_scaled_engine`).
fn raised_defaults(engine: Backend, rows: &[Vec<f64>], times: &[f64]) -> Option<Vec<f64>> {
    let mut c = CostParams::default().coefficients(engine);
    let fixed: Vec<f64> = rows
        .iter()
        .zip(times)
        .filter(|(row, t)| row[0] > 0.0 && **t > 0.0)
        .map(|(row, &t)| (t - row[1..].iter().zip(&c[1..]).map(|(x, c)| x * c).sum::<f64>()) / row[0])
        .collect();
    if fixed.is_empty() {
        return None;
    }
    c[0] = c[0].max(confidence::median(&fixed));
    Some(c)
}

/// Fit with each batch's equation divided by the square root of its measured time: a
/// step's time varies by about that much (the jitter of its many messages adds up),
/// not in proportion to it. Unweighted, the large batches (milliseconds) decide the fit
/// alone and the fixed costs that matter for small batches (microseconds) come out near
/// zero; divided by the time itself, the fit held the many small batches as close as
/// the few large ones, and priced the large steps' bytes 30% under what the largest
/// probe measured (the collective engine over TCP, 2 ranks, on an Intel Xeon), where
/// the model then named the slower engine for steps of 4-16 MiB. With the square root
/// the model alone named the faster engine at all decisive points of two runs of
/// benches/grid (3 s a point), against 95.5% and 98.9% in two runs with the relative
/// fit; 98.9% in both runs at 1 s a point.
fn fit_weighted(rows: &[Vec<f64>], times: &[f64]) -> Option<Vec<f64>> {
    let weight = |t: f64| 1.0 / t.max(1e-9).sqrt();
    let scaled: Vec<Vec<f64>> = rows.iter().zip(times).map(|(r, &t)| r.iter().map(|x| x * weight(t)).collect()).collect();
    let ones: Vec<f64> = times.iter().map(|&t| t * weight(t)).collect();
    fit_nonnegative(&scaled, &ones)
}

/// What the probes measured: per engine, a row of the model's terms for each probe
/// taken and its repetitions' times (the slowest rank's, as agreed; both passes').
#[derive(Debug)]
struct Measurements {
    rows: [Vec<Vec<f64>>; 2],
    reps: [Vec<Vec<f64>>; 2],
    /// Seconds of the last probe.
    last_probe: f64,
}

impl Measurements {
    /// Each probe's time: the median of its repetitions.
    fn times(&self, e: usize) -> Vec<f64> {
        self.reps[e].iter().map(|r| confidence::median(r)).collect()
    }

    /// Each probe's repetition spread (see `confidence::repetition_spread`).
    fn spreads(&self, e: usize) -> Vec<f64> {
        self.reps[e]
            .iter()
            .map(|r| {
                let mut sorted = r.clone();
                sorted.sort_by(f64::total_cmp);
                confidence::repetition_spread(&sorted)
            })
            .collect()
    }
}

fn run_probes(comm: &Comm, store: &Store, settings: &CalibrationSettings, started: f64) -> Result<Measurements> {
    let (rank, ranks) = (comm.rank(), comm.size());
    let mut rng = SplitMix64::new(0x6d646c_u64 ^ rank as u64);
    let mut rows: [Vec<Vec<f64>>; 2] = Default::default();
    let mut reps_of: [Vec<Vec<f64>>; 2] = Default::default();
    // Which of PROBES each row is, for the second pass.
    let mut taken: Vec<usize> = Vec::new();
    let buffers = RefCell::new(ExchangeBuffers::default());
    let targets = Targets::of(rank, ranks, &settings.topology);
    let readers = Readers::of(rank, ranks, &settings.topology);
    // Agreed (the slowest rank's): the time since calibration started, after the
    // first probe; and the bytes and seconds of the largest probe timed so far.
    let mut elapsed: Option<f64> = None;
    let mut largest: Option<(u64, f64)> = None;
    let probes_began = mpi::wtime() - started;
    let mut last_probe = 0.0;
    let mut served_apart = false;
    let schedule = PROBES.iter().enumerate().filter(|(_, p)| !p.hot_target || ranks >= 3);
    // The second pass repeats the first's affordable probes, if the first took at most
    // half the budget: a burst of load then spoils at most half of a probe's
    // repetitions, and their median stands.
    let second_pass = schedule.clone().filter(|(_, p)| !p.costly);
    let mut first_pass_seconds = None;
    for (pass, (index, probe)) in schedule.map(|p| (0, p)).chain(second_pass.map(|p| (1, p))) {
        if pass == 1 {
            let first = *first_pass_seconds.get_or_insert(elapsed.unwrap_or(0.0));
            if first > settings.budget_seconds / 2.0 {
                break;
            }
            if !taken.contains(&index) {
                continue;
            }
        }
        if probe.costly {
            // Its time predicted from the largest probe's, scaled by the bytes and by
            // COSTLY_GROWTH; the same on every rank. Without a figure to scale, it is not
            // taken.
            let fits = match (elapsed, largest) {
                (Some(now), Some((bytes, seconds))) => {
                    now + COSTLY_GROWTH * seconds * probe.bytes() as f64 / bytes as f64 <= settings.budget_seconds
                }
                _ => false,
            };
            if !fits {
                continue;
            }
        }
        let probe_started = elapsed;
        let ids = probe_ids(probe, &targets, store.index.first_ids(), &mut rng);
        // A plan this rank cannot make, or a buffer it cannot hold (no memory), fails
        // the probe on every rank, before any rank waits for this one in the probe's
        // collectives.
        // It also reserves what this rank will send, so that a short memory ends the
        // probes here rather than failing one inside the exchange.
        let sends = expected_sends(probe, &readers);
        let planned = BatchPlan::new(&store.index, rank, &ids)
            .and_then(|plan| buffers.borrow_mut().reserve_received(plan.remote_bytes()).map(|()| plan))
            .and_then(|plan| buffers.borrow_mut().reserve_packed(sends).map(|()| plan))
            .and_then(|plan| memory::filled(plan.total_bytes(), 0u8).map(|out| (plan, out)));
        let checked = outcome_of(&planned);
        // Its buffers (20 and 40 MiB at 2 ranks for the costly probes: the batch with its
        // own share, what is received, what is sent) may be more than a tight memory
        // limit allows: then no rank takes it or any later (larger) one, and
        // registration goes on with what was measured.
        if let Some(short) = agree_on_fallback(comm, checked)? {
            short.log(&format!("calibration ends before its probe of {} bytes per rank", probe.bytes()));
            break;
        }
        let (plan, mut out) = planned?;
        let shape = exchange_shape(&plan.remote, ranks, settings.store.limits.max_message);
        let mut mine = vec![0.0; features::encoded_len(ranks, settings.matrix_max_ranks)];
        features::encode(&plan, &shape, rank, settings.matrix_max_ranks, buffers.borrow().room(), &mut mine);
        let agreed = comm.allreduce_max(&mine)?;
        let f: StepFeatures = features::decode(&agreed, ranks, settings.matrix_max_ranks, settings.store.limits.max_message);
        let requests_to_me = features::requests_to(&agreed, ranks, settings.matrix_max_ranks, rank, settings.store.limits.max_message);
        let step = StepContext {
            comm,
            store,
            plan: &plan,
            limits: settings.store.limits,
            buffers: &buffers,
            collective_rounds: f.rounds as u64,
            requests_to_me: requests_to_me.as_ref(),
            most_exchanged_bytes: f.most_exchanged_bytes(),
            known_batches: None,
            // The probes run in lockstep: every rank stays in MPI until all have done.
            gets_end_in_barrier: false,
        };
        // The engines take turns, repetition by repetition, as a training loop's steps
        // follow other work: one engine's repetitions back to back would run on the
        // caches, sockets and schedule its own previous run left warm.
        let mut local = [Vec::with_capacity(REPS + 1), Vec::with_capacity(REPS + 1)];
        for _ in 0..=REPS {
            for engine in [Backend::OneSided, Backend::Collective] {
                // The own share copied first and outside the clock, as a step does (the
                // estimator learns the engines' times alone); then the ranks lined up,
                // so that neither engine's time holds the other's tail or a rank's
                // slower copy.
                copy_local(&step, &mut out);
                comm.barrier()?;
                let t0 = mpi::wtime();
                let done = fetch_remote(&step, engine, &mut out);
                if mpi::timed_out(&done) {
                    // MPI may still use the exchange's buffers and `out`: leaked.
                    std::mem::forget((std::mem::take(&mut *buffers.borrow_mut()), std::mem::take(&mut out)));
                }
                done?;
                local[(engine == Backend::Collective) as usize].push(mpi::wtime() - t0);
            }
        }
        let mut both: Vec<f64> = local.concat();
        both.push(mpi::wtime() - started);
        let slowest = comm.allreduce_max(&both)?;
        let row = taken.iter().position(|&t| t == index).unwrap_or(taken.len());
        for e in 0..2 {
            let engine = if e == 0 { Backend::OneSided } else { Backend::Collective };
            let reps = &slowest[e * (REPS + 1) + 1..(e + 1) * (REPS + 1)]; // [0] was the warm-up
            if row == taken.len() {
                rows[e].push(features_of(engine, &f));
                reps_of[e].push(reps.to_vec());
            } else {
                // The same probe again (other random ids, the same counts and sizes):
                // its first row stands, its repetitions join the first pass's.
                reps_of[e][row].extend_from_slice(reps);
            }
        }
        if row == taken.len() {
            taken.push(index);
        }
        served_apart |= probe.hot_target;
        let now = slowest[2 * (REPS + 1)];
        last_probe = now - probe_started.unwrap_or(probes_began);
        elapsed = Some(now);
        let out_of_time = now > settings.budget_seconds;
        log::debug!(
            "calibration probe of {} x {} bytes per rank ({f:?}): one-sided {:.1} us, collective {:.1} us",
            probe.count,
            probe.bytes() / probe.count as u64,
            confidence::median(&reps_of[0][row]) * 1e6,
            confidence::median(&reps_of[1][row]) * 1e6
        );
        if let (Some(start), Some(end)) = (probe_started, elapsed)
            && largest.is_none_or(|(bytes, _)| probe.bytes() >= bytes)
        {
            largest = Some((probe.bytes(), end - start));
        }
        if out_of_time {
            break;
        }
    }
    if !served_apart {
        // Uniform batches serve about what they receive: a fit would split the bytes'
        // cost between the two terms at random.
        rows.iter_mut().flatten().for_each(|row| row[SERVED_TERM] = 0.0);
    }
    Ok(Measurements { rows, reps: reps_of, last_probe })
}

/// The ranks that read from a rank in the probes: for each, how many targets it reads
/// from, and whether this rank is its first (the hot target). From the topology every
/// rank shares, once per calibration: O(ranks^2) comparisons (4 million at 2048 ranks).
struct Readers {
    of_me: Vec<(u64, bool)>,
}

impl Readers {
    fn of(rank: usize, ranks: usize, topology: &Topology) -> Readers {
        let of_me = (0..ranks)
            .filter(|&reader| !topology.shares(reader, rank))
            .map(|reader| {
                let mut targets = (0..ranks).filter(|&r| !topology.shares(reader, r));
                let first = targets.next() == Some(rank);
                (1 + targets.count() as u64, first)
            })
            .collect();
        Readers { of_me }
    }
}

/// What this rank is asked to send in `probe`, with a quarter to spare: every rank that
/// reads from it asks it for `count` / its targets samples on average, or, in the
/// hot-target probe, all of them where it is the reader's first target. A rank alone
/// on its node serves every other node's readers, far more than its own bytes (3 x at
/// 4 ranks with the other three on one node); the hot target serves every reader
/// (256 MiB at 2048 ranks, which a short memory then skips).
fn expected_sends(probe: &Probe, readers: &Readers) -> u64 {
    let asked: u64 = readers
        .of_me
        .iter()
        .map(|&(targets, first)| match probe.hot_target {
            true if first => probe.bytes(),
            true => 0,
            false => probe.bytes() / targets,
        })
        .sum();
    asked + asked / 4
}

/// Each rank's scratch shard: SMALL_COUNT small samples, then LARGE_COUNT large ones.
fn scratch_shard() -> Result<(Vec<u8>, Vec<u64>)> {
    let mut offsets = memory::with_room((SMALL_COUNT + LARGE_COUNT + 1) as usize)?;
    offsets.push(0u64);
    for i in 0..SMALL_COUNT + LARGE_COUNT {
        let len = if i < SMALL_COUNT { SMALL_BYTES } else { LARGE_BYTES };
        offsets.push(offsets.last().expect("non-empty") + len);
    }
    let data = memory::filled(SCRATCH_SHARD_BYTES, 0xA5u8)?;
    Ok((data, offsets))
}

/// The ranks a rank's probes read from: every rank its engines would read from (not
/// itself, not its node's with the node-local path), and one hot target shared by as
/// many readers as possible: the lowest such rank. And the rank itself, for the local
/// share.
struct Targets {
    remote: Vec<usize>,
    me: usize,
}

impl Targets {
    fn of(rank: usize, ranks: usize, topology: &Topology) -> Targets {
        Targets { remote: (0..ranks).filter(|&r| !topology.shares(rank, r)).collect(), me: rank }
    }
}

/// The probe's ids: `count` from the targets, and but for the hot target this rank's
/// own share (`count` / targets, as a uniform batch holds), in a random order.
fn probe_ids(probe: &Probe, targets: &Targets, first_ids: &[u64], rng: &mut SplitMix64) -> Vec<u64> {
    let own = if probe.hot_target { 0 } else { probe.count / targets.remote.len() };
    let mut ids: Vec<u64> = (0..probe.count + own)
        .map(|k| {
            let owner = if k >= probe.count {
                targets.me
            } else if probe.hot_target {
                targets.remote[0]
            } else {
                targets.remote[rng.below(targets.remote.len() as u64) as usize]
            };
            let local = match probe.size {
                Size::Small => rng.below(SMALL_COUNT),
                Size::Large => SMALL_COUNT + rng.below(LARGE_COUNT),
            };
            first_ids[owner] + local
        })
        .collect();
    for k in (1..ids.len()).rev() {
        ids.swap(k, rng.below(k as u64 + 1) as usize);
    }
    ids
}

/// Parameters saved earlier: a JSON object with a number for every parameter name (the
/// "calibration" object of `mdl_stats_json`; of its other keys, only the noise is read).
pub fn load(path: &std::path::Path) -> Result<Calibration> {
    let failed = |why: String| Error::invalid(format!("MDL_CALIBRATION={}: {why}", path.display()));
    // Only a regular file: reading a FIFO (or a device) would wait on this rank alone,
    // for a writer that may never come, while the others wait in the agreement.
    let regular = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?.is_file();
    if !regular {
        return Err(failed("not a regular file".to_string()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let mut values = Vec::new();
    for (name, _) in CostParams::default().named() {
        let present = text.contains(&format!("\"{name}\""));
        let value = json_number(&text, name).ok_or_else(|| {
            let saved_before = name == "c_coll" && !present && json_number(&text, "b_coll").is_some();
            failed(if saved_before {
                "no number for \"c_coll\": saved before the collective engine's bytes served were priced \
                 apart from those received; its \"b_coll\" was fitted to the busier side and does not carry \
                 over: measure again (MDL_CALIBRATION=on) and save the new \"calibration\" object"
                    .to_string()
            } else if present {
                format!("\"{name}\" must be a finite number >= 0")
            } else {
                format!("no number for \"{name}\"")
            })
        })?;
        if !(value >= 0.0 && value.is_finite()) {
            return Err(failed(format!("\"{name}\" must be a finite number >= 0")));
        }
        // -0 is 0: the ranks compare the parameters bit for bit, and a reduction may
        // return either zero as the larger.
        values.push((name.to_string(), value.abs()));
    }
    let params = CostParams::from_named(&values).expect("every name was read");
    // The noise measured with them, where the file has it (saved before it was, the
    // parameters are taken as exact, as they were then).
    // (-0 is 0, as for the parameters: the ranks compare the noise bit for bit too.)
    let noise = ["noise_onesided", "noise_collective"]
        .map(|key| json_number(&text, key).filter(|v| v.is_finite() && *v >= 0.0).map_or(0.0, f64::abs));
    Ok(Calibration { params, confidence: Confidence::given(noise), ..Calibration::default_params("file") })
}

/// The number after `"key":` in a flat JSON text: a whole value, followed by `,`, `}`
/// or the end (`0x10` is no number, not 0).
fn json_number(text: &str, key: &str) -> Option<f64> {
    let quoted = format!("\"{key}\"");
    let after = &text[text.find(&quoted)? + quoted.len()..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let end = after.find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).unwrap_or(after.len());
    let rest = after[end..].trim_start();
    if !(rest.is_empty() || rest.starts_with(',') || rest.starts_with('}')) {
        return None;
    }
    after[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calibration of a busy machine (Open MPI over TCP, 4 ranks on 2 cores, two busy
    /// processes beside): 3 batches an engine in 0.4 s, the one-sided engine 2-3x faster
    /// in each. Too few to fit, and the default parameters alone priced the collective
    /// engine a little cheaper; with their fixed cost raised to the batches, the model
    /// orders the engines as they measured at the batches and beyond them (batch 256:
    /// the whole model scaled instead priced each get at 0.9 ms), and the noise stays
    /// that of no calibration (the shape is a guess).
    #[test]
    fn too_few_batches_to_fit_raise_the_default_fixed_costs_to_them() {
        let batches = [
            StepFeatures { gets: 1.0, samples: 1.0, bytes: 64.0, served: 192.0, rounds: 1.0 },
            StepFeatures { gets: 32.0, samples: 32.0, bytes: 2048.0, served: 2496.0, rounds: 1.0 },
            StepFeatures { gets: 8.0, samples: 8.0, bytes: 65536.0, served: 73728.0, rounds: 1.0 },
        ];
        let measured = [[4025.1e-6, 4276.4e-6, 4064.1e-6], [11996.3e-6, 12014.0e-6, 8036.1e-6]];
        let step = |b: f64| StepFeatures { gets: b * 0.8, samples: b * 0.8, bytes: b * 1700.0, served: b * 1700.0, rounds: 1.0 };
        let defaults = CostParams::default();
        assert!(defaults.predict(Backend::Collective, &step(64.0)) < defaults.predict(Backend::OneSided, &step(64.0)));
        let mut params = defaults;
        let mut confidence = Confidence::unmeasured();
        for engine in [Backend::OneSided, Backend::Collective] {
            let e = (engine == Backend::Collective) as usize;
            let rows: Vec<Vec<f64>> = batches.iter().map(|b| features_of(engine, b)).collect();
            let c = raised_defaults(engine, &rows, &measured[e]).expect("batches measured");
            assert_eq!(c[1..], defaults.coefficients(engine)[1..], "only the fixed cost moves");
            params.set_coefficients(engine, &c);
            confidence.set_scaled_engine(engine, &[0.05; 3], &rows, &measured[e], &c);
            // The level is the batches': their median is met.
            let fitted: Vec<f64> = rows.iter().map(|r| r.iter().zip(&c).map(|(x, c)| x * c).sum()).collect();
            assert!(fitted.iter().zip(&measured[e]).any(|(f, m)| (f / m - 1.0).abs() < 1e-12), "{fitted:?}");
        }
        for batch in [1.0, 64.0, 256.0, 1024.0] {
            let (os, coll) = (params.predict(Backend::OneSided, &step(batch)), params.predict(Backend::Collective, &step(batch)));
            assert!(coll > 1.5 * os, "batch {batch}: one-sided {os} s, collective {coll} s");
        }
        assert!(confidence.noise.iter().all(|&n| n >= confidence::UNCALIBRATED_NOISE), "{:?}", confidence.noise);
        assert!(confidence.spread.a_os.is_infinite() && confidence.spread.b_coll.is_infinite());
        assert_eq!(raised_defaults(Backend::OneSided, &[], &[]), None, "nothing measured, nothing raised");
        // Batches faster than the defaults leave them as they are.
        let rows = vec![features_of(Backend::OneSided, &batches[0])];
        assert_eq!(raised_defaults(Backend::OneSided, &rows, &[1e-9]), Some(defaults.coefficients(Backend::OneSided)));
    }

    #[test]
    fn probes_read_from_other_nodes_and_hold_their_own_share() {
        // Two nodes: ranks 0, 1 and ranks 2, 3.
        let topology = Topology::from_leaders(vec![0, 0, 2, 2]);
        let targets = Targets::of(1, 4, &topology);
        assert_eq!(targets.remote, vec![2, 3]);
        let mut rng = SplitMix64::new(1);
        let first_ids = [0, 1000, 2000, 3000];
        for probe in &PROBES {
            let ids = probe_ids(probe, &targets, &first_ids, &mut rng);
            let own = ids.iter().filter(|&&id| (1000..2000).contains(&id)).count();
            let remote = ids.iter().filter(|&&id| id >= 2000).count();
            assert_eq!(remote, probe.count, "{ids:?}");
            // As much as each of the two targets serves it, and none beside one hot target.
            assert_eq!(own, if probe.hot_target { 0 } else { probe.count / 2 }, "{ids:?}");
            assert_eq!(own + remote, ids.len());
            if probe.hot_target {
                assert!(ids.iter().all(|&id| (2000..3000).contains(&id)), "{ids:?}");
            }
        }
        // Without the node-local path every other rank is a target: 3 x 341 of 1024
        // from the others, as a uniform batch of 1365 over 4 ranks holds.
        let targets = Targets::of(1, 4, &Topology::default());
        assert_eq!(targets.remote, vec![0, 2, 3]);
        let large = &PROBES[PROBES.len() - 1];
        let ids = probe_ids(large, &targets, &first_ids, &mut rng);
        assert_eq!(ids.iter().filter(|&&id| (1000..2000).contains(&id)).count(), large.count / 3);
        // At 2 ranks, half of the batch is the rank's own, spread through it.
        let ids = probe_ids(large, &Targets::of(0, 2, &Topology::default()), &first_ids, &mut rng);
        let own: Vec<bool> = ids.iter().map(|&id| id < 1000).collect();
        assert_eq!(own.iter().filter(|&&o| o).count(), large.count);
        assert!(own[..large.count].contains(&false) && own[large.count..].contains(&true), "shuffled");
    }

    #[test]
    fn probes_reserve_what_their_readers_ask() {
        let probe = &PROBES[PROBES.len() - 1];
        // Uniform, one rank a node: each of the others asks a third of its batch (a byte
        // or two lost to the division).
        let uniform = expected_sends(probe, &Readers::of(0, 4, &Topology::default()));
        assert!(uniform.abs_diff(probe.bytes() * 5 / 4) <= 4, "{uniform}");
        // Rank 0 alone on its node, the three others on one: all three read from it alone.
        let apart = Topology::from_leaders(vec![0, 1, 1, 1]);
        assert_eq!(expected_sends(probe, &Readers::of(0, 4, &apart)), 3 * probe.bytes() * 5 / 4);
        // Rank 1 serves rank 0 alone, which spreads its batch over the three.
        assert_eq!(expected_sends(probe, &Readers::of(1, 4, &apart)), probe.bytes() / 3 * 5 / 4);
        // The hot target: every reader asks its first target for the whole batch.
        let hot = PROBES.iter().find(|p| p.hot_target).expect("a hot-target probe");
        assert_eq!(expected_sends(hot, &Readers::of(0, 4, &Topology::default())), 3 * hot.bytes() * 5 / 4);
        assert_eq!(expected_sends(hot, &Readers::of(1, 4, &Topology::default())), hot.bytes() * 5 / 4);
        assert_eq!(expected_sends(hot, &Readers::of(2, 4, &Topology::default())), 0);
    }

    #[test]
    fn loads_the_calibration_object_of_the_stats() {
        let path = std::env::temp_dir().join(format!("mdl-cal-{}.json", std::process::id()));
        let text = "{\"source\": \"measured\", \"seconds\": 1e-1, \"a_os\": 1e-6, \"g_os\": 2.5e-7, \
                    \"b_os\": 1e-10, \"c_os\": 0e0, \"a_coll\": 1.2e-5, \"s_coll\": 3e-8, \"b_coll\": 2e-10, \"c_coll\": 1e-11}";
        std::fs::write(&path, text).unwrap();
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.params.g_os, 2.5e-7);
        assert_eq!(loaded.params.a_coll, 1.2e-5);
        assert_eq!(loaded.source, "file");
        assert_eq!(loaded.params.c_coll, 1e-11);
        std::fs::write(&path, "{\"a_os\": 1}").unwrap();
        assert!(load(&path).unwrap_err().message.contains("g_os"));
        // A file saved before c_coll: told why it no longer loads, and what to do.
        std::fs::write(&path, text.replace(", \"c_coll\": 1e-11", "")).unwrap();
        let old = load(&path).unwrap_err().message;
        assert!(old.contains("c_coll") && old.contains("measure again"), "{old}");
        // Present but not a number: named as such, not taken for an older file.
        for not_a_number in ["null", "\"1e-11\"", "NaN", "0x10", "1e-11 2"] {
            std::fs::write(&path, text.replace("\"c_coll\": 1e-11", &format!("\"c_coll\": {not_a_number}"))).unwrap();
            let refused = load(&path).unwrap_err().message;
            assert!(refused.contains("\"c_coll\" must be a finite number >= 0"), "{not_a_number}: {refused}");
        }
        // -0 loads as 0, bit for bit (the ranks compare the parameters' bits).
        std::fs::write(&path, text.replace("\"c_os\": 0e0", "\"c_os\": -0")).unwrap();
        assert_eq!(load(&path).unwrap().params.c_os.to_bits(), 0.0f64.to_bits());
        // The noise: read where present; absent, null, negative or not finite, 0 (the
        // parameters taken as exact); -0 is 0, bit for bit (the ranks compare it too).
        assert_eq!(load(&path).unwrap().confidence.noise, [0.0; 2], "saved before the noise was");
        let noisy = |one_sided: &str| {
            let with = text.replace("}", &format!(", \"noise_onesided\": {one_sided}, \"noise_collective\": 2.5e-1}}"));
            std::fs::write(&path, with).unwrap();
            load(&path).unwrap().confidence.noise
        };
        assert_eq!(noisy("1e-1"), [0.1, 0.25]);
        for ignored in ["null", "-1e-1", "1e999", "NaN"] {
            assert_eq!(noisy(ignored)[0].to_bits(), 0.0f64.to_bits(), "{ignored}");
        }
        assert_eq!(noisy("-0")[0].to_bits(), 0.0f64.to_bits(), "-0");
        let _ = std::fs::remove_file(&path);
        assert!(load(&path).is_err());
        // Not a regular file: refused without reading (a FIFO would wait for a writer).
        let refused = load(&std::env::temp_dir()).unwrap_err().message;
        assert!(refused.contains("not a regular file"), "{refused}");
    }
}
