//! Collective engine: requesters tell owners which samples they want, owners pack them,
//! and one `MPI_Alltoallv` moves all the bytes.
//!
//! Per round: `MPI_Alltoall` of request counts, `MPI_Alltoallv` of the requested ids,
//! packing on the owner, `MPI_Alltoallv` of the bytes, and unpacking into the output.
//! Requesters know every sample's length from the global index, so no byte counts
//! travel. When the step needs a single round and the step's agreement carried the
//! request matrix (up to `MDL_MATRIX_MAX_RANKS` ranks), every owner already knows how
//! many ids each rank asks of it, and the `MPI_Alltoall` is skipped. With the built-in
//! sampler every rank knows every rank's batch: owners then work out what each rank
//! will ask of them (from the epoch's inverted permutation, O(samples asked of them) a
//! step), and the whole request round is skipped.
//!
//! A limit L (`MDL_MAX_MESSAGE_BYTES`, default none) bounds what one rank sends or
//! receives in a round, and so the exchange's own buffers. A step takes one round
//! wherever no rank receives and no rank sends more than L bytes: the agreement shows
//! it for the sampler's steps and for fetches that carried the request matrix; a fetch
//! without the matrix counts the whole step first (one `MPI_Alltoall` of counts and
//! bytes, and one small agreement on the largest), and then knows it too. Otherwise a
//! rank's remote samples are cut into rounds of at most L / P bytes, where P is the
//! number of ranks: then no rank receives more than L / P bytes and no owner sends more
//! than P * L / P = L bytes in a round, and the counts of each round travel (one
//! `MPI_Alltoall` per round; no rank rebuilds another's plan). MPI's `int` counts set
//! no limit of their own: a part beyond them goes through `MPI_Alltoallw` with a
//! derived type per peer (`mpi::Comm::alltoallv`). A sample larger than L / P travels in no
//! round; the engine reads those few with one-sided gets (split into pieces of at most
//! L bytes) in the same step, so every batch can be moved.
//!
//! No rank fails alone once a round has begun: an owner makes room for what it will
//! serve (the ids asked of it and the bytes it sends) before any id travels, and where
//! that takes memory, the ranks agree first that every owner could
//! ([`RequestsToOwner::some_owner_lacks_room`], `count_and_make_room`).

use super::{Engine, KnownBatches, StepContext};
use crate::agree::{Proposal, agree, agree_on_checks};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::memory::{self, PageAlignedBytes};
use crate::mpi::{Comm, CountWidth, Get};
use crate::plan::RemoteSample;
use std::ops::Range;

pub struct Collective;

/// A rank's remote samples, divided: those the exchange carries (at most
/// `max_message_bytes / ranks` bytes each), in rounds, and the larger ones.
pub struct Rounds {
    pub exchanged: Vec<RemoteSample>,
    /// Consecutive ranges of `exchanged` (grouped by owner): all of them when the step
    /// takes one round, else ranges of at most the per-rank budget.
    pub rounds: Vec<Range<usize>>,
    pub oversize: Vec<RemoteSample>,
}

impl Rounds {
    /// `agreed_rounds`: the step's rounds, as every rank decided them.
    pub fn of(remote: &[RemoteSample], ranks: usize, max_message_bytes: u64, agreed_rounds: u64) -> Rounds {
        let budget = max_message_bytes / ranks as u64;
        let (exchanged, oversize): (Vec<RemoteSample>, Vec<RemoteSample>) = remote.iter().partition(|s| s.len <= budget);
        let rounds = if agreed_rounds > 1 {
            cut_into_rounds(exchanged.iter().map(|s| s.len), budget)
        } else {
            (!exchanged.is_empty()).then_some(0..exchanged.len()).into_iter().collect()
        };
        Rounds { exchanged, rounds, oversize }
    }
}

/// Consecutive ranges of samples (given by their lengths, each at most `budget`) of at
/// most `budget` bytes each.
fn cut_into_rounds(lens: impl Iterator<Item = u64>, budget: u64) -> Vec<Range<usize>> {
    let mut rounds = Vec::new();
    let (mut start, mut end, mut bytes) = (0, 0, 0u64);
    for len in lens {
        if bytes + len > budget {
            rounds.push(start..end);
            (start, bytes) = (end, 0);
        }
        bytes += len;
        end += 1;
    }
    if start < end {
        rounds.push(start..end);
    }
    rounds
}

/// What this rank's part of the exchange looks like, before any rank communicates.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeShape {
    /// Exchange rounds this rank needs.
    pub rounds: u64,
    /// The most bytes one sample may have to travel in the exchange (larger ones are
    /// read with gets): `max_message_bytes / ranks`.
    pub budget: u64,
    /// The bytes this rank receives in the exchange, over all rounds (its remote bytes
    /// less the samples read with gets).
    pub exchanged_bytes: u64,
}

