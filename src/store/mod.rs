//! The sharded store: this rank's samples in an RMA window plus the global index that
//! locates any sample (owner rank, offset in the owner's window, length) without
//! communication.
//!
//! Memory per rank: the shard itself (one copy of the registered bytes, in the window)
//! plus the index: 1-3 bytes per global sample for samples up to 64 KiB (every
//! sample's start, packed: `packed`), one copy per node shared by its ranks
//! (`node_index`), and 8 bytes per rank. Where every sample of the job has the same
//! length the index keeps no per-sample table.

mod index;
mod node_index;
mod node_shard;
mod owners;
mod packed;
mod shm_budget;
mod topology;

pub use index::GlobalIndex;
pub use shm_budget::SharedPlacement;
pub use topology::Topology;

use index::Starts;
use packed::Packing;

use crate::memory;
use crate::agree::{agree_on_checks, agree_on_split};
use crate::error::{Error, Result, outcome_of};
use crate::rng::mix;
use crate::mpi::{Comm, Get, GetLimits, PrivateMemory, Window};
use node_shard::NodeShards;
use std::sync::Arc;

/// A shard as the caller describes it, checked: sample i is
/// `data[offsets[i] .. offsets[i + 1]]`.
pub struct ShardView<'a> {
    pub data: &'a [u8],
    pub offsets: &'a [u64],
}

impl<'a> ShardView<'a> {
    /// Check the offsets: n + 1 entries starting at 0 and never decreasing.
    pub fn new(data: &'a [u8], offsets: &'a [u64]) -> Result<ShardView<'a>> {
        Self::check_offsets(offsets)?;
        Ok(ShardView { data, offsets })
    }

    /// Offsets must start at 0 and never decrease (checked before the data they
    /// describe is looked at, so that a bad offset is named as such).
    pub fn check_offsets(offsets: &[u64]) -> Result<()> {
        if offsets.first().is_some_and(|&first| first != 0) {
            return Err(Error::invalid(format!("offsets[0] is {}, must be 0", offsets[0])));
        }
        if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
            return Err(Error::invalid(format!(
                "offsets decrease at sample {i}: offsets[{i}] = {} > offsets[{}] = {}",
                offsets[i],
                i + 1,
                offsets[i + 1]
            )));
        }
        Ok(())
    }

    pub fn num_samples(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    pub fn lengths(&self) -> Vec<u64> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// A checksum of the shard's lengths, its samples numbered from `first_id`: a sum
    /// of one hash per sample, so that the sums over any split of the same dataset
    /// agree (replica groups compare their copies with it).
    pub fn lengths_checksum(&self, first_id: u64) -> u64 {
        self.offsets.windows(2).zip(first_id..).fold(0u64, |sum, (w, id)| {
            sum.wrapping_add(mix(mix(id) ^ (w[1] - w[0])))
        })
    }
}

/// The shortest and the longest sample of the job (one all-reduce of each rank's;
/// `(u64::MAX, 0)` for an empty job).
fn length_range(comm: &Comm, shard: &ShardView) -> Result<(u64, u64)> {
    let (shortest, longest) = shard.offsets.windows(2).fold((u64::MAX, 0), |(lo, hi), w| (lo.min(w[1] - w[0]), hi.max(w[1] - w[0])));
    // The shortest as a maximum: u64::MAX - shortest.
    let job = comm.allreduce_max(&[u64::MAX - shortest, longest])?;
    Ok((u64::MAX - job[0], job[1]))
}

/// Whether `bytes` can be allocated at all (address space, `ulimit -v`): tried before
/// the collective `MPI_Win_allocate`, whose failure on one rank leaves the others
/// waiting in it. The memory is released at once, untouched.
pub(crate) fn check_allocatable(bytes: usize) -> Result<()> {
    memory::with_room::<u8>(bytes).map(drop)
}

