//! The scale model: the estimator's cost model fed with interconnect parameters instead
//! of measured ones, to predict which engine wins on a machine we cannot run on (and at
//! rank counts we cannot reach here).
//!
//! From an interconnect with latency `L`, per-get overhead `g` (an RMA get is handled
//! in software by the NIC's library: request, completion tracking), per-message
//! injection overhead `o` of two-sided messages, link bandwidth `W` (bytes/s per NIC)
//! and memory-copy bandwidth `M`, for P ranks:
//!
//! ```text
//! a_os   = L                       one round trip to complete the step's gets
//! g_os   = g                       each get is issued, all in flight at once
//! b_os   = 1 / W                   bytes into this rank's NIC
//! c_os   = 0                       bytes out of it, to the ranks that get from it: a
//!                                  full-duplex NIC carries them beside the bytes in
//! a_coll = 3 * L * log2(P) + 2 * (P - 1) * o
//!                                  per round: a log-depth MPI_Alltoall of counts, and two
//!                                  MPI_Alltoallv that post a message to every peer
//! s_coll = 2 * 8 / W               request id out, plus packing bookkeeping
//! b_coll = 1 / W + 1 / M           transfer and unpack, on the requester
//! c_coll = 1 / M                   pack, on the owner
//! ```
//!
//! A batch of B samples per rank drawn uniformly over all ranks, of mean size s, has
//! `S = G = B (P - 1) / P` remote samples per rank and `B_r = IN = S * s` bytes in and out
//! per rank (the expectation; the busiest rank is close to it for large batches).
//!
//! Served bytes cost the one-sided engine nothing here (`c_os = 0`): in a uniform batch
//! a rank serves as many bytes as it fetches, in the other direction of its link, so a
//! step bound by bandwidth takes `B_r / W`, not `2 B_r / W`. Until 2026-12-06 the model
//! charged `c_os = 1 / W` and so priced such steps at twice their cost: under SimGrid's
//! SMPI on a Dragonfly of full-duplex 25 GB/s links (4 ranks a node, 6.25 GB/s each),
//! uniform 16 KB batches (256 and 1024 at 16 ranks, 256 at 64) took 1.07-1.13 times
//! what this model now predicts, and 0.53-0.58 times what it predicted with
//! `c_os = 1 / W` (docs/scale-simulation.md, "Beside the scale model"). The
//! library's own estimator fits `c_os` from calibration (a hot target it reads), which
//! this does not touch. The collective engine's terms already charge the link once.
//!
//! Around the engines, a step costs what the library does itself (`benches/scale`,
//! `step_cost`) and what the ranks' agreement costs:
//!
//! ```text
//! cpu        = c_plan * B              draw and plan the batch (both engines)
//!            + c_asked * S             find what the others ask (collective engine only)
//! agreement  = L * log2(P)             a blocking all-reduce of a few values
//! sync       = jitter * sqrt(2 ln P)   waiting for the slowest of P ranks, each late by
//!                                      a random jitter (the expected maximum of P normal
//!                                      deviations): paid by every step that waits for
//!                                      all ranks
//! ```
//!
//! A step of `mdl_fetch_batch` (or of the sampler with `MDL_AGREEMENT_LAG=0`) waits for
//! its agreement: both engines pay `agreement + sync`. A sampler step agreed ahead waits
//! for nobody when it runs one-sided; the collective engine's exchange still waits for
//! every rank (`sync`), so the zero-collective step moves the crossover towards the
//! one-sided engine.

use mdloader::bench::{Backend, CostParams, StepFeatures};

/// An interconnect, in SI units.
#[derive(Clone, Copy, Debug)]
pub struct Interconnect {
    pub latency: f64,
    pub get_overhead: f64,
    pub injection_overhead: f64,
    pub bandwidth: f64,
    pub memcpy_bandwidth: f64,
}

/// What the library and the machine add to every step, besides the engines' transfers.
#[derive(Clone, Copy, Debug)]
pub struct StepOverheads {
    /// CPU seconds per sample of the batch to draw and plan it (`step_cost`: sampler +
    /// plan, divided by B).
    pub plan_per_sample: f64,
    /// CPU seconds per sample asked of an owner, to find them (`step_cost`: asked).
    pub asked_per_sample: f64,
    /// Standard deviation of the ranks' arrival at a step (OS noise, uneven compute).
    pub jitter: f64,
}