impl ExchangeShape {
    /// Per owner rank: how many samples this rank asks it for in the exchange, over all
    /// rounds (O(P): for the agreement's request matrix, carried only up to
    /// `MDL_MATRIX_MAX_RANKS` ranks).
    pub fn requests_per_owner(&self, remote: &[RemoteSample], ranks: usize) -> Vec<u64> {
        let mut requests = vec![0u64; ranks];
        for s in remote.iter().filter(|s| s.len <= self.budget) {
            requests[s.owner] += 1;
        }
        requests
    }
}

/// The shape of the exchange for `remote` (on the fetch path: no copy of the samples,
/// unlike [`Rounds::of`], and nothing of size P).
pub fn exchange_shape(remote: &[RemoteSample], ranks: usize, max_message_bytes: u64) -> ExchangeShape {
    let budget = max_message_bytes / ranks as u64;
    let exchanged = remote.iter().filter(|s| s.len <= budget).map(|s| s.len);
    let rounds = cut_into_rounds(exchanged.clone(), budget).len() as u64;
    ExchangeShape { rounds, budget, exchanged_bytes: exchanged.sum() }
}

impl Engine for Collective {
    fn fetch(&self, step: &StepContext, out: &mut [u8]) -> Result<()> {
        let ranks = step.comm.size();
        let mut mine = Rounds::of(&step.plan.remote, ranks, step.limits.max_message, step.collective_rounds);
        // In a single round every rank asks for all its samples at once: what the others
        // ask of this rank is then known from their batches (the sampler), or its counts
        // from the agreed request matrix, and need not travel.
        let mut asked_in_the_round = match step.known_batches {
            Some(known) if step.collective_rounds <= 1 => Some(Requests::Known(asked_in_one_round(step, known))),
            _ => None,
        };
        let told = step.requests_to_me.filter(|_| step.collective_rounds == 1);
        let mut rounds = step.collective_rounds as usize;
        if step.collective_rounds > 1 && step.known_batches.is_none() && step.requests_to_me.is_none() {
            // The step's agreement could not show what owners serve (no request matrix),
            // so it cut the step at the per-rank budget, MDL_MAX_MESSAGE_BYTES / P. The
            // whole step's counts show it, and where they fit one round, one it takes.
            let whole = count_and_make_room(step, &PerOwner::of(&mine.exchanged, ranks))?;
            if whole.most_bytes() <= step.limits.max_message {
                mine.rounds = std::iter::once(0..mine.exchanged.len()).collect(); // one round of all
                asked_in_the_round = Some(Requests::Counted(whole));
                rounds = 1;
            }
        }
        for round in 0..rounds {
            let range = mine.rounds.get(round).cloned().unwrap_or(0..0);
            let asked = asked_in_the_round.take().unwrap_or_else(|| told.map_or(Requests::Unknown, Requests::Told));
            exchange(step, &mine.exchanged[range], asked, out)?;
        }
        let gets: Vec<Get> = mine
            .oversize
            .iter()
            .map(|s| Get { target: s.owner, target_offset: s.target_offset, dest_offset: s.dest_offset, len: s.len })
            .collect();
        step.store.window.get_all(&gets, out, step.limits)
    }
}

/// How many ids and bytes an owner's exchange buffers hold without growing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServeRoom {
    pub ids: u64,
    pub bytes: u64,
}

/// What the other ranks will ask one owner for in a single-round exchange, read from
/// the agreed request matrix (`estimator::features::requests_to`).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestsToOwner {
    /// How many ids each rank asks it for.
    pub counts: Vec<u64>,
    /// What it serves in all: ids, and bytes (at most: samples that go by gets count).
    pub serves: ServeRoom,
    /// Whether some owner serves more than the least room any rank's buffers held when
    /// the step was agreed: then every owner makes room, and the ranks agree that all
    /// could, before any id travels. Once the buffers have grown to a job's steps, no
    /// step allocates after its agreement, and none pays that extra agreement.
    pub some_owner_lacks_room: bool,
}