/// How a store is built and read (from the agreed configuration).
#[derive(Clone, Debug)]
pub struct StoreSettings {
    pub limits: GetLimits,
    /// `MDL_WARMUP_GETS` (see [`warm_up`]).
    pub warm_up_gets: u64,
    /// `MDL_WARMUP_MAP_BYTES` (see [`map_node_shards`]).
    pub warm_up_map_bytes: u64,
    /// `MDL_SHARED_INDEX`: one index per node, or one per rank.
    pub shared_index: bool,
    /// `MDL_NODE_LOCAL`: the shards of a node's ranks in shared memory (see
    /// `node_shard`), and `MDL_NODE_KEY`.
    pub node_local: bool,
    pub node_key: u32,
    /// `MDL_SHM_DIR` and `MDL_SHM_RESERVE` (see `shm_budget`).
    pub shm_dir: std::path::PathBuf,
    pub shm_reserve: u64,
    /// Bytes of the scratch shard that calibration registers beside this store, in a
    /// store of the same kind, when it measures (0: it will not).
    pub scratch_shard_bytes: u64,
    /// Where the memory goes, decided already (calibration's scratch store follows the
    /// registered store); None: checked at registration (`shm_budget`).
    pub placement: Option<SharedPlacement>,
}

/// The registered store: this rank's window, its node's shards and the global index.
pub struct Store {
    /// The window the engines read with RMA.
    pub window: Window,
    /// The shards of this rank's node, mapped (None without the node-local path).
    node: Option<NodeShards>,
    /// Which ranks read each other's shards directly.
    pub topology: Topology,
    /// Whether some rank reads ranks of its MPI node with gets (agreed; true where
    /// not known): the shards [`map_node_shards`] maps.
    gets_within_nodes: bool,
    pub index: Arc<GlobalIndex>,
    /// Whether the index and the shards are in node-shared memory.
    pub placement: SharedPlacement,
}

impl Store {
    /// Collective: gather every rank's lengths into the global index, copy the shard
    /// into a window and warm the window up with `warm_up_gets` small gets (see
    /// [`warm_up`]). The shard was checked and agreed on by all ranks; everything that
    /// can still fail on one rank (the index's memory, MPI's count limits, the window's
    /// memory) is checked and agreed on before the ranks exchange anything.
    pub fn register(comm: &Comm, shard: &ShardView, settings: &StoreSettings) -> Result<Store> {
        let per_rank = comm.allgather(shard.num_samples())?;
        agree_on_checks(comm, check_allocatable(shard.data.len()))?;
        let (shortest, longest) = length_range(comm, shard)?;
        // Samples of one length need no table; otherwise its packing follows the
        // longest sample (agreed, so that every rank packs alike).
        let samples = per_rank.iter().fold(0u64, |sum, &n| sum.saturating_add(n));
        let packing = if shortest == longest { None } else { Some(Packing::new(samples, longest)?) };
        let shared = shm_budget::decide(comm, shard.data.len(), packing.map_or(0, |p| p.bytes()), settings)?;
        let (index, index_refused) = match packing {
            None => (GlobalIndex::uniform(&per_rank, longest), false),
            Some(packing) => packed_index(comm, shard, &per_rank, packing, shared.index, settings.limits.max_message)?,
        };
        let uniform = packing.is_none();
        let (window, node, topology, shards_refused, gets_within_nodes) = if !shared.shards {
            (private_window(comm, shard.data)?, None, Topology::default(), false, true)
        } else if settings.node_local {
            let placed = node_shard::place(comm, shard.data, settings.node_key)?;
            (placed.window, placed.node, placed.topology, placed.refused, placed.gets_within_nodes)
        } else {
            (Window::allocate(comm, shard.data)?, None, Topology::default(), false, true)
        };
        // Where MPI refused a node-shared window (agreed, and said once), calibration's
        // scratch store, which takes this placement, does not ask again (nor warn
        // again): an index that could not be shared, or, with no index table to tell
        // (samples of one length), shards that could not.
        let index_refused = index_refused || (uniform && shards_refused);
        let placement = SharedPlacement { index: shared.index && !index_refused, ..shared };
        let store = Store { window, node, topology, gets_within_nodes, index: Arc::new(index), placement };
        let warmed = map_node_shards(comm, &store, shard.data.len() as u64, settings)
            .and_then(|()| warm_up(&store, comm.rank(), settings.limits, settings.warm_up_gets));
        // Every rank stays inside MPI until all have warmed up (over transports where a
        // get needs its target's progress, no rank waits for one that has left), and a
        // failure anywhere fails registration everywhere, freeing the window: a get
        // that fails on one rank (gets are one-sided: no rank waits for another's) is
        // agreed here, once.
        match agree_on_checks(comm, warmed) {
            Ok(()) => Ok(store),
            Err(err) => {
                store.free()?;
                Err(Error { message: format!("warming the window up: {}", err.message), ..err })
            }
        }
    }

