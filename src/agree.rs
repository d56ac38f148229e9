//! Agreement before communication: every collective entry point first combines, in one
//! small all-reduce, whether any rank failed its local checks and whatever else the
//! ranks must agree on (the backend setting, the estimator's predictions). No rank then
//! enters a data exchange that another rank skipped, so a bad argument on one rank turns
//! into an error on all ranks instead of a hang.
//!
//! All fields are combined with MAX over `f64` (exact for the small integers used), and
//! minima are taken as the maximum of negated values.

use crate::config::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::mpi::Comm;

/// This rank's contribution.
#[derive(Clone, Debug)]
pub struct Proposal {
    pub error: Option<Error>,
    pub backend: Backend,
    /// Values to combine by maximum (the estimator's per-rank predictions, ...).
    pub maxima: Vec<f64>,
}

/// The combination over all ranks.
#[derive(Clone, Debug)]
pub struct Agreed {
    /// The lowest rank that failed, if any.
    pub first_failed_rank: Option<usize>,
    pub backend_min: Backend,
    pub backend_max: Backend,
    pub maxima: Vec<f64>,
}

const HEADER: usize = 3;

pub fn agree(comm: &Comm, proposal: &Proposal) -> Result<Agreed> {
    let failed = proposal.error.is_some();
    let mut values = Vec::with_capacity(HEADER + proposal.maxima.len());
    values.push(if failed { -(comm.rank() as f64) } else { f64::NEG_INFINITY });
    values.push(proposal.backend as i64 as f64);
    values.push(-(proposal.backend as i64 as f64));
    values.extend_from_slice(&proposal.maxima);
    let combined = comm.allreduce_max(&values)?;
    let backend = |v: f64| Backend::from_code(v as i64).expect("every rank sends a valid backend");
    Ok(Agreed {
        first_failed_rank: combined[0].is_finite().then(|| (-combined[0]) as usize),
        backend_max: backend(combined[1]),
        backend_min: backend(-combined[2]),
        maxima: combined[HEADER..].to_vec(),
    })
}

impl Agreed {
    /// The outcome for this rank: its own error if it failed, `MDL_ERR_REMOTE` if only
    /// others did.
    pub fn outcome(&self, own_error: Option<Error>, call: &str) -> Result<()> {
        match (own_error, self.first_failed_rank) {
            (Some(err), _) => Err(err),
            (None, Some(rank)) => Err(Error::new(
                mdl_status::MDL_ERR_REMOTE,
                format!("{call} failed on rank {rank} (see that rank's error); nothing was done"),
            )),
            (None, None) => Ok(()),
        }
    }

    pub fn backends_differ(&self) -> bool {
        self.backend_min != self.backend_max
    }
}

/// Agree on the outcome of a collective call's local checks alone.
pub fn agree_on_checks(comm: &Comm, checks: Result<()>, call: &str) -> Result<()> {
    let error = checks.err();
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima: Vec::new() };
    agree(comm, &proposal)?.outcome(error, call)
}

/// Agree on local checks and on `values` being the same on every rank (arguments of a
/// collective call that must match, like the sampler's seed and batch size). A mismatch
/// is `MDL_ERR_INVALID_ARG` on every rank.
pub fn agree_identical(comm: &Comm, checks: Result<()>, values: &[(&str, u64)], call: &str) -> Result<()> {
    let error = checks.err();
    // Each value as two 32-bit halves (exact in f64), and their negations so that the
    // maximum also yields the minimum.
    let mut maxima = Vec::with_capacity(values.len() * 4);
    for &(_, v) in values {
        let (hi, lo) = ((v >> 32) as f64, (v & 0xFFFF_FFFF) as f64);
        maxima.extend_from_slice(&[hi, lo, -hi, -lo]);
    }
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima };
    let agreed = agree(comm, &proposal)?;
    agreed.outcome(error, call)?;
    let differing: Vec<&str> = values
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            let m = &agreed.maxima[i * 4..i * 4 + 4];
            m[0] != -m[2] || m[1] != -m[3]
        })
        .map(|(_, (name, _))| *name)
        .collect();
    if differing.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(format!("{call}: {} must be the same on every rank", differing.join(", "))))
    }
}
