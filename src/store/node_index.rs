//! Building the global index with one copy per node.
//!
//! The index takes 8 bytes per sample of the whole dataset: 0.8 GB at 10^8 samples, on
//! every rank if each kept its own. Instead the ranks of a node (MPI's
//! `MPI_COMM_TYPE_SHARED`) share one copy in a shared-memory window held by the node's
//! leader (its lowest rank):
//!
//! 1. every rank writes its own samples' lengths into the node's copy;
//! 2. the leaders broadcast each rank's lengths to the other nodes' leaders, one rank
//!    after the other (P broadcasts at registration, in pieces of 2^30 lengths: no
//!    `int` count limits N);
//! 3. each leader turns the lengths into prefix sums in place.
//!
//! Between these, `SharedArray::publish` (`MPI_Win_sync`, node barrier, `MPI_Win_sync`)
//! makes one rank's stores visible to the others; after step 3 the array is never
//! written again. Where some node cannot share memory, every rank falls back to a
//! copy of its own, gathered with one `MPI_Allgatherv` as before.

use super::ShardView;
use super::index::Starts;
use crate::agree::agree_on_checks;
use crate::error::{Error, Result};
use crate::mpi::{Comm, GathervLayout, SharedArray};

/// Collective: the index's prefix sums (N + 1 entries) of every rank's shard, shared
/// by the ranks of each node where MPI allows it. Everything that can fail on one rank
/// (memory, counts) is agreed before the ranks exchange lengths.
pub fn build(comm: &Comm, shard: &ShardView, per_rank: &[u64]) -> Result<Starts> {
    let entries = total_entries(per_rank);
    let node = comm.split_shared()?;
    let leader = node.rank() == 0;
    let checks = entries.clone().and_then(|n| if leader { super::check_allocatable(n.saturating_mul(8)) } else { Ok(()) });
    if let Err(err) = agree_on_checks(comm, checks.map(|_| ())) {
        node.free()?;
        return Err(err);
    }
    let entries = entries.expect("agreed that the index fits");
    let shared = SharedArray::allocate(&node, entries);
    let shared_everywhere = agree_on_checks(comm, shared.as_ref().map(|_| ()).map_err(Clone::clone));
    let starts = match (shared_everywhere, shared) {
        (Ok(()), Ok(shared)) => fill(comm, &node, shard, per_rank, &shared).map(|()| Starts::Node(shared)),
        (Err(err), shared) => {
            log::warn!("the index cannot be shared within nodes ({}); every rank keeps its own copy", err.message);
            super::release_where_whole_node(&node, shared, SharedArray::free)?;
            gather_private(comm, shard, per_rank).map(Starts::Private)
        }
        (Ok(()), Err(_)) => unreachable!("agreed that every rank allocated"),
    };
    let freed = node.free();
    let starts = starts?;
    freed?;
    Ok(starts)
}

/// N + 1, checked to fit in memory.
fn total_entries(per_rank: &[u64]) -> Result<usize> {
    let total = per_rank.iter().try_fold(0u64, |sum, &n| sum.checked_add(n));
    let entries = total.and_then(|n| n.checked_add(1)).filter(|&n| n <= isize::MAX as u64 / 8);
    entries.map(|n| n as usize).ok_or_else(|| Error::invalid("the shards hold too many samples for an index in memory"))
}


/// Fill the node's copy: own lengths, the other nodes' lengths, prefix sums.
fn fill(comm: &Comm, node: &Comm, shard: &ShardView, per_rank: &[u64], shared: &SharedArray) -> Result<()> {
    let first: Vec<usize> = per_rank.iter().scan(0u64, |at, &n| Some(std::mem::replace(at, *at + n) as usize)).collect();
    let me = comm.rank();
    {
        // SAFETY: each rank writes only its own samples' entries until the publish.
        let starts = unsafe { shared.as_mut_slice() };
        let mine = &mut starts[first[me] + 1..first[me] + 1 + per_rank[me] as usize];
        for (entry, w) in mine.iter_mut().zip(shard.offsets.windows(2)) {
            *entry = w[1] - w[0];
        }
    }
    shared.publish(node)?;
    // Each rank's node leader, as its rank in `comm` (the node's lowest rank).
    let mut my_leader = [comm.rank() as u64];
    node.bcast_into(0, &mut my_leader)?;
    let leader_of = comm.allgather(my_leader[0])?;
    let leaders = comm.split_members(node.rank() == 0)?;
    if let Some(leaders) = leaders {
        let mut distinct = leader_of.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // SAFETY: only the leader touches the array until the next publish.
        let starts = unsafe { shared.as_mut_slice() };
        let filled = (|| {
            if leaders.size() > 1 {
                for (r, &n) in per_rank.iter().enumerate().filter(|&(_, &n)| n > 0) {
                    let root = distinct.binary_search(&leader_of[r]).expect("every leader is listed");
                    leaders.bcast_into(root, &mut starts[first[r] + 1..first[r] + 1 + n as usize])?;
                }
            }
            for i in 1..starts.len() {
                starts[i] += starts[i - 1];
            }
            Ok(())
        })();
        leaders.free()?;
        filled?;
    }
    shared.publish(node)
}

/// Collective: this rank's own copy of the prefix sums, gathered with one
/// `MPI_Allgatherv` into the copy's memory and summed in place.
pub fn gather_private(comm: &Comm, shard: &ShardView, per_rank: &[u64]) -> Result<Vec<u64>> {
    let prepared = (|| {
        let entries = total_entries(per_rank)?;
        let layout = GathervLayout::new(per_rank).map_err(|err| {
            Error::invalid(format!("{} (without a shared index the lengths are gathered with one MPI_Allgatherv)", err.message))
        })?;
        let mut local_lengths = fallible_vec(shard.num_samples() as usize)?;
        local_lengths.extend(shard.offsets.windows(2).map(|w| w[1] - w[0]));
        let mut starts = fallible_vec(entries)?;
        starts.resize(entries, 0);
        Ok((layout, local_lengths, starts))
    })();
    agree_on_checks(comm, prepared.as_ref().map(|_| ()).map_err(Clone::clone))?;
    let (layout, local_lengths, mut starts) = prepared.expect("agreed that every rank prepared its copy");
    // Gathered into starts[1..]: the prefix sum in place then leaves starts[0] = 0.
    let gathered = comm.allgatherv_into(&local_lengths, &layout, &mut starts[1..]);
    if let Err(err) = gathered {
        if crate::mpi::timed_out(&Err::<(), _>(err.clone())) {
            std::mem::forget((layout, local_lengths, starts)); // MPI may still use them
        }
        return Err(err);
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    Ok(starts)
}

/// An empty vector with room for `len` elements, or `MDL_ERR_NO_MEMORY`.
fn fallible_vec(len: usize) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::no_memory(len as u64 * 8))?;
    Ok(v)
}