/// What every other rank will ask this rank for in a single-round step, when every
/// rank's batch is known (the built-in sampler): in one round each requester asks for
/// all its remote samples that fit a round, in batch order, so this rank's part of
/// each batch is all it needs, found without looking at the rest of the batches. One
/// pass over those samples, with no list per rank.
/// Returns how many ids each rank asks; the ids, grouped by requester, are left in the
/// exchange buffers.
fn asked_in_one_round(step: &StepContext, known: &dyn KnownBatches) -> Vec<u64> {
    let (me, ranks) = (step.comm.rank(), step.comm.size());
    let index = &step.store.index;
    let first = index.first_ids();
    let budget = step.limits.max_message / ranks as u64;
    let mut counts = vec![0; ranks];
    let asked = &mut step.buffers.borrow_mut().asked;
    asked.clear();
    let topology = &step.store.topology;
    known.for_each_request(first[me]..first[me + 1], &mut |requester, id| {
        // This rank's own samples, and those the ranks of its node read (node-local
        // path), are copies, not requests; empty samples and those over the budget do
        // not travel in the exchange.
        let travels = index.len_of(id).is_some_and(|len| len > 0 && len <= budget);
        if !topology.shares(requester, me) && travels {
            asked.push(id);
            counts[requester] += 1;
        }
    });
    counts
}

/// What this rank knows, before a round, of what the other ranks will ask of it.
enum Requests<'a> {
    /// Nothing: the counts travel in an `MPI_Alltoall`, then the ids.
    Unknown,
    /// What each rank asks for, agreed with the step: only the ids travel.
    Told(&'a RequestsToOwner),
    /// How many ids each rank asks for, counted for the whole step
    /// (`count_and_make_room`), with room made for them: the ids follow.
    Counted(Counted),
    /// The ids each rank asks for (the built-in sampler), already in the exchange
    /// buffers, and how many each asks: nothing travels.
    Known(Vec<u64>),
}

/// One round: `requests` (grouped by owner) is what this rank wants in it; `asked` is
/// what this rank knows of what the others want of it.
///
/// Nothing here allocates between the round's first message and its last where a
/// failure would leave the others waiting: an owner makes room for what it serves
/// before any id travels, and where that takes memory the ranks agree first that
/// every owner could.
fn exchange(step: &StepContext, requests: &[RemoteSample], asked: Requests, out: &mut [u8]) -> Result<()> {
    let comm = step.comm;
    let wanted = PerOwner::of(requests, comm.size());
    // The width of the round's exchanges, from figures every rank agreed on: the
    // step's, where its agreement showed what owners serve, else the round's count.
    let step_width = CountWidth::for_most_bytes(step.most_exchanged_bytes);
    let counted;
    let (ids_from, width): (&[u64], CountWidth) = match asked {
        Requests::Known(counts) => {
            counted = counts;
            (&counted, step_width)
        }
        Requests::Counted(whole) => {
            let width = CountWidth::for_most_bytes(whole.most_bytes());
            counted = whole.ids_from;
            receive_ids(comm, requests, &wanted.ids, &counted, &mut step.buffers.borrow_mut().asked, width)?;
            (&counted, width)
        }
        Requests::Told(told) => {
            if told.some_owner_lacks_room {
                agree_on_checks(comm, step.buffers.borrow_mut().make_room_to_serve(told.serves))?;
            }
            receive_ids(comm, requests, &wanted.ids, &told.counts, &mut step.buffers.borrow_mut().asked, step_width)?;
            (&told.counts, step_width)
        }
        Requests::Unknown => {
            let round = count_and_make_room(step, &wanted)?;
            let width = CountWidth::for_most_bytes(round.most_bytes());
            counted = round.ids_from;
            receive_ids(comm, requests, &wanted.ids, &counted, &mut step.buffers.borrow_mut().asked, width)?;
            (&counted, width)
        }
    };

    let mut buffers = step.buffers.borrow_mut();
    let ExchangeBuffers { packed, received, asked, rounds } = &mut *buffers;
    let bytes_to = pack(step, asked, ids_from, packed)?;
    let received = grown(received, wanted.bytes.iter().sum::<u64>())?;
    // After a timeout the buffers stay with the loader, which is then poisoned and
    // leaked, never freed (calibration leaks its own).
    comm.alltoallv(packed, &bytes_to, received, &wanted.bytes, width)?;
    // Counted once it has happened: a failed exchange is no round of the statistics.
    *rounds += 1;
    unpack(requests, received, out);
    Ok(())
}

/// What a rank asks of each owner: how many ids, and their bytes.
struct PerOwner {
    ids: Vec<u64>,
    bytes: Vec<u64>,
}

impl PerOwner {
    fn of(requests: &[RemoteSample], ranks: usize) -> PerOwner {
        let mut wanted = PerOwner { ids: vec![0; ranks], bytes: vec![0; ranks] };
        for r in requests {
            wanted.ids[r.owner] += 1;
            wanted.bytes[r.owner] += r.len;
        }
        wanted
    }
}

