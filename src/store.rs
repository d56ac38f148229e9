//! The sharded store: this rank's samples in an RMA window plus the global index that
//! locates any sample (owner rank, offset in the owner's window, length) without
//! communication.
//!
//! Memory per rank: the shard itself (one copy of the registered bytes, in the window)
//! plus the index, 8 bytes per global sample (a prefix sum of all sample lengths) and
//! 8 bytes per rank. Registration gathers the lengths into the index's own memory and
//! turns them into the prefix sum in place, so it needs no second copy.

use crate::agree::agree_on_checks;
use crate::error::{Error, Result};
use crate::mpi::{Comm, GathervLayout, Get, GetLimits, Window};
use std::sync::Arc;

/// Where a sample lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub owner: usize,
    /// Byte offset in the owner's window.
    pub offset: u64,
    pub len: u64,
}

/// Global id -> location, identical on every rank.
#[derive(Debug, PartialEq, Eq)]
pub struct GlobalIndex {
    /// `first_id[r]` is rank r's first global id; `first_id[P]` is the number of samples.
    first_id: Vec<u64>,
    /// `starts[g]` is sample g's position in the concatenation of all shards;
    /// `starts[N]` is the total size.
    starts: Vec<u64>,
}

impl GlobalIndex {
    /// Build from every rank's sample lengths, concatenated in rank order, and the number
    /// of samples each rank holds.
    /// The index from each rank's sample count and the prefix sums of all lengths
    /// (`starts[0] = 0`, N + 1 entries).
    pub fn from_starts(per_rank: &[u64], starts: Vec<u64>) -> GlobalIndex {
        let mut first_id = Vec::with_capacity(per_rank.len() + 1);
        let mut next = 0;
        for &n in per_rank {
            first_id.push(next);
            next += n;
        }
        first_id.push(next);
        assert_eq!(next + 1, starts.len() as u64, "per-rank counts must cover all samples");
        GlobalIndex { first_id, starts }
    }

    /// The index from every sample's length (tests).
    #[cfg(test)]
    pub fn from_lengths(lengths: &[u64], per_rank: &[u64]) -> GlobalIndex {
        let starts = std::iter::once(0).chain(lengths.iter().scan(0, |at, &len| {
            *at += len;
            Some(*at)
        }));
        GlobalIndex::from_starts(per_rank, starts.collect())
    }

    /// Rank r's first global id is `first_ids()[r]`; the last entry is the total.
    pub fn first_ids(&self) -> &[u64] {
        &self.first_id
    }

    pub fn num_samples(&self) -> u64 {
        *self.first_id.last().expect("first_id has P + 1 entries")
    }

    pub fn num_ranks(&self) -> usize {
        self.first_id.len() - 1
    }

    pub fn len_of(&self, id: u64) -> Option<u64> {
        let i = usize::try_from(id).ok().filter(|&i| i < self.starts.len() - 1)?;
        Some(self.starts[i + 1] - self.starts[i])
    }

    /// Owner rank of `id` (which must be in range).
    fn owner_of(&self, id: u64) -> usize {
        // The last rank whose first id is <= id; empty ranks share their successor's
        // first id and are skipped by taking the last.
        self.first_id[..self.num_ranks()].partition_point(|&first| first <= id) - 1
    }

    pub fn locate(&self, id: u64) -> Option<Location> {
        let len = self.len_of(id)?;
        let owner = self.owner_of(id);
        let shard_start = self.starts[self.first_id[owner] as usize];
        Some(Location { owner, offset: self.starts[id as usize] - shard_start, len })
    }
}

/// A shard as the caller describes it, checked: sample i is
/// `data[offsets[i] .. offsets[i + 1]]`.
pub struct ShardView<'a> {
    pub data: &'a [u8],
    pub offsets: &'a [u64],
}

impl<'a> ShardView<'a> {
    /// Check the offsets: n + 1 entries starting at 0 and never decreasing.
    pub fn new(data: &'a [u8], offsets: &'a [u64]) -> Result<ShardView<'a>> {
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
        Ok(ShardView { data, offsets })
    }

    pub fn num_samples(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    pub fn lengths(&self) -> Vec<u64> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// Everything registration allocates before the ranks exchange lengths: the layout of
/// the gather, this rank's lengths, and the index's prefix sums (N + 1 entries).
fn prepare_index(shard: &ShardView, per_rank: &[u64]) -> Result<(GathervLayout, Vec<u64>, Vec<u64>)> {
    let total = per_rank.iter().try_fold(0u64, |sum, &n| sum.checked_add(n));
    let entries = total.and_then(|n| n.checked_add(1)).ok_or_else(|| Error::invalid("the shards hold more than 2^64 samples"))?;
    let layout = GathervLayout::new(per_rank).map_err(|err| {
        Error::invalid(format!("{} (the sample lengths are gathered with one MPI_Allgatherv)", err.message))
    })?;
    let mut local_lengths = fallible_vec(shard.num_samples())?;
    local_lengths.extend(shard.offsets.windows(2).map(|w| w[1] - w[0]));
    let mut starts = fallible_vec(entries)?;
    starts.resize(entries as usize, 0);
    Ok((layout, local_lengths, starts))
}

/// An empty vector with room for `len` elements, or `MDL_ERR_NO_MEMORY`.
fn fallible_vec(len: u64) -> Result<Vec<u64>> {
    let bytes = len.saturating_mul(8);
    let len = usize::try_from(len).map_err(|_| Error::no_memory(bytes))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::no_memory(bytes))?;
    Ok(v)
}

