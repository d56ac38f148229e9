//! Building the global index with one copy per node.
//!
//! The index (`packed`: every sample's start, 1-3 bytes a sample for samples up to
//! 64 KiB) would be on every rank if each kept its own. Instead the ranks of a node
//! (MPI's `MPI_COMM_TYPE_SHARED`) share one copy in a shared-memory window held by the
//! node's leader (its lowest rank):
//!
//! 1. every rank writes its own samples' starts into the node's copy: it needs only
//!    where its shard starts (one all-gather of the shards' sizes), since a start is
//!    packed without reference to other samples. Ranks whose samples meet in one word
//!    OR their bits into it atomically;
//! 2. the leaders exchange their nodes' words with `MPI_Allgatherv`s of bounded rounds
//!    (at most `EXCHANGE_BYTES`, and `MDL_MAX_MESSAGE_BYTES` down to 4 KiB, in all;
//!    each node's next share of that per round), through scratch buffers, and OR the
//!    others' words into place: each bit is written by one rank only, so a word two
//!    nodes share at a border comes out whole. A node's ranks need not be adjacent,
//!    and no `int` count or displacement limits N. About (index bytes) /
//!    `EXCHANGE_BYTES` rounds where nodes hold equal shares (about 14 at N = 10^8
//!    samples of 1-4 bytes; 95 when the index was 8 bytes a sample), whatever the
//!    number of ranks.
//!
//! Between these, `SharedArray::publish` (`MPI_Win_sync`, node barrier, `MPI_Win_sync`)
//! makes one rank's stores visible to the others; after step 2 the array is never
//! written again. Where some node cannot share memory, every rank keeps a copy of its
//! own, filled the same way with each rank a node of its own.

use super::ShardView;
use super::index::{PrivateWords, Starts};
use super::packed::Packing;
use crate::memory;
use crate::agree::{agree_on_checks, agree_on_fallback, agree_on_split};
use crate::error::{Error, Result, outcome_of};
use crate::mpi::{Comm, GathervLayout, SharedArray};
use std::sync::atomic::Ordering;

/// Collective: the index's packed starts of every rank's shard, shared by the ranks of
/// each node where MPI allows it. Everything that can fail on one rank (memory, counts)
/// is agreed before the ranks exchange anything. `max_message`
/// (`MDL_MAX_MESSAGE_BYTES`, agreed) bounds the leaders' rounds.
pub fn build(comm: &Comm, shard: &ShardView, per_rank: &[u64], packing: Packing, max_message: u64) -> Result<Starts> {
    let span = ByteSpan::of(comm, shard)?;
    let node = agree_on_split(comm, comm.split_shared(), "sharing the index within the node")?;
    let leader = node.rank() == 0;
    let layout = match NodeLayout::of(comm, &node, per_rank, packing, max_message) {
        Ok(layout) => layout,
        Err(err) => {
            node.free()?;
            return Err(err);
        }
    };
    // The leaders' scratch buffers for the exchange, with the index's own room: agreed
    // before any window exists.
    let scratch = if leader && layout.segments.nodes() > 1 { layout.plan.allocate() } else { Ok(Default::default()) };
    let checks = if leader { super::check_allocatable(packing.bytes() as usize) } else { Ok(()) };
    if let Err(err) = agree_on_checks(comm, checks.and(outcome_of(&scratch))) {
        node.free()?;
        return Err(err);
    }
    let scratch = scratch.expect("agreed that every leader allocated");
    let shared = SharedArray::allocate(&node, packing.words());
    let fallback = agree_on_fallback(comm, outcome_of(&shared))?;
    let starts = match (fallback, shared) {
        (None, Ok(shared)) => fill(comm, &node, shard, &layout, span, scratch, &shared).map(|()| Starts::Node(shared)),
        (Some(fallback), shared) => {
            fallback.log("the index cannot be shared within nodes: every rank keeps its own copy");
            super::release_where_whole_node(&node, shared, SharedArray::free)?;
            gather_private(comm, shard, per_rank, packing, max_message).map(Starts::Private)
        }
        (None, Err(_)) => unreachable!("agreed that every rank allocated"),
    };
    let freed = node.free();
    let starts = starts?;
    freed?;
    Ok(starts)
}

/// Where this rank's shard starts in the concatenation of all shards, and the total.
#[derive(Clone, Copy)]
struct ByteSpan {
    first: u64,
    total: u64,
}