/// What a count exchange showed.
struct Counted {
    /// How many ids each rank asks of this one.
    ids_from: Vec<u64>,
    /// The most bytes any rank serves, and the most any rank receives.
    most_sent: u64,
    most_received: u64,
}

impl Counted {
    /// The most bytes any rank sends or receives (agreed).
    fn most_bytes(&self) -> u64 {
        self.most_sent.max(self.most_received)
    }
}

/// Tell each owner how many ids this rank will ask of it and how many bytes they hold
/// (`wanted`), in one `MPI_Alltoall` of pairs; then each owner makes room for what it
/// serves (at most a round's limit of bytes), and the ranks agree, in one small
/// all-reduce, that every owner could, and on the most any rank sends and receives.
fn count_and_make_room(step: &StepContext, wanted: &PerOwner) -> Result<Counted> {
    let comm = step.comm;
    let pairs: Vec<u64> = wanted.ids.iter().zip(&wanted.bytes).flat_map(|(&ids, &bytes)| [ids, bytes]).collect();
    let received_bytes: u64 = wanted.bytes.iter().sum();
    let from_each = comm.alltoall(&pairs)?;
    let ids_from: Vec<u64> = from_each.chunks_exact(2).map(|pair| pair[0]).collect();
    let sent_bytes: u64 = from_each.chunks_exact(2).map(|pair| pair[1]).sum();
    // A step too large for one round makes room round by round.
    let serves = ServeRoom { ids: ids_from.iter().sum(), bytes: sent_bytes.min(step.limits.max_message) };
    let room = step.buffers.borrow_mut().make_room_to_serve(serves);
    let error = room.err();
    let proposal = Proposal { error: error.clone(), backend: Backend::Auto, maxima: vec![sent_bytes as f64, received_bytes as f64], same: 0 };
    let agreed = agree(comm, &proposal)?;
    agreed.outcome(error)?;
    Ok(Counted { ids_from, most_sent: agreed.maxima[0] as u64, most_received: agreed.maxima[1] as u64 })
}

/// Send each owner the ids this rank wants of it (`ids_to` per owner), and receive into
/// `asked` the ids each rank asks of this one (`ids_from` per requester), grouped by
/// requester. `asked` has room for them (made before the round).
fn receive_ids(
    comm: &Comm,
    requests: &[RemoteSample],
    ids_to: &[u64],
    ids_from: &[u64],
    asked: &mut Vec<u64>,
    width: CountWidth,
) -> Result<()> {
    let wanted: Vec<u64> = requests.iter().map(|r| r.id).collect();
    asked.clear();
    asked.resize(ids_from.iter().sum::<u64>() as usize, 0);
    let sent = comm.alltoallv(&wanted, ids_to, asked, ids_from, width);
    if crate::mpi::timed_out(&sent) {
        std::mem::forget(wanted); // MPI may still read it (`asked` stays with the loader)
    }
    sent
}

/// The exchange's send and receive buffers, kept by the loader from step to step: they
/// grow to the largest round and are neither allocated nor zero-filled again
/// (zero-filling half a megabyte costs as much as moving it). One pair per loader, used
/// by one fetch at a time (the loader's step lock), freed with the loader.
#[derive(Default)]
pub struct ExchangeBuffers {
    /// Page-aligned, as the samples copied into them: see `PageAlignedBytes`.
    packed: PageAlignedBytes,
    received: PageAlignedBytes,
    /// The ids the other ranks ask of this one in a round, grouped by requester.
    asked: Vec<u64>,
    /// Exchanges of samples made, for the statistics (see [`ExchangeBuffers::take_rounds`]).
    rounds: u64,
}

impl ExchangeBuffers {
    /// Make room for receiving `bytes` in one round, before the step's agreement, so
    /// that running out of memory fails every rank together instead of this one alone
    /// after the others have committed to the exchange.
    pub fn reserve_received(&mut self, bytes: u64) -> Result<()> {
        grown(&mut self.received, bytes).map(|_| ())
    }

    /// Make room for sending `bytes` in one round, before the step's agreement, where
    /// the owner knows them (every batch known): as [`ExchangeBuffers::reserve_received`].
    pub fn reserve_packed(&mut self, bytes: u64) -> Result<()> {
        let len = usize::try_from(bytes).map_err(|_| Error::no_memory(bytes))?;
        self.packed.clear(); // each round packs from empty
        self.packed.reserve_room(len)
    }

    /// What an owner's side holds without growing: it goes into the step's agreement
    /// (see [`RequestsToOwner::some_owner_lacks_room`]). Capacities only grow, so what
    /// a step agreed ahead reports holds when it runs.
    pub fn room(&self) -> ServeRoom {
        ServeRoom { ids: self.asked.capacity() as u64, bytes: self.packed.room() as u64 }
    }

