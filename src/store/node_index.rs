//! Building the global index with one copy per node.
//!
//! The index takes 8 bytes per sample of the whole dataset: 0.8 GB at 10^8 samples, on
//! every rank if each kept its own. Instead the ranks of a node (MPI's
//! `MPI_COMM_TYPE_SHARED`) share one copy in a shared-memory window held by the node's
//! leader (its lowest rank):
//!
//! 1. every rank writes its own samples' lengths into the node's copy;
//! 2. the leaders exchange their nodes' lengths with `MPI_Allgatherv`s of bounded
//!    rounds (at most `EXCHANGE_BYTES`, and `MDL_MAX_MESSAGE_BYTES` down to 4 KiB, in all; each
//!    node's next share of that per round), through scratch buffers: a node's ranks need
//!    not be adjacent, and no `int` count or displacement limits N. About N x 8 /
//!    `EXCHANGE_BYTES` rounds where nodes hold equal shares (95 at N = 10^8), whatever
//!    the number of ranks;
//! 3. each leader turns the lengths into prefix sums in place.
//!
//! Between these, `SharedArray::publish` (`MPI_Win_sync`, node barrier, `MPI_Win_sync`)
//! makes one rank's stores visible to the others; after step 3 the array is never
//! written again. Where some node cannot share memory, every rank falls back to a
//! copy of its own, gathered with one `MPI_Allgatherv` as before.

use super::ShardView;
use super::index::Starts;
use crate::memory;
use crate::agree::{agree_on_checks, agree_on_fallback};
use crate::error::{Error, Result, outcome_of};
use crate::mpi::{Comm, GathervLayout, SharedArray};