impl ByteSpan {
    /// Collective: from every rank's shard size (the same outcome on every rank).
    fn of(comm: &Comm, shard: &ShardView) -> Result<ByteSpan> {
        let sizes = comm.allgather(shard.offsets.last().copied().unwrap_or(0))?;
        let sum = |sizes: &[u64]| sizes.iter().try_fold(0u64, |sum, &n| sum.checked_add(n));
        let first = sum(&sizes[..comm.rank()]);
        match (first, sum(&sizes)) {
            (Some(first), Some(total)) => Ok(ByteSpan { first, total }),
            _ => Err(Error::invalid("the shards hold more than 2^64 bytes in all")),
        }
    }
}

/// Bytes a round of the leaders' exchange moves in all (at most): the scratch
/// buffer's size, and a message size at which a network runs at full bandwidth.
const EXCHANGE_BYTES: u64 = 8 << 20;
/// The least a round moves from each node whatever `MDL_MAX_MESSAGE_BYTES` says (512
/// words).
const MIN_NODE_ROUND_BYTES: u64 = 4096;

/// Where every rank's words are, and the exchange.
struct NodeLayout {
    /// Rank r's first sample.
    first: Vec<u64>,
    /// The job's sample count.
    samples: u64,
    packing: Packing,
    segments: NodeSegments,
    plan: ExchangePlan,
}

impl NodeLayout {
    /// Collective: each rank's node leader, and from it the exchange's plan.
    fn of(comm: &Comm, node: &Comm, per_rank: &[u64], packing: Packing, max_message: u64) -> Result<NodeLayout> {
        // Each rank's node leader, as its rank in `comm` (the node's lowest rank).
        let mut my_leader = [comm.rank() as u64];
        node.bcast_into(0, &mut my_leader)?;
        let leader_of = comm.allgather(my_leader[0])?;
        Ok(NodeLayout::new(&leader_of, per_rank, packing, max_message))
    }

    /// The layout where rank r's node leader is `leader_of[r]`.
    fn new(leader_of: &[u64], per_rank: &[u64], packing: Packing, max_message: u64) -> NodeLayout {
        let first: Vec<u64> = per_rank.iter().scan(0u64, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        let segments = NodeSegments::of(leader_of, &first, per_rank, &packing);
        // MDL_MAX_MESSAGE_BYTES bounds the rounds, down to a floor from each node: at a
        // few bytes a round, a million samples would take a million rounds, and where
        // every rank is a node of its own (the private index) a floor over all nodes
        // would leave one word a rank a round at P >= 512.
        let floor = MIN_NODE_ROUND_BYTES * segments.nodes() as u64;
        let plan = ExchangePlan::new(&segments, EXCHANGE_BYTES.min(max_message).max(floor));
        let samples = per_rank.iter().sum();
        NodeLayout { first, samples, packing, segments, plan }
    }

    /// Write rank `rank`'s samples' starts (shard at `span`), and with `end` the end
    /// of the last sample, through `or_into(word, bits)`.
    fn encode_own(&self, rank: usize, shard: &ShardView, span: ByteSpan, end: bool, mut or_into: impl FnMut(usize, u64)) {
        let own = &shard.offsets[..shard.num_samples() as usize];
        self.packing.encode(self.first[rank], own.iter().map(|&offset| span.first + offset), &mut or_into);
        if end {
            self.packing.encode(self.samples, [span.total], &mut or_into);
        }
    }
}

/// Fill the node's copy: own starts, then the other nodes' words.
fn fill(comm: &Comm, node: &Comm, shard: &ShardView, layout: &NodeLayout, span: ByteSpan, mut scratch: ExchangeScratch, shared: &SharedArray) -> Result<()> {
    let atomics = shared.as_atomic_slice();
    // The node's leader also writes where the last sample ends (every node's copy has it).
    layout.encode_own(comm.rank(), shard, span, node.rank() == 0, |word, bits| {
        atomics[word].fetch_or(bits, Ordering::Relaxed);
    });
    shared.publish(node)?;
    let leaders = agree_on_split(comm, comm.split_members(node.rank() == 0), "exchanging the index between nodes")?;
    if let Some(leaders) = leaders {
        let filled = if leaders.size() > 1 {
            // SAFETY: only the leader touches the array until the next publish.
            let words = unsafe { shared.as_mut_slice() };
            layout.plan.exchange(&leaders, &layout.segments, &mut scratch, words)
        } else {
            Ok(())
        };
        if crate::mpi::timed_out(&filled) {
            std::mem::forget(scratch); // MPI may still use it
        }
        leaders.free()?;
        filled?;
    }
    shared.publish(node)
}

/// Where each node's samples lie in the index: its ranks' ranges of words, in rank
/// order (a node's ranks need not be adjacent), listed by node in leader order.
/// Neighbouring ranks' ranges may share a word.
struct NodeSegments {
    /// Per node (ordered as the leaders' communicator): ranges of the index's words.
    ranges: Vec<Vec<std::ops::Range<usize>>>,
}

impl NodeSegments {
    fn of(leader_of: &[u64], first: &[u64], per_rank: &[u64], packing: &Packing) -> NodeSegments {
        let mut leaders = leader_of.to_vec();
        leaders.sort_unstable();
        leaders.dedup();
        let mut ranges = vec![Vec::new(); leaders.len()];
        for (r, &n) in per_rank.iter().enumerate().filter(|&(_, &n)| n > 0) {
            let node = leaders.binary_search(&leader_of[r]).expect("every leader is listed");
            ranges[node].push(packing.words_of(first[r]..first[r] + n));
        }
        NodeSegments { ranges }
    }

