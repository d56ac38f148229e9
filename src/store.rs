//! The sharded store: this rank's samples in an RMA window plus the global index that
//! locates any sample (owner rank, offset in the owner's window, length) without
//! communication.
//!
//! Memory per rank: the shard itself (one copy of the registered bytes, in the window)
//! plus the index, 8 bytes per global sample (a prefix sum of all sample lengths) and
//! 8 bytes per rank. Registration briefly needs 8 more bytes per global sample while the
//! lengths are gathered.

use crate::agree::agree_on_checks;
use crate::error::{Error, Result};
use crate::mpi::{Comm, Get, Window};

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
    pub fn from_lengths(lengths: &[u64], per_rank: &[u64]) -> GlobalIndex {
        let mut first_id = Vec::with_capacity(per_rank.len() + 1);
        let mut next = 0;
        for &n in per_rank {
            first_id.push(next);
            next += n;
        }
        first_id.push(next);
        assert_eq!(next, lengths.len() as u64, "per-rank counts must cover all lengths");
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut at = 0;
        starts.push(at);
        for &len in lengths {
            at += len;
            starts.push(at);
        }
        GlobalIndex { first_id, starts }
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

/// The registered store: this rank's window and the global index.
pub struct Store {
    pub window: Window,
    pub index: GlobalIndex,
}

impl Store {
    /// Collective: gather every rank's lengths, build the index and copy the shard into
    /// a window. Arguments were already checked and agreed on by all ranks.
    /// Collective: build the global index, copy the shard into a window and warm the
    /// window up with `warm_up_gets` small gets (see [`warm_up`]).
    pub fn register(comm: &Comm, shard: &ShardView, warm_up_gets: u64) -> Result<Store> {
        let per_rank = comm.allgather(shard.num_samples())?;
        let lengths = comm.allgatherv(&shard.lengths(), &per_rank)?;
        let index = GlobalIndex::from_lengths(&lengths, &per_rank);
        drop(lengths);
        let window = Window::allocate(comm, shard.data)?;
        let store = Store { window, index };
        let warmed = warm_up(&store, comm.rank(), warm_up_gets);
        // Every rank stays inside MPI until all have warmed up (over transports where a
        // get needs its target's progress, no rank waits for one that has left), and a
        // failure anywhere fails registration everywhere, freeing the window.
        match agree_on_checks(comm, warmed, "mdl_register_shard (window warm-up)") {
            Ok(()) => Ok(store),
            Err(err) => {
                store.free()?;
                Err(err)
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
fn warm_up(store: &Store, me: usize, gets: u64) -> Result<()> {
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
            store.window.get_all(&pending, &mut scratch, u64::MAX)?;
            pending.clear();
        }
    }
    store.window.get_all(&pending, &mut scratch, u64::MAX)
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