/// Collective: the index's prefix sums (N + 1 entries) of every rank's shard, shared
/// by the ranks of each node where MPI allows it. Everything that can fail on one rank
/// (memory, counts) is agreed before the ranks exchange lengths.
/// `max_message` (`MDL_MAX_MESSAGE_BYTES`, agreed) bounds the leaders' rounds.
pub fn build(comm: &Comm, shard: &ShardView, per_rank: &[u64], max_message: u64) -> Result<Starts> {
    let entries = total_entries(per_rank);
    let node = comm.split_shared()?;
    let leader = node.rank() == 0;
    let layout = match NodeLayout::of(comm, &node, per_rank, max_message) {
        Ok(layout) => layout,
        Err(err) => {
            node.free()?;
            return Err(err);
        }
    };
    // The leaders' scratch buffers for the exchange, with the index's own room: agreed
    // before any window exists.
    let scratch = if leader && layout.segments.nodes() > 1 { layout.plan.allocate() } else { Ok(Default::default()) };
    let checks = entries.clone().and_then(|n| if leader { super::check_allocatable(n.saturating_mul(8)) } else { Ok(()) });
    if let Err(err) = agree_on_checks(comm, checks.and(outcome_of(&scratch))) {
        node.free()?;
        return Err(err);
    }
    let (entries, scratch) = (entries.expect("agreed that the index fits"), scratch.expect("agreed that every leader allocated"));
    let shared = SharedArray::allocate(&node, entries);
    let fallback = agree_on_fallback(comm, outcome_of(&shared))?;
    let starts = match (fallback, shared) {
        (None, Ok(shared)) => fill(comm, &node, shard, &layout, scratch, &shared).map(|()| Starts::Node(shared)),
        (Some(fallback), shared) => {
            fallback.log("the index cannot be shared within nodes: every rank keeps its own copy");
            super::release_where_whole_node(&node, shared, SharedArray::free)?;
            gather_private(comm, shard, per_rank).map(Starts::Private)
        }
        (None, Err(_)) => unreachable!("agreed that every rank allocated"),
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


/// Bytes a round of the leaders' exchange moves in all (at most): the scratch
/// buffer's size, and a message size at which a network runs at full bandwidth.
const EXCHANGE_BYTES: u64 = 8 << 20;
/// The least a round moves whatever `MDL_MAX_MESSAGE_BYTES` says (512 lengths).
const MIN_EXCHANGE_BYTES: u64 = 4096;

/// Where every rank's lengths go, and the leaders' exchange.
struct NodeLayout {
    /// Rank r's first entry (before the leading zero).
    first: Vec<usize>,
    segments: NodeSegments,
    plan: ExchangePlan,
}

impl NodeLayout {
    /// Collective: each rank's node leader, and from it the exchange's plan.
    fn of(comm: &Comm, node: &Comm, per_rank: &[u64], max_message: u64) -> Result<NodeLayout> {
        let first: Vec<usize> = per_rank.iter().scan(0u64, |at, &n| Some(std::mem::replace(at, *at + n) as usize)).collect();
        // Each rank's node leader, as its rank in `comm` (the node's lowest rank).
        let mut my_leader = [comm.rank() as u64];
        node.bcast_into(0, &mut my_leader)?;
        let leader_of = comm.allgather(my_leader[0])?;
        let segments = NodeSegments::of(&leader_of, &first, per_rank);
        // MDL_MAX_MESSAGE_BYTES bounds the rounds, down to a floor: at a few bytes a
        // round, a million samples would take a million rounds.
        let plan = ExchangePlan::new(&segments, EXCHANGE_BYTES.min(max_message.max(MIN_EXCHANGE_BYTES)));
        Ok(NodeLayout { first, segments, plan })
    }
}

/// Fill the node's copy: own lengths, the other nodes' lengths, prefix sums.
fn fill(comm: &Comm, node: &Comm, shard: &ShardView, layout: &NodeLayout, mut scratch: ExchangeScratch, shared: &SharedArray) -> Result<()> {
    let (first, me) = (&layout.first, comm.rank());
    {
        // SAFETY: each rank writes only its own samples' entries until the publish.
        let starts = unsafe { shared.as_mut_slice() };
        let mine = &mut starts[first[me] + 1..first[me] + 1 + shard.num_samples() as usize];
        for (entry, w) in mine.iter_mut().zip(shard.offsets.windows(2)) {
            *entry = w[1] - w[0];
        }
    }
    shared.publish(node)?;
    let (segments, plan) = (&layout.segments, &layout.plan);
    let leaders = comm.split_members(node.rank() == 0)?;
    if let Some(leaders) = leaders {
        // SAFETY: only the leader touches the array until the next publish.
        let starts = unsafe { shared.as_mut_slice() };
        let filled = (|| {
            if leaders.size() > 1 {
                plan.exchange(&leaders, segments, &mut scratch, starts)?;
            }
            for i in 1..starts.len() {
                starts[i] += starts[i - 1];
            }
            Ok(())
        })();
        if crate::mpi::timed_out(&filled) {
            std::mem::forget(scratch); // MPI may still use it
        }
        leaders.free()?;
        filled?;
    }
    shared.publish(node)
}

/// Where each node's lengths lie in the index: its ranks' ranges of entries, in rank
/// order (a node's ranks need not be adjacent), listed by node in leader order.
struct NodeSegments {
    /// Per node (ordered as the leaders' communicator): ranges of `starts`.
    ranges: Vec<Vec<std::ops::Range<usize>>>,
}

impl NodeSegments {
    fn of(leader_of: &[u64], first: &[usize], per_rank: &[u64]) -> NodeSegments {
        let mut leaders = leader_of.to_vec();
        leaders.sort_unstable();
        leaders.dedup();
        let mut ranges = vec![Vec::new(); leaders.len()];
        for (r, &n) in per_rank.iter().enumerate().filter(|&(_, &n)| n > 0) {
            let node = leaders.binary_search(&leader_of[r]).expect("every leader is listed");
            // Entry 0 is the prefix sums' leading zero.
            ranges[node].push(first[r] + 1..first[r] + 1 + n as usize);
        }
        NodeSegments { ranges }
    }

    fn nodes(&self) -> usize {
        self.ranges.len()
    }

    fn total(&self, node: usize) -> usize {
        self.ranges[node].iter().map(|r| r.len()).sum()
    }

    /// `visit` each piece of node `node`'s entries `skip .. skip + len`, in order.
    fn pieces(&self, node: usize, mut skip: usize, mut len: usize, mut visit: impl FnMut(std::ops::Range<usize>)) {
        for range in &self.ranges[node] {
            if len == 0 {
                return;
            }
            if skip >= range.len() {
                skip -= range.len();
                continue;
            }
            let take = (range.len() - skip).min(len);
            visit(range.start + skip..range.start + skip + take);
            (skip, len) = (0, len - take);
        }
    }
}

/// The leaders' exchange: in each round every node's next `per_node` lengths (fewer
/// at its end), gathered by all leaders into a scratch buffer and copied into place.
struct ExchangePlan {
    per_node: usize,
    rounds: usize,
    totals: Vec<usize>,
}

/// A leader's buffers for the exchange.
#[derive(Default)]
struct ExchangeScratch {
    send: Vec<u64>,
    received: Vec<u64>,
}

impl ExchangePlan {
    /// Rounds of at most `round_bytes` in all (at least one length per node).
    fn new(segments: &NodeSegments, round_bytes: u64) -> ExchangePlan {
        let totals: Vec<usize> = (0..segments.nodes()).map(|n| segments.total(n)).collect();
        let largest = totals.iter().copied().max().unwrap_or(0);
        // No scratch beyond what the largest node holds.
        let per_node = (round_bytes as usize / 8 / segments.nodes().max(1)).clamp(1, largest.max(1));
        let rounds = largest.div_ceil(per_node);
        ExchangePlan { per_node, rounds, totals }
    }

    fn allocate(&self) -> Result<ExchangeScratch> {
        let mut send = memory::with_room(self.per_node)?;
        send.resize(self.per_node, 0);
        let all = self.per_node * self.totals.len();
        let mut received = memory::with_room(all)?;
        received.resize(all, 0);
        Ok(ExchangeScratch { send, received })
    }

    /// Collective over the leaders: every node's lengths into `starts`.
    fn exchange(&self, leaders: &Comm, segments: &NodeSegments, scratch: &mut ExchangeScratch, starts: &mut [u64]) -> Result<()> {
        let me = leaders.rank();
        for round in 0..self.rounds {
            let skip = round * self.per_node;
            let counts: Vec<u64> = self.totals.iter().map(|&t| t.saturating_sub(skip).min(self.per_node) as u64).collect();
            let layout = GathervLayout::new(&counts)?;
            let mut sent = 0;
            segments.pieces(me, skip, counts[me] as usize, |range| {
                scratch.send[sent..sent + range.len()].copy_from_slice(&starts[range.clone()]);
                sent += range.len();
            });
            let received = &mut scratch.received[..layout.total as usize];
            leaders.allgatherv_into(&scratch.send[..sent], &layout, received)?;
            let mut at = 0;
            for (node, &count) in counts.iter().enumerate() {
                if node != me {
                    let mut taken = at;
                    segments.pieces(node, skip, count as usize, |range| {
                        starts[range.clone()].copy_from_slice(&received[taken..taken + range.len()]);
                        taken += range.len();
                    });
                }
                at += count as usize;
            }
        }
        Ok(())
    }
}

/// Collective: this rank's own copy of the prefix sums, gathered with one
/// `MPI_Allgatherv` into the copy's memory and summed in place.
pub fn gather_private(comm: &Comm, shard: &ShardView, per_rank: &[u64]) -> Result<Vec<u64>> {
    let prepared = (|| {
        let entries = total_entries(per_rank)?;
        let layout = GathervLayout::new(per_rank).map_err(|err| {
            Error::invalid(format!("{} (without a shared index the lengths are gathered with one MPI_Allgatherv)", err.message))
        })?;
        let mut local_lengths = memory::with_room(shard.num_samples() as usize)?;
        local_lengths.extend(shard.offsets.windows(2).map(|w| w[1] - w[0]));
        let mut starts = memory::with_room(entries)?;
        starts.resize(entries, 0);
        Ok((layout, local_lengths, starts))
    })();
    agree_on_checks(comm, outcome_of(&prepared))?;
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


#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks 0..5 with 3, 0, 4, 2, 5 samples; nodes led by ranks 0 and 1, mapped
    /// round-robin (0, 2, 4 on the first; 1, 3 on the second).
    fn round_robin() -> NodeSegments {
        let per_rank = [3u64, 0, 4, 2, 5];
        let first: Vec<usize> = per_rank.iter().scan(0u64, |at, &n| Some(std::mem::replace(at, *at + n) as usize)).collect();
        NodeSegments::of(&[0, 1, 0, 1, 0], &first, &per_rank)
    }

    #[test]
    fn a_nodes_entries_follow_its_ranks_in_order() {
        let s = round_robin();
        assert_eq!(s.nodes(), 2);
        assert_eq!(s.ranges, vec![vec![1..4, 4..8, 10..15], vec![8..10]]);
        assert_eq!((s.total(0), s.total(1)), (12, 2));
        let pieces = |node, skip, len| {
            let mut out = Vec::new();
            s.pieces(node, skip, len, |r| out.push(r));
            out
        };
        assert_eq!(pieces(0, 0, 12), vec![1..4, 4..8, 10..15]);
        assert_eq!(pieces(0, 2, 5), vec![3..4, 4..8]);
        assert_eq!(pieces(0, 7, 100), vec![10..15]);
        assert_eq!(pieces(1, 1, 1), vec![9..10]);
        assert!(pieces(1, 2, 5).is_empty());
    }

    #[test]
    fn rounds_cover_the_largest_node_within_the_byte_budget() {
        let s = round_robin();
        // 32 bytes a round: 2 lengths per node, 6 rounds for the node of 12.
        let plan = ExchangePlan::new(&s, 32);
        assert_eq!((plan.per_node, plan.rounds), (2, 6));
        // Below one length per node a round still moves one.
        assert_eq!(ExchangePlan::new(&s, 1).per_node, 1);
        let plan = ExchangePlan::new(&s, 8 << 20);
        assert_eq!((plan.per_node, plan.rounds), (12, 1));
        let scratch = plan.allocate().unwrap();
        assert_eq!((scratch.send.len(), scratch.received.len()), (plan.per_node, 2 * plan.per_node));
    }
}