    fn nodes(&self) -> usize {
        self.ranges.len()
    }

    fn total(&self, node: usize) -> usize {
        self.ranges[node].iter().map(|r| r.len()).sum()
    }

    /// `visit` each piece of node `node`'s words `skip .. skip + len`, in order.
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

/// The leaders' exchange: in each round every node's next `per_node` words (fewer at
/// its end), gathered by all leaders into a scratch buffer and OR-ed into place.
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
    /// Rounds of at most `round_bytes` in all (at least one word per node).
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

    /// Collective over the leaders: every node's words into `words`.
    fn exchange(&self, leaders: &Comm, segments: &NodeSegments, scratch: &mut ExchangeScratch, words: &mut [u64]) -> Result<()> {
        let me = leaders.rank();
        for round in 0..self.rounds {
            let skip = round * self.per_node;
            let counts: Vec<u64> = self.totals.iter().map(|&t| t.saturating_sub(skip).min(self.per_node) as u64).collect();
            let layout = GathervLayout::new(&counts)?;
            let mut sent = 0;
            segments.pieces(me, skip, counts[me] as usize, |range| {
                scratch.send[sent..sent + range.len()].copy_from_slice(&words[range.clone()]);
                sent += range.len();
            });
            let received = &mut scratch.received[..layout.total as usize];
            leaders.allgatherv_into(&scratch.send[..sent], &layout, received)?;
            let mut at = 0;
            for (node, &count) in counts.iter().enumerate() {
                if node != me {
                    let mut taken = at;
                    segments.pieces(node, skip, count as usize, |range| {
                        let theirs = &received[taken..taken + range.len()];
                        words[range.clone()].iter_mut().zip(theirs).for_each(|(word, bits)| *word |= bits);
                        taken += range.len();
                    });
                }
                at += count as usize;
            }
        }
        Ok(())
    }
}

/// Collective: this rank's own copy of the index, filled as a node's is with every
/// rank a node of its own (bounded rounds over all ranks, no second copy).
pub fn gather_private(comm: &Comm, shard: &ShardView, per_rank: &[u64], packing: Packing, max_message: u64) -> Result<PrivateWords> {
    let span = ByteSpan::of(comm, shard)?;
    let every_rank: Vec<u64> = (0..comm.size() as u64).collect();
    let layout = NodeLayout::new(&every_rank, per_rank, packing, max_message);
    let prepared = (|| Ok((PrivateWords::zeroed(packing.words())?, layout.plan.allocate()?)))();
    agree_on_checks(comm, outcome_of(&prepared))?;
    let (mut words, mut scratch) = prepared.expect("agreed that every rank prepared its copy");
    let own = words.as_mut_slice();
    layout.encode_own(comm.rank(), shard, span, true, |word, bits| own[word] |= bits);
    let exchanged = if comm.size() > 1 { layout.plan.exchange(comm, &layout.segments, &mut scratch, own) } else { Ok(()) };
    if let Err(err) = exchanged {
        if crate::mpi::timed_out(&Err::<(), _>(err.clone())) {
            std::mem::forget((scratch, words)); // MPI may still use them
        }
        return Err(err);
    }
    Ok(words)
}


#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks 0..5 with 3, 0, 4, 2, 5 samples of 0-1 bytes (65 a line: id 0 in word 0,
    /// ids 1.. 7 bits each from bit 64); nodes led by ranks 0 and 1, mapped round-robin
    /// (0, 2, 4 on the first; 1, 3 on the second).
    fn round_robin() -> NodeSegments {
        let per_rank = [3u64, 0, 4, 2, 5];
        let first: Vec<u64> = per_rank.iter().scan(0u64, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        NodeSegments::of(&[0, 1, 0, 1, 0], &first, &per_rank, &Packing::new(14, 1).unwrap())
    }

    #[test]
    fn a_nodes_words_follow_its_ranks_in_order() {
        let s = round_robin();
        assert_eq!(s.nodes(), 2);
        // Rank 0: bits 0..78; rank 2: 78..106; rank 3: 106..120; rank 4: 120..155.
        assert_eq!(s.ranges, vec![vec![0..2, 1..2, 1..3], vec![1..2]]);
        assert_eq!((s.total(0), s.total(1)), (5, 1));
        let pieces = |node, skip, len| {
            let mut out = Vec::new();
            s.pieces(node, skip, len, |r| out.push(r));
            out
        };
        assert_eq!(pieces(0, 0, 5), vec![0..2, 1..2, 1..3]);
        assert_eq!(pieces(0, 1, 3), vec![1..2, 1..2, 1..2]);
        assert_eq!(pieces(0, 4, 100), vec![2..3]);
        assert_eq!(pieces(1, 0, 1), vec![1..2]);
        assert!(pieces(1, 1, 5).is_empty());
    }

    #[test]
    fn rounds_cover_the_largest_node_within_the_byte_budget() {
        let s = round_robin();
        // 32 bytes a round: 2 words per node, 3 rounds for the node of 5.
        let plan = ExchangePlan::new(&s, 32);
        assert_eq!((plan.per_node, plan.rounds), (2, 3));
        // Below one word per node a round still moves one.
        assert_eq!(ExchangePlan::new(&s, 1).per_node, 1);
        let plan = ExchangePlan::new(&s, 8 << 20);
        assert_eq!((plan.per_node, plan.rounds), (5, 1));
        let scratch = plan.allocate().unwrap();
        assert_eq!((scratch.send.len(), scratch.received.len()), (plan.per_node, 2 * plan.per_node));
    }

    #[test]
    fn ranks_writing_their_own_starts_make_the_whole_index() {
        // Lengths 0-9000 over ranks of 3, 0, 40, 1 samples, each rank writing into its
        // own zeroed copy (as into the node's), the copies OR-ed (as the exchange does).
        let per_rank = [3u64, 0, 40, 1];
        let lengths: Vec<u64> = (0..44u64).map(|i| i * 2_654_435_761 % 9001).collect();
        let whole = super::super::GlobalIndex::from_lengths(&lengths, &per_rank);
        let packing = Packing::new(44, *lengths.iter().max().unwrap()).unwrap();
        let layout = NodeLayout::new(&[0, 1, 2, 3], &per_rank, packing, 8 << 20);
        let mut merged = vec![0u64; packing.words()];
        let (mut at, mut first_byte) = (0usize, 0u64);
        for (rank, &n) in per_rank.iter().enumerate() {
            let mut offsets = vec![0u64];
            for &len in &lengths[at..at + n as usize] {
                offsets.push(offsets[offsets.len() - 1] + len);
            }
            let shard = ShardView { data: &[], offsets: &offsets };
            let span = ByteSpan { first: first_byte, total: lengths.iter().sum() };
            let mut copy = vec![0u64; packing.words()];
            layout.encode_own(rank, &shard, span, rank == 0, |word, bits| copy[word] |= bits);
            merged.iter_mut().zip(&copy).for_each(|(m, c)| *m |= c);
            (at, first_byte) = (at + n as usize, first_byte + offsets[offsets.len() - 1]);
        }
        let rebuilt = super::super::GlobalIndex::from_starts(&per_rank, packing, Starts::Private(private_copy(&merged)));
        for id in 0..45 {
            assert_eq!(rebuilt.locate(id), whole.locate(id), "id {id}");
        }
    }

    fn private_copy(words: &[u64]) -> PrivateWords {
        let mut copy = PrivateWords::zeroed(words.len()).unwrap();
        copy.as_mut_slice().copy_from_slice(words);
        copy
    }
}