/// Whether `bytes` can be allocated at all (address space, `ulimit -v`): tried before
/// the collective `MPI_Win_allocate`, whose failure on one rank leaves the others
/// waiting in it. The memory is released at once, untouched.
fn check_allocatable(bytes: usize) -> Result<()> {
    let mut probe: Vec<u8> = Vec::new();
    probe.try_reserve_exact(bytes).map_err(|_| Error::no_memory(bytes as u64))
}

/// The registered store: this rank's window and the global index.
pub struct Store {
    pub window: Window,
    pub index: Arc<GlobalIndex>,
}

impl Store {
    /// Collective: gather every rank's lengths into the global index, copy the shard
    /// into a window and warm the window up with `warm_up_gets` small gets (see
    /// [`warm_up`]). The shard was checked and agreed on by all ranks; everything that
    /// can still fail on one rank (the index's memory, MPI's count limits, the window's
    /// memory) is checked and agreed on before the ranks exchange anything.
    pub fn register(comm: &Comm, shard: &ShardView, limits: GetLimits, warm_up_gets: u64) -> Result<Store> {
        let per_rank = comm.allgather(shard.num_samples())?;
        let prepared = prepare_index(shard, &per_rank);
        let checks = prepared.as_ref().map(|_| ()).map_err(Clone::clone).and_then(|()| check_allocatable(shard.data.len()));
        agree_on_checks(comm, checks)?;
        let (layout, local_lengths, mut starts) = prepared.expect("agreed that every rank prepared the index");
        // Gathered into starts[1..]: the prefix sum in place then leaves starts[0] = 0.
        let gathered = comm.allgatherv_into(&local_lengths, &layout, &mut starts[1..]);
        if let Err(err) = gathered {
            if err.status == crate::error::mdl_status::MDL_ERR_TIMEOUT {
                std::mem::forget((layout, local_lengths, starts)); // MPI may still use them
            }
            return Err(err);
        }
        drop(local_lengths);
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let index = GlobalIndex::from_starts(&per_rank, starts);
        let window = Window::allocate(comm, shard.data)?;
        let store = Store { window, index: Arc::new(index) };
        let warmed = warm_up(&store, comm.rank(), limits, warm_up_gets);
        // Every rank stays inside MPI until all have warmed up (over transports where a
        // get needs its target's progress, no rank waits for one that has left), and a
        // failure anywhere fails registration everywhere, freeing the window.
        match agree_on_checks(comm, warmed) {
            Ok(()) => Ok(store),
            Err(err) => {
                store.free()?;
                Err(Error { message: format!("warming the window up: {}", err.message), ..err })
            }
        }
    }

    pub fn free(self) -> Result<()> {
        self.window.free()
    }
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
        let Some(loc) = store.index.locate(id).filter(|l| l.owner != me && l.len > 0) else { continue };
        let dest_offset = pending.len() as u64 * BYTES;
        pending.push(Get { target: loc.owner, target_offset: loc.offset, dest_offset, len: loc.len.min(BYTES) });
        if pending.len() == PER_FLUSH {
            store.window.get_all(&pending, &mut scratch, limits)?;
            pending.clear();
        }
    }
    store.window.get_all(&pending, &mut scratch, limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::mdl_status;

    #[test]
    fn locates_across_ranks_with_an_empty_one() {
        // rank 0: lengths 3, 0, 2; rank 1: empty; rank 2: lengths 5.
        let index = GlobalIndex::from_lengths(&[3, 0, 2, 5], &[3, 0, 1]);
        assert_eq!(index.num_samples(), 4);
        assert_eq!(index.locate(0), Some(Location { owner: 0, offset: 0, len: 3 }));
        assert_eq!(index.locate(1), Some(Location { owner: 0, offset: 3, len: 0 }));
        assert_eq!(index.locate(2), Some(Location { owner: 0, offset: 3, len: 2 }));
        assert_eq!(index.locate(3), Some(Location { owner: 2, offset: 0, len: 5 }));
        assert_eq!(index.locate(4), None);
        assert_eq!(index.locate(u64::MAX), None);
    }

    #[test]
    fn empty_everywhere() {
        let index = GlobalIndex::from_lengths(&[], &[0, 0]);
        assert_eq!(index.num_samples(), 0);
        assert_eq!(index.locate(0), None);
    }

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