impl StepOverheads {
    /// `step_cost` at P = 4096, B = 256 on a 2-core VM under load (about 140 ns per
    /// sample to draw and plan, 15 ns per sample asked), and 2 us of jitter.
    pub fn measured_here() -> StepOverheads {
        StepOverheads { plan_per_sample: 140e-9, asked_per_sample: 15e-9, jitter: 2e-6 }
    }
}

/// How a step agrees before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A blocking agreement in the step: `mdl_fetch_batch`, or the sampler with
    /// `MDL_AGREEMENT_LAG=0`.
    Agreed,
    /// The sampler's steps agreed ahead: no collective call of their own.
    AgreedAhead,
}

impl StepKind {
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Agreed => "agreed",
            StepKind::AgreedAhead => "agreed_ahead",
        }
    }
}

impl Interconnect {
    /// HPE Slingshot-like: 2 us latency, 25 GB/s per NIC, 1 us per get, 0.25 us per
    /// two-sided message, 10 GB/s memcpy.
    pub fn slingshot() -> Interconnect {
        Interconnect {
            latency: 2e-6,
            get_overhead: 1e-6,
            injection_overhead: 0.25e-6,
            bandwidth: 25e9,
            memcpy_bandwidth: 10e9,
        }
    }

    pub fn params(&self, ranks: usize) -> CostParams {
        let p = ranks.max(2) as f64;
        CostParams {
            a_os: self.latency,
            g_os: self.get_overhead,
            b_os: 1.0 / self.bandwidth,
            c_os: 0.0,
            a_coll: 3.0 * self.latency * p.log2() + 2.0 * (p - 1.0) * self.injection_overhead,
            s_coll: 16.0 / self.bandwidth,
            b_coll: 1.0 / self.bandwidth + 1.0 / self.memcpy_bandwidth,
            c_coll: 1.0 / self.memcpy_bandwidth,
        }
    }
}

/// Predicted seconds of each engine for a uniformly random batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub ranks: usize,
    pub batch: u64,
    pub sample_bytes: f64,
    pub onesided: f64,
    pub collective: f64,
}

impl Point {
    pub fn winner(&self) -> &'static str {
        if self.collective < self.onesided { "collective" } else { "onesided" }
    }
}

pub fn predict(net: &Interconnect, costs: &StepOverheads, kind: StepKind, ranks: usize, batch: u64, sample_bytes: f64) -> Point {
    let p = ranks as f64;
    let remote = batch as f64 * (p - 1.0) / p;
    let f = StepFeatures {
        gets: remote,
        samples: remote,
        bytes: remote * sample_bytes,
        served: remote * sample_bytes,
        rounds: 1.0,
    };
    let params = net.params(ranks);
    let plan = costs.plan_per_sample * batch as f64;
    let sync = costs.jitter * (2.0 * p.ln()).max(0.0).sqrt();
    let agreement = match kind {
        StepKind::Agreed => net.latency * p.log2() + sync,
        StepKind::AgreedAhead => 0.0,
    };
    let collective_waits = if kind == StepKind::Agreed { 0.0 } else { sync };
    Point {
        ranks,
        batch,
        sample_bytes,
        onesided: params.predict(Backend::OneSided, &f) + plan + agreement,
        collective: params.predict(Backend::Collective, &f)
            + plan
            + costs.asked_per_sample * remote
            + agreement
            + collective_waits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_wins_large_batches_at_few_ranks_and_onesided_at_scale() {
        let (net, costs) = (Interconnect::slingshot(), StepOverheads::measured_here());
        for kind in [StepKind::Agreed, StepKind::AgreedAhead] {
            assert_eq!(predict(&net, &costs, kind, 4, 1024, 2048.0).winner(), "collective");
            assert_eq!(predict(&net, &costs, kind, 2048, 1024, 2048.0).winner(), "onesided");
            assert_eq!(predict(&net, &costs, kind, 4, 1, 2048.0).winner(), "onesided");
        }
    }

    #[test]
    fn steps_agreed_ahead_favour_the_onesided_engine() {
        let (net, costs) = (Interconnect::slingshot(), StepOverheads::measured_here());
        for (p, b) in [(64, 64), (256, 256), (1024, 1024)] {
            let agreed = predict(&net, &costs, StepKind::Agreed, p, b, 2048.0);
            let ahead = predict(&net, &costs, StepKind::AgreedAhead, p, b, 2048.0);
            assert!(ahead.onesided < agreed.onesided, "P={p} B={b}");
            assert!(ahead.collective / ahead.onesided > agreed.collective / agreed.onesided, "P={p} B={b}");
        }
    }
}
