//! The plan of one fetch: where every requested sample comes from and where it goes.
//!
//! Both engines and the estimator work from the same plan, so the cost the estimator
//! predicts is the cost of exactly what the engine will do.

use crate::memory;
use crate::error::{Error, Result, mdl_status};
use crate::mpi::Get;
use crate::store::{GlobalIndex, Topology};

/// A sample this rank copies itself: its own, or one of a rank on its node (the
/// node-local path), read from that rank's shard in the node's shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalCopy {
    pub owner: usize,
    pub src_offset: u64,
    pub dest_offset: u64,
    pub len: u64,
}

/// A sample another rank owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSample {
    pub id: u64,
    pub owner: usize,
    pub target_offset: u64,
    pub dest_offset: u64,
    pub len: u64,
}

#[derive(Debug)]
pub struct BatchPlan {
    /// n + 1 boundaries of the samples in the output buffer.
    pub out_offsets: Vec<u64>,
    /// Samples copied with memcpy: this rank's and its node's.
    pub local: Vec<LocalCopy>,
    /// Bytes and count of `local`'s samples owned by other ranks of the node.
    pub node_bytes: u64,
    pub node_samples: u64,
    /// Non-empty remote samples, grouped by owner in rank order, request order within
    /// an owner (the order the collective engine exchanges them in).
    pub remote: Vec<RemoteSample>,
    /// Bytes of `remote`, all owners together.
    pub remote_bytes: u64,
    /// Ranks of the communicator.
    pub ranks: usize,
    /// The one-sided engine's reads: remote samples in request order, runs that are
    /// adjacent both in the owner's window and in the output merged into one get.
    pub gets: Vec<Get>,
}

/// How many ids ahead the output layout asks for index entries (see `prefetch`).
const INDEX_AHEAD: usize = 16;

impl BatchPlan {
    /// The plan of fetching `ids` on rank `my_rank`, which shares memory with no other
    /// rank.
    pub fn new(index: &GlobalIndex, my_rank: usize, ids: &[u64]) -> Result<BatchPlan> {
        Self::on_node(index, my_rank, ids, &Topology::default())
    }

    /// The plan of fetching `ids` on rank `my_rank`, which copies the samples of the
    /// ranks it shares memory with (`topology`). Its memory (about 40 bytes per id) is
    /// allocated fallibly: a batch too large for this rank is `MDL_ERR_NO_MEMORY`
    /// before any rank communicates, never an abort.
    pub fn on_node(index: &GlobalIndex, my_rank: usize, ids: &[u64], topology: &Topology) -> Result<BatchPlan> {
        let ranks = index.num_ranks();
        let (mut node_bytes, mut node_samples) = (0u64, 0u64);
        let mut out_offsets = memory::with_room(ids.len() + 1)?;
        let mut local = Vec::new();
        let mut in_request_order = Vec::new();
        // No per-owner array: an O(P) array per step is what grows with the ranks.
        let mut remote_bytes = 0u64;
        // One pass; the index's line of the sample INDEX_AHEAD on is asked for first (a
        // cache miss per sample in a large index), so that those loads overlap.
        let table = index.table();
        let mut at = 0u64;
        out_offsets.push(at);
        for (k, &id) in ids.iter().enumerate() {
            if let Some(&later) = ids.get(k + INDEX_AHEAD) {
                table.prefetch(later);
            }
            let (start, len) = table.span_of(id).ok_or_else(|| {
                Error::new(
                    mdl_status::MDL_ERR_OUT_OF_RANGE,
                    format!("ids[{k}] = {id} is out of range (num_samples = {})", index.num_samples()),
                )
            })?;
            let loc = index.locate_at(id, start, len);
            if loc.len > 0 && topology.shares(my_rank, loc.owner) {
                grow(&mut local, ids.len() / ranks.max(1) + 16)?;
                local.push(LocalCopy { owner: loc.owner, src_offset: loc.offset, dest_offset: at, len: loc.len });
                // Counted without a branch: own and neighbours' samples come in random
                // order, and a mispredicted branch per sample cost more than the sum.
                let neighbours = u64::from(loc.owner != my_rank);
                node_bytes += loc.len * neighbours;
                node_samples += neighbours;
            } else if loc.len > 0 {
                grow(&mut in_request_order, ids.len())?;
                remote_bytes += loc.len;
                in_request_order.push(RemoteSample {
                    id,
                    owner: loc.owner,
                    target_offset: loc.offset,
                    dest_offset: at,
                    len: loc.len,
                });
            }
            at += len;
            out_offsets.push(at);
        }
        let gets = coalesce(&in_request_order)?;
        let mut remote = in_request_order;
        // By owner, request order within an owner (the output offset grows with it):
        // an unstable sort on that pair needs no buffer, unlike a stable sort.
        remote.sort_unstable_by_key(|s| (s.owner, s.dest_offset));
        Ok(BatchPlan { out_offsets, local, node_bytes, node_samples, remote, remote_bytes, ranks, gets })
    }

    /// Bytes of the whole batch, local and remote.
    pub fn total_bytes(&self) -> u64 {
        *self.out_offsets.last().expect("out_offsets has n + 1 entries")
    }

    pub fn remote_bytes(&self) -> u64 {
        self.remote_bytes
    }

    /// Per owner rank: how many bytes of `remote` it serves (O(P): for the agreement's
    /// request matrix, carried only up to `MDL_MATRIX_MAX_RANKS` ranks).
    pub fn bytes_per_owner(&self) -> Vec<u64> {
        let mut bytes = vec![0u64; self.ranks];
        for s in &self.remote {
            bytes[s.owner] += s.len;
        }
        bytes
    }