    /// The exchanges of samples made since the last call.
    pub fn take_rounds(&mut self) -> u64 {
        std::mem::take(&mut self.rounds)
    }

    /// Make room for serving `serves` in one round.
    fn make_room_to_serve(&mut self, serves: ServeRoom) -> Result<()> {
        let ids = usize::try_from(serves.ids).map_err(|_| Error::no_memory(serves.ids.saturating_mul(8)))?;
        self.asked.clear();
        memory::reserve_exact(&mut self.asked, ids)?;
        self.reserve_packed(serves.bytes)
    }
}

/// The first `len` bytes of `buffer`, growing it (zero-filled, once) when needed.
fn grown(buffer: &mut PageAlignedBytes, len: u64) -> Result<&mut [u8]> {
    let len = usize::try_from(len).map_err(|_| Error::no_memory(len))?;
    buffer.reserve_room(len)?;
    buffer.resize(len)?;
    Ok(&mut buffer[..])
}

/// Copy the received samples, which arrive in the order of `requests`, to their places.
fn unpack(requests: &[RemoteSample], received: &[u8], out: &mut [u8]) {
    let mut at = 0usize;
    for r in requests {
        let (len, dest) = (r.len as usize, r.dest_offset as usize);
        out[dest..dest + len].copy_from_slice(&received[at..at + len]);
        at += len;
    }
}

/// The owner's side: copy the samples each requester asked for into `packed`, requester
/// by requester; returns the bytes for each.
fn pack(step: &StepContext, asked: &[u64], ids_from: &[u64], packed: &mut PageAlignedBytes) -> Result<Vec<u64>> {
    let index = &step.store.index;
    let shard = step.store.window.local();
    let me = step.comm.rank();
    packed.clear();
    let mut bytes_to = Vec::with_capacity(ids_from.len());
    let mut next = 0usize;
    for &count in ids_from {
        let before = packed.len();
        for &id in &asked[next..next + count as usize] {
            let loc = index
                .locate(id)
                .filter(|loc| loc.owner == me)
                .ok_or_else(|| Error::invalid(format!("a peer asked rank {me} for sample {id}, which it does not hold")))?;
            let start = loc.offset as usize;
            packed.extend_from_slice(&shard[start..start + loc.len as usize])?;
        }
        bytes_to.push((packed.len() - before) as u64);
        next += count as usize;
    }
    Ok(bytes_to)
}


#[cfg(test)]
mod tests {
    use super::*;

    fn sample(owner: usize, len: u64) -> RemoteSample {
        RemoteSample { id: 0, owner, target_offset: 0, dest_offset: 0, len }
    }

    /// The rounds of one rank cut at the per-rank budget, as in a step whose agreement
    /// could not show that one round fits.
    fn ranges(remote: &[RemoteSample], ranks: usize, max: u64) -> Vec<Range<usize>> {
        Rounds::of(remote, ranks, max, exchange_shape(remote, ranks, max).rounds).rounds
    }

    #[test]
    fn one_round_when_everything_fits() {
        let remote = [sample(0, 10), sample(1, 20)];
        assert_eq!(ranges(&remote, 2, 1000), vec![0..2]);
        assert!(ranges(&[], 2, 1000).is_empty());
    }

    #[test]
    fn cuts_rounds_at_the_per_rank_budget() {
        // budget = 100 / 2 = 50 bytes per round.
        let remote = [sample(0, 30), sample(0, 20), sample(1, 1), sample(1, 50), sample(1, 49)];
        assert_eq!(ranges(&remote, 2, 100), vec![0..2, 2..3, 3..4, 4..5]);
    }

    #[test]
    fn a_step_agreed_to_fit_takes_one_round_whatever_the_per_rank_budget() {
        let remote = [sample(0, 30), sample(0, 20), sample(1, 1), sample(1, 50), sample(1, 49)];
        assert_eq!(Rounds::of(&remote, 2, 100, 1).rounds, vec![0..5]);
        assert_eq!(exchange_shape(&remote, 2, 100).rounds, 4);
    }

    #[test]
    fn samples_over_the_budget_go_by_gets() {
        let r = Rounds::of(&[sample(0, 51), sample(1, 10), sample(1, 60)], 2, 100, 1);
        assert_eq!(r.exchanged.len(), 1);
        assert_eq!(r.oversize.iter().map(|s| s.len).collect::<Vec<_>>(), vec![51, 60]);
        assert_eq!(r.rounds, vec![0..1]);
    }
}
