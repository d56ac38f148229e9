//! The two ways of moving a batch's remote samples into the caller's buffer. Local
//! samples are copied by the loader before an engine runs; an engine moves exactly the
//! plan's remote part.

mod collective;
mod onesided;

pub use collective::{Collective, collective_rounds};
pub use onesided::OneSided;

use crate::error::Result;
use crate::mpi::Comm;
use crate::plan::BatchPlan;
use crate::store::Store;

/// What an engine works with in one step.
pub struct StepContext<'a> {
    pub comm: &'a Comm,
    pub store: &'a Store,
    pub plan: &'a BatchPlan,
    /// See `Config::max_message_bytes`.
    pub max_message_bytes: u64,
    /// Rounds of the collective exchange, agreed by all ranks (the maximum any rank
    /// needs); ignored by the one-sided engine.
    pub collective_rounds: u64,
}

pub trait Engine {
    /// Move the plan's remote samples into `out` (laid out as `plan.out_offsets`).
    /// Collective engines must be called by every rank of the step.
    fn fetch(&self, step: &StepContext, out: &mut [u8]) -> Result<()>;
}