    pub fn local_bytes(&self) -> u64 {
        self.local.iter().map(|c| c.len).sum()
    }
}


/// Make room for one more element, reserving for up to `at_most` at the first call.
fn grow<T>(v: &mut Vec<T>, at_most: usize) -> Result<()> {
    if v.len() == v.capacity() {
        let more = if v.is_empty() { at_most.max(1) } else { v.len() };
        memory::reserve(v, more)?;
    }
    Ok(())
}

fn coalesce(in_request_order: &[RemoteSample]) -> Result<Vec<Get>> {
    let mut gets: Vec<Get> = memory::with_room(in_request_order.len())?;
    for s in in_request_order {
        if let Some(last) = gets.last_mut() {
            let adjacent = last.target == s.owner
                && last.target_offset + last.len == s.target_offset
                && last.dest_offset + last.len == s.dest_offset;
            if adjacent {
                last.len += s.len;
                continue;
            }
        }
        gets.push(Get {
            target: s.owner,
            target_offset: s.target_offset,
            dest_offset: s.dest_offset,
            len: s.len,
        });
    }
    Ok(gets)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ranks: rank 0 holds ids 0..4 with lengths 1,2,0,3; rank 1 holds 4..6 with 4,5.
    fn index() -> GlobalIndex {
        GlobalIndex::from_lengths(&[1, 2, 0, 3, 4, 5], &[4, 2])
    }

    #[test]
    fn splits_local_and_remote_and_lays_out_the_output() {
        let plan = BatchPlan::new(&index(), 0, &[5, 1, 2, 4, 5]).unwrap();
        assert_eq!(plan.out_offsets, vec![0, 5, 7, 7, 11, 16]);
        assert_eq!(plan.local, vec![LocalCopy { owner: 0, src_offset: 1, dest_offset: 5, len: 2 }]);
        assert_eq!(plan.bytes_per_owner(), vec![0, 14]);
        assert_eq!(plan.remote.iter().map(|s| s.id).collect::<Vec<_>>(), vec![5, 4, 5]);
        assert_eq!(plan.total_bytes(), 16);
        assert_eq!(plan.remote_bytes() + plan.local_bytes(), 16);
    }

    #[test]
    fn coalesces_runs_adjacent_in_window_and_output() {
        // ids 4 then 5 are adjacent on rank 1 and in the output: one get.
        let plan = BatchPlan::new(&index(), 0, &[4, 5, 4]).unwrap();
        assert_eq!(
            plan.gets,
            vec![
                Get { target: 1, target_offset: 0, dest_offset: 0, len: 9 },
                Get { target: 1, target_offset: 0, dest_offset: 9, len: 4 },
            ]
        );
        // 5 then 4 is adjacent in neither: two gets.
        assert_eq!(BatchPlan::new(&index(), 0, &[5, 4]).unwrap().gets.len(), 2);
    }

    #[test]
    fn groups_remote_samples_by_owner_keeping_request_order() {
        let plan = BatchPlan::new(&index(), 1, &[3, 4, 0, 1, 5]).unwrap();
        assert_eq!(plan.remote.iter().map(|s| s.id).collect::<Vec<_>>(), vec![3, 0, 1]);
        assert_eq!(plan.bytes_per_owner(), vec![6, 0]);
        assert_eq!(plan.local.len(), 2);
    }

    #[test]
    fn empty_batch_and_zero_length_samples_move_nothing() {
        let plan = BatchPlan::new(&index(), 1, &[]).unwrap();
        assert_eq!(plan.out_offsets, vec![0]);
        let plan = BatchPlan::new(&index(), 1, &[2, 2]).unwrap();
        assert_eq!(plan.out_offsets, vec![0, 0, 0]);
        assert!(plan.remote.is_empty() && plan.local.is_empty() && plan.gets.is_empty());
    }

    #[test]
    fn samples_of_the_node_are_copies_not_remote() {
        // Three ranks, ranks 0 and 2 on one node: rank 0 holds 0..2, rank 1 2..3, rank 2 3..5.
        let index = GlobalIndex::from_lengths(&[1, 2, 3, 4, 5], &[2, 1, 2]);
        let topology = Topology::from_leaders(vec![0, 1, 0]);
        let plan = BatchPlan::on_node(&index, 0, &[4, 2, 1, 3], &topology).unwrap();
        assert_eq!(plan.out_offsets, vec![0, 5, 8, 10, 14]);
        assert_eq!(
            plan.local,
            vec![
                LocalCopy { owner: 2, src_offset: 4, dest_offset: 0, len: 5 },
                LocalCopy { owner: 0, src_offset: 1, dest_offset: 8, len: 2 },
                LocalCopy { owner: 2, src_offset: 0, dest_offset: 10, len: 4 },
            ]
        );
        assert_eq!((plan.node_bytes, plan.node_samples), (9, 2));
        assert_eq!(plan.remote.iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(plan.gets, vec![Get { target: 1, target_offset: 0, dest_offset: 5, len: 3 }]);
        assert_eq!(plan.remote_bytes(), 3);
        // Without the node-local path rank 2's samples are remote.
        let alone = BatchPlan::new(&index, 0, &[4, 2, 1, 3]).unwrap();
        assert_eq!((alone.remote.len(), alone.node_bytes), (3, 0));
    }

    #[test]
    fn out_of_range_names_the_position() {
        let err = BatchPlan::new(&index(), 0, &[0, 6]).unwrap_err();
        assert_eq!(err.status, mdl_status::MDL_ERR_OUT_OF_RANGE);
        assert!(err.message.contains("ids[1] = 6"), "{}", err.message);
    }
}
