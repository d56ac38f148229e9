//! The two ways of moving a batch's remote samples into the caller's buffer. Local
//! samples (this rank's and, on the node-local path, its node's) are copied with memcpy
//! before an engine runs; an engine moves exactly the plan's remote part.

mod collective;
mod onesided;

use collective::Collective;
pub use collective::{ExchangeBuffers, ExchangeShape, RequestsToOwner, ServeRoom, exchange_shape};
use onesided::OneSided;

use crate::backend::Backend;
use crate::error::Result;
use crate::mpi::{Comm, GetLimits};
use std::cell::RefCell;
use std::ops::Range;
use crate::plan::BatchPlan;
use crate::store::Store;

/// What an engine works with in one step.
pub struct StepContext<'a> {
    pub comm: &'a Comm,
    pub store: &'a Store,
    pub plan: &'a BatchPlan,
    /// `MDL_MAX_MESSAGE_BYTES` and `MDL_MAX_GETS_IN_FLIGHT`.
    pub limits: GetLimits,
    /// The collective engine's buffers, kept from step to step by the loader.
    pub buffers: &'a RefCell<ExchangeBuffers>,
    /// Rounds of the collective exchange, agreed by all ranks (the maximum any rank
    /// needs); ignored by the one-sided engine.
    pub collective_rounds: u64,
    /// What each rank asks this rank for in the exchange, when the step's agreement
    /// carried it (see `estimator::features`); the collective engine then skips the
    /// count exchange of a single-round step.
    pub requests_to_me: Option<&'a RequestsToOwner>,
    /// The most bytes any rank sends or receives in the step's exchange, agreed, where
    /// the agreement shows what owners serve (the request matrix, or every batch
    /// known); it picks the exchange's `mpi::CountWidth` on every rank alike. Unused
    /// where the counts travel (their exchange agrees on it).
    pub most_exchanged_bytes: u64,
    /// When every rank's batch of this step is known (the built-in sampler). The
    /// collective engine then sends no requests.
    pub known_batches: Option<&'a dyn KnownBatches>,
    /// The step ends in a barrier: some rank serves gets only while inside MPI
    /// (agreed by the loader).
    pub gets_end_in_barrier: bool,
}

/// Every rank's batch of a step, known on every rank without communication.
pub trait KnownBatches {
    /// `visit(q, id)` for the ids of `owned` (this rank's samples) in every rank q's
    /// batch, by rank and in batch order; O(those ids), not O(every batch).
    fn for_each_request(&self, owned: Range<u64>, visit: &mut dyn FnMut(usize, u64));
    /// Bytes of `owned` in the other ranks' batches (O(1) per step: worked out with the
    /// epoch's inversion).
    fn served_bytes(&self, owned: Range<u64>) -> u64;
}

pub trait Engine {
    /// Move the plan's remote samples into `out` (laid out as `plan.out_offsets`).
    /// Collective engines must be called by every rank of the step.
    fn fetch(&self, step: &StepContext, out: &mut [u8]) -> Result<()>;
}

/// Copy the plan's local samples, this rank's and its node's, from their shards: no
/// MPI call (the node's shards were published at registration and never change).
/// Each copy's source is asked of the memory `AHEAD` copies ahead: small samples at
/// random places cost a cache miss each, which the CPU overlaps only a few at a time
/// by itself. Each source is looked up once, into a ring of the next `AHEAD`.
pub fn copy_local(step: &StepContext, out: &mut [u8]) {
    const AHEAD: usize = 16;
    let me = step.comm.rank();
    let mut sources = step.plan.local.iter().map(|copy| {
        &step.store.shard_of(copy.owner, me)[copy.src_offset as usize..][..copy.len as usize]
    });
    let mut ahead: [&[u8]; AHEAD] = [&[]; AHEAD];
    for slot in &mut ahead {
        let Some(source) = sources.next() else { break };
        prefetch(source);
        *slot = source;
    }
    for (k, copy) in step.plan.local.iter().enumerate() {
        let slot = &mut ahead[k % AHEAD];
        let source = std::mem::take(slot);
        if let Some(next) = sources.next() {
            prefetch(next);
            *slot = next;
        }
        let dest = copy.dest_offset as usize;
        out[dest..dest + source.len()].copy_from_slice(source);
    }
}

/// Lines asked for per sample: a small sample whole; a longer one streams, and the
/// hardware's prefetcher follows it. (1 line measured the same within noise.)
const PREFETCH_LINES: usize = 4;

fn prefetch(bytes: &[u8]) {
    crate::prefetch::lines(bytes, PREFETCH_LINES);
}

/// Move the plan's remote samples with `engine` (collective: on every rank).
pub fn fetch_remote(step: &StepContext, engine: Backend, out: &mut [u8]) -> Result<()> {
    match engine {
        Backend::Collective => Collective.fetch(step, out)?,
        Backend::OneSided | Backend::Auto => OneSided.fetch(step, out)?,
    }
    // Both engines may get (the collective one its oversize samples): no rank leaves
    // MPI before every rank's gets have been served.
    if step.gets_end_in_barrier {
        step.comm.barrier()?;
    }
    Ok(())
}