    /// Collective: free the window and the index (a node-shared index is freed with
    /// the node's ranks). Nothing else may hold the index any more.
    pub fn free(self) -> Result<()> {
        // The RMA window first: it may expose the node-shared window's memory.
        let freed_window = self.window.free().and(self.node.map_or(Ok(()), NodeShards::free));
        let freed_index = match Arc::try_unwrap(self.index).map(GlobalIndex::into_starts) {
            Ok(Starts::Node(shared)) => shared.free(),
            Ok(Starts::Private(_)) => Ok(()),
            Err(_) => {
                log::warn!("the index is still in use at finalize: its shared memory is left to the end of the job");
                Ok(())
            }
        };
        freed_window.and(freed_index)
    }

    /// The shard of `owner`, a rank sharing this rank's node (or this rank itself).
    pub fn shard_of(&self, owner: usize, me: usize) -> &[u8] {
        match &self.node {
            Some(node) if owner != me => node.shard_of(owner),
            _ => self.window.local(),
        }
    }
}

/// Collective: the packed index, one copy per node where `shared` (and MPI makes one),
/// and whether MPI refused the node's copy (every rank then keeps its own).
fn packed_index(comm: &Comm, shard: &ShardView, per_rank: &[u64], packing: Packing, shared: bool, max_message: u64) -> Result<(GlobalIndex, bool)> {
    let starts = if shared {
        node_index::build(comm, shard, per_rank, packing, max_message)?
    } else {
        Starts::Private(node_index::gather_private(comm, shard, per_rank, packing, max_message)?)
    };
    let refused = shared && matches!(starts, Starts::Private(_));
    Ok((GlobalIndex::from_starts(per_rank, packing, starts), refused))
}

/// Collective: the shard in a window over this rank's private memory, where the
/// node's shared memory cannot hold it (`shm_budget`); every rank has its memory, or
/// every rank fails, before any enters the window's creation.
fn private_window(comm: &Comm, data: &[u8]) -> Result<Window> {
    let memory = PrivateMemory::allocate(data.len());
    if let Err(err) = agree_on_checks(comm, outcome_of(&memory)) {
        memory.map(PrivateMemory::release).ok();
        return Err(err);
    }
    Window::create_private(comm, memory.expect("agreed that every rank has its memory"), data)
}

/// Read a few bytes of `gets` samples spread over the other ranks' shards. Open MPI's
/// one-sided transfers run up to 10x slower for the first few hundred gets on a new
/// window (shared memory, measured: a 16-sample step takes 30 us at first and 3 us after
/// about 500 gets, with raw `MPI_Get` as with the library); without this the first
/// training steps, and the estimator's first measurements, would see that.
fn warm_up(store: &Store, me: usize, limits: GetLimits, gets: u64) -> Result<()> {
    const BYTES: u64 = 8;
    const PER_FLUSH: usize = 64;
    let total = store.index.num_samples();
    let mut scratch = [0u8; BYTES as usize * PER_FLUSH];
    let mut pending = Vec::with_capacity(PER_FLUSH);
    // Samples at a golden-ratio stride cover every shard evenly, the same way each time.
    let spread = (0..gets).map(|k| (((k as f64 + 0.5) * 0.618_033_988_749_895).fract() * total as f64) as u64);
    for id in spread {
        // Only other nodes' shards are ever read with gets.
        let Some(loc) = store.index.locate(id).filter(|l| !store.topology.shares(me, l.owner) && l.len > 0) else { continue };
        let dest_offset = pending.len() as u64 * BYTES;
        pending.push(Get { target: loc.owner, target_offset: loc.offset, dest_offset, len: loc.len.min(BYTES) });
        if pending.len() == PER_FLUSH {
            store.window.get_all(&pending, &mut scratch, limits)?;
            pending.clear();
        }
    }
    store.window.get_all(&pending, &mut scratch, limits)
}

/// Bytes apart of the reads of [`map_node_shards`]: on a page fault in a shared-memory
/// file the kernel maps the 64 KB around the page (its fault-around, 16 pages of 4 KB).
const MAP_STRIDE: u64 = 64 << 10;

/// Collective: read one byte of every `MAP_STRIDE` of the shards of this rank's MPI
/// node that its gets read (those the node-local path does not copy), up to
/// `warm_up_map_bytes` of them. On one node Open MPI serves a get out of the target's
/// shared-memory segment, which the reader maps on first touch, a minor page fault per
/// 64 KB: one-sided steps ran 1.4-3x slower than later for their first few hundred
/// steps (the demo's 4 ranks: 1,730 faults a rank in 2,000 steps, collective steps
/// none), and the estimator, which measured them so, priced the engine by a transient.
/// Where gets cross a network, a node's ranks still share MPI's node: a message per
/// 64 KB, 1/65536 of the bytes. Skipped on every rank alike where the node-local path
/// found no such shards (it copies whole MPI nodes, or every MPI node holds one rank).
fn map_node_shards(comm: &Comm, store: &Store, my_bytes: u64, settings: &StoreSettings) -> Result<()> {
    if settings.warm_up_map_bytes == 0 || !store.gets_within_nodes {
        return Ok(());
    }
    let node = agree_on_split(comm, comm.split_shared(), "finding the node's shards to map")?;
    // Every rank takes part in both gathers and the free whatever fails in them, and
    // no rank reads until all have their node's shards.
    let ranks = node.allgather(comm.rank() as u64);
    let bytes = node.allgather(my_bytes);
    let freed = node.free();
    let gathered = (|| Ok((ranks?, bytes?, freed?)))();
    agree_on_checks(comm, outcome_of(&gathered))?;
    let (ranks, bytes, ()) = gathered.expect("agreed that every rank gathered its node");
    let me = comm.rank();
    let mut left = settings.warm_up_map_bytes;
    let peers = ranks.iter().zip(&bytes).map(|(&rank, &len)| (rank as usize, len));
    let reads = peers.filter(|&(peer, _)| peer != me && !store.topology.shares(me, peer)).flat_map(|(peer, len)| {
        let len = len.min(left);
        left -= len;
        (0..len).step_by(MAP_STRIDE as usize).map(move |offset| (peer, offset))
    });
    const PER_FLUSH: usize = 64;
    let mut scratch = [0u8; PER_FLUSH];
    let mut gets = Vec::with_capacity(PER_FLUSH);
    for (target, target_offset) in reads {
        gets.push(Get { target, target_offset, dest_offset: gets.len() as u64, len: 1 });
        if gets.len() == PER_FLUSH {
            store.window.get_all(&gets, &mut scratch, settings.limits)?;
            gets.clear();
        }
    }
    store.window.get_all(&gets, &mut scratch, settings.limits)
}

/// Free node-shared memory (a shared array or window) that not every node got, where
/// the whole node has it (freeing is collective over the node); otherwise leave it to
/// the end of the job.
fn release_where_whole_node<T>(node: &Comm, shared: Result<T>, free: impl FnOnce(T) -> Result<()>) -> Result<()> {
    let whole_node = agree_on_checks(node, outcome_of(&shared));
    match (whole_node, shared) {
        (Ok(()), Ok(shared)) => free(shared),
        (_, shared) => {
            std::mem::forget(shared);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::mdl_status;

    #[test]
    fn offsets_must_start_at_zero_and_not_decrease() {
        let data = [0u8; 8];
        assert!(ShardView::new(&data, &[0, 4, 8]).is_ok());
        assert!(ShardView::new(&data, &[0, 4, 4, 8]).is_ok());
        assert!(ShardView::new(&data, &[]).is_ok());
        assert_eq!(
            ShardView::new(&data, &[1, 4]).err().map(|e| e.status),
            Some(mdl_status::MDL_ERR_INVALID_ARG)
        );
        let err = ShardView::new(&data, &[0, 5, 4]).err().expect("decreasing offsets");
        assert!(err.message.contains("decrease at sample 1"), "{}", err.message);
    }
}
