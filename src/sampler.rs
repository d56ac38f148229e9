//! The built-in distributed sampler: which samples each rank gets at each step of an
//! epoch, computed on every rank without communication.
//!
//! # The permutation (stable across versions; tests pin values)
//!
//! An epoch's order is `perm(0), perm(1), ..., perm(N-1)`, a permutation of the global
//! ids `[0, N)` drawn from `(seed, epoch)`; the identity when shuffling is off. It takes
//! O(1) memory and O(1) expected work per position, so it scales to 10^9 samples:
//!
//! 1. Keys: `k = splitmix64_stream(seed ^ splitmix64_mix(epoch))`, the first six outputs
//!    of the SplitMix64 generator started at state `seed XOR mix(epoch)`, where `mix` is
//!    SplitMix64's output function applied to `epoch + 0x9E3779B97F4A7C15`.
//! 2. Domain: `b` = the smallest even number of bits >= 2 with `2^b >= N`; `h = b / 2`.
//! 3. A balanced Feistel network of six rounds on `x` in `[0, 2^b)`: split
//!    `L = x >> h`, `R = x & (2^h - 1)`; each round r sets
//!    `(L, R) = (R, L XOR (mix(R XOR k[r]) & (2^h - 1)))`; the result is `(L << h) | R`.
//!    This is a bijection on `[0, 2^b)` for any round function.
//! 4. Cycle walking: `perm(i)` applies the network to `i`, then again to the result,
//!    until the value is below N. Since `2^b < 4N`, this takes under four rounds on
//!    average and stays a bijection on `[0, N)`.
//!
//! # Splitting among ranks (as PyTorch's DistributedSampler)
//!
//! With P ranks, each rank gets `per_rank = ceil(N / P)` samples, the order being padded
//! by wrapping around (`position i` takes `perm(i mod N)`), or, with `drop_last`,
//! `per_rank = floor(N / P)` and the tail is dropped. Rank r takes positions
//! `r, r + P, r + 2P, ...`. Step s gives rank r its samples `s*B .. min((s+1)*B,
//! per_rank)` for batch size B: every rank has the same number of steps,
//! `ceil(per_rank / B)`, and the last batch may be smaller.

//!
//! # What the others ask of an owner
//!
//! The collective engine's owners must know which of their samples each rank asks for
//! at a step. Rebuilding every rank's batch costs O(P x B) per step and rank (12 ms at
//! P = 256, B = 256); instead the permutation is inverted once per epoch for the
//! owner's own samples (O(local shard), 8 bytes per local sample), and a step then
//! costs O(samples asked of this rank). With replica groups of g ranks only the
//! owner's group asks it: the inversion then scans the group's g x N / P places in the
//! order instead of walking the owner's N / g samples.

use crate::memory;
use crate::error::{Error, Result};
use crate::rng::mix;
use std::ops::Range;
use std::sync::OnceLock;

const ROUNDS: usize = 6;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;


/// A keyed bijection on `[0, n)`.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: Option<[u64; ROUNDS]>,
}

impl Permutation {
    /// The identity when `shuffle` is false.
    pub fn new(n: u64, seed: u64, epoch: u64, shuffle: bool) -> Permutation {
        let bits = (u64::BITS - n.saturating_sub(1).leading_zeros()).max(2);
        let half_bits = bits.div_ceil(2);
        let keys = shuffle.then(|| {
            let mut state = seed ^ mix(epoch.wrapping_add(GOLDEN));
            std::array::from_fn(|_| {
                state = state.wrapping_add(GOLDEN);
                mix(state)
            })
        });
        Permutation { n, half_bits, keys }
    }

    fn feistel(&self, keys: &[u64; ROUNDS], x: u64) -> u64 {
        self.feistel_lanes(keys, [x])[0]
    }

    /// The network on `L` values at once, round by round: each round of one value
    /// waits for its multiplies, so `L` independent values keep the CPU busy meanwhile.
    #[inline]
    fn feistel_lanes<const L: usize>(&self, keys: &[u64; ROUNDS], xs: [u64; L]) -> [u64; L] {
        let mask = (1u64 << self.half_bits) - 1;
        let mut left = xs.map(|x| x >> self.half_bits);
        let mut right = xs.map(|x| x & mask);
        for key in keys {
            for l in 0..L {
                (left[l], right[l]) = (right[l], left[l] ^ (mix(right[l] ^ key) & mask));
            }
        }
        std::array::from_fn(|l| (left[l] << self.half_bits) | right[l])
    }

    fn feistel_inverse(&self, keys: &[u64; ROUNDS], x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in keys.iter().rev() {
            (left, right) = (right ^ (mix(left ^ key) & mask), left);
        }
        (left << self.half_bits) | right
    }

    /// The position of `id` (< n): the inverse of [`Permutation::at`]. Cycle walking is
    /// undone by walking backwards until the value is below n.
    pub fn position_of(&self, id: u64) -> u64 {
        debug_assert!(id < self.n);
        let Some(keys) = &self.keys else { return id };
        let mut x = self.feistel_inverse(keys, id);
        while x >= self.n {
            x = self.feistel_inverse(keys, x);
        }
        x
    }

    /// The id at position `i` (< n).
    pub fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let Some(keys) = &self.keys else { return i };
        self.walk(keys, self.feistel(keys, i))
    }

    /// Cycle walking from the network's first output `x`.
    fn walk(&self, keys: &[u64; ROUNDS], mut x: u64) -> u64 {
        while x >= self.n {
            x = self.feistel(keys, x);
        }
        x
    }

    /// The ids at `positions` (each < n), appended to `out`: as [`Permutation::at`],
    /// with the network's first pass run on several positions at once.
    pub fn extend_at(&self, positions: impl Iterator<Item = u64>, out: &mut Vec<u64>) {
        const LANES: usize = 4;
        let start = out.len();
        out.extend(positions);
        let Some(keys) = &self.keys else { return };
        let mut chunks = out[start..].chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            let lanes: &mut [u64; LANES] = chunk.try_into().expect("chunks of LANES");
            *lanes = self.feistel_lanes(keys, *lanes).map(|x| self.walk(keys, x));
        }
        for x in chunks.into_remainder() {
            *x = self.at(*x);
        }
    }
}

/// One epoch of the sampler, for a communicator of `ranks` ranks.
#[derive(Debug)]
pub struct Epoch {
    perm: Permutation,
    n: u64,
    ranks: u64,
    batch: u64,
    per_rank: u64,
    /// Where one owner's samples sit in the epoch, built once per epoch by
    /// [`Epoch::prepare_owned`] before the first step that needs it.
    inverse: OnceLock<OwnedPositions>,
}

/// An owner's samples' places in the epoch's batches, sorted by (step, requester,
/// place in the requester's batch), with each step's range.
#[derive(Debug)]
struct OwnedPositions {
    owned: Range<u64>,
    /// Per position, its requester and id ([`pack`]), in that order.
    requests: Vec<u64>,
    step_starts: Vec<usize>,
    /// Per step: bytes of the owner's samples in the batches of the ranks it serves.
    served: Vec<u64>,
}

/// A request of an owner's sample packs its requester and the sample's offset in the
/// owner's range into 64 bits: 8 bytes per owned sample per epoch.
const OFFSET_BITS: u32 = 40;
const MAX_OWNED: u64 = 1 << OFFSET_BITS;
const MAX_RANKS: u64 = 1 << (u64::BITS - OFFSET_BITS);

fn pack(rank: usize, offset: u64) -> u64 {
    ((rank as u64) << OFFSET_BITS) | offset
}

fn unpack(request: u64) -> (usize, u64) {
    ((request >> OFFSET_BITS) as usize, request & (MAX_OWNED - 1))
}

/// Append `x`, growing `v` fallibly (doubling) when it is full.
fn push_growing(v: &mut Vec<u64>, x: u64) -> Result<()> {
    if v.len() == v.capacity() {
        let more = v.len().max(64);
        memory::reserve(v, more)?;
    }
    v.push(x);
    Ok(())
}

impl Epoch {
    pub fn new(
        n: u64,
        ranks: usize,
        seed: u64,
        epoch: u64,
        batch: u64,
        shuffle: bool,
        drop_last: bool,
    ) -> Result<Epoch> {
        if batch == 0 {
            return Err(Error::invalid("batch_size must be at least 1"));
        }
        let ranks = ranks as u64;
        let per_rank = if drop_last { n / ranks } else { n.div_ceil(ranks) };
        Ok(Epoch { perm: Permutation::new(n, seed, epoch, shuffle), n, ranks, batch, per_rank, inverse: OnceLock::new() })
    }

    /// Samples each rank gets in the epoch.
    #[cfg(test)]
    pub fn per_rank(&self) -> u64 {
        self.per_rank
    }

    /// Steps in the epoch (the same on every rank).
    pub fn steps(&self) -> u64 {
        self.per_rank.div_ceil(self.batch)
    }

    /// Samples of each rank's batch at `step` (0 past the end).
    pub fn batch_len(&self, step: u64) -> u64 {
        let first = step.saturating_mul(self.batch).min(self.per_rank);
        (first + self.batch).min(self.per_rank) - first
    }

    /// Rank `rank`'s ids at `step` (empty past the end), written into `ids`.
    pub fn batch_into(&self, step: u64, rank: usize, ids: &mut Vec<u64>) {
        ids.clear();
        let first = step.saturating_mul(self.batch).min(self.per_rank);
        let end = first + self.batch_len(step);
        // The position wraps around only in the padding at the epoch's end: no division
        // per sample before it.
        let wrap = |p: u64| if p < self.n { p } else { p % self.n };
        self.perm.extend_at((first..end).map(|k| wrap(rank as u64 + k * self.ranks)), ids);
    }

    /// Build, if not yet built, where the ids in `owned` (one rank's samples, of lengths
    /// `len_of`) sit in the batches of the ranks for which `asks(rank)` (with replica
    /// groups, its own group's), and the bytes it serves per step to the ranks for which
    /// `serves(rank)` (of those, not itself, nor the ranks that copy its samples on the
    /// node): 8 bytes per owned sample and per step, allocated fallibly. Called before a step's agreement, so that running out of
    /// memory fails every rank together. O(owned) once per epoch; the steps then need
    /// O(their requests of the owner), and [`Epoch::served_bytes`] O(1).
    pub fn prepare_owned(
        &self,
        owned: Range<u64>,
        asks: &dyn Fn(usize) -> bool,
        serves: &dyn Fn(usize) -> bool,
        len_of: &dyn Fn(u64) -> u64,
    ) -> Result<()> {
        if self.inverse.get().is_none() {
            // Where no rank reads this owner's samples through an engine (one node with
            // the node-local path: they are all copies), no step asks anything of it
            // and it serves nothing: the inversion, which costs about as much per
            // sample as copying it, would go unused.
            let positions = if (0..self.ranks as usize).any(serves) {
                self.invert(owned, asks, serves, len_of)?
            } else {
                OwnedPositions { owned, requests: Vec::new(), step_starts: Vec::new(), served: Vec::new() }
            };
            let _ = self.inverse.set(positions);
        }
        Ok(())
    }

    fn inverse(&self, owned: &Range<u64>) -> &OwnedPositions {
        let inverse = self.inverse.get().expect("prepare_owned was called before the step");
        debug_assert_eq!(&inverse.owned, owned, "one owner per epoch");
        inverse
    }

    /// Bytes of the prepared owner's samples that the ranks it serves take at `step` (0
    /// past the end).
    pub fn served_bytes(&self, step: u64, owned: Range<u64>) -> u64 {
        self.inverse(&owned).served.get(step as usize).copied().unwrap_or(0)
    }

    /// Which of the ids in `owned` (one owner's samples) each rank takes at `step`:
    /// `by_rank[q]` receives rank q's, in the order of q's batch (for the tests).
    #[cfg(test)]
    fn owned_in_batches(&self, step: u64, owned: Range<u64>, by_rank: &mut [Vec<u64>]) {
        by_rank.iter_mut().for_each(Vec::clear);
        self.for_each_request(step, owned, |rank, id| by_rank[rank].push(id));
    }

    /// `visit(rank, id)` for the ids of `owned` (one owner's samples) that each rank
    /// takes at `step`, by rank and in the order of each rank's batch. O(those samples),
    /// after the O(owned) inversion of [`Epoch::prepare_owned`] (which must have been
    /// called, with the same `owned`).
    pub fn for_each_request(&self, step: u64, owned: Range<u64>, mut visit: impl FnMut(usize, u64)) {
        let inverse = self.inverse(&owned);
        let Some(range) = inverse.step_starts.get(step as usize..step as usize + 2) else { return };
        for &request in &inverse.requests[range[0]..range[1]] {
            let (rank, offset) = unpack(request);
            visit(rank, owned.start + offset);
        }
    }

    /// Where every id in `owned` is requested (found through its positions in the
    /// padded split order), sorted by step, then rank, then place in the batch, and the
    /// bytes the owner serves per step.
    fn invert(
        &self,
        owned: Range<u64>,
        asks: &dyn Fn(usize) -> bool,
        serves: &dyn Fn(usize) -> bool,
        len_of: &dyn Fn(u64) -> u64,
    ) -> Result<OwnedPositions> {
        let total = self.per_rank * self.ranks;
        // Each id appears total / n times, and once more for the first total % n
        // positions of the order (the padding wraps around).
        let owned_count = owned.end - owned.start;
        if owned_count > MAX_OWNED || self.ranks > MAX_RANKS {
            return Err(Error::invalid(format!(
                "the sampler handles at most {MAX_OWNED} samples per rank and {MAX_RANKS} ranks"
            )));
        }
        let bound = owned_count * (total / self.n.max(1)) + owned_count.min(total % self.n.max(1));
        // Only the asking ranks' positions are kept: with replica groups, this group's
        // (1 / groups of them: a group of 8 among 1024 ranks keeps 1/128). Reserved for
        // their expected share, grown (fallibly) past it.
        let asking_ranks: Vec<usize> = (0..self.ranks as usize).filter(|&r| asks(r)).collect();
        let expected = (bound as u128 * asking_ranks.len() as u128 / self.ranks.max(1) as u128) as u64;
        let mut positions = Vec::new();
        let first_room = expected.saturating_add(expected / 16 + 64).min(bound);
        memory::reserve_exact(&mut positions, first_room as usize)?;
        let steps = self.steps() as usize;
        let mut served = memory::filled(steps as u64, 0u64)?;
        // Two ways to the same positions: walk the owned ids to their positions, or scan
        // the asking ranks' positions for owned ids, whichever sees fewer (with replica
        // groups the asking ranks are the group's: g x N / P positions against N / g
        // owned ids, 16x fewer at P = 1024, g = 8).
        if (asking_ranks.len() as u64).saturating_mul(self.per_rank) < owned_count {
            self.scan_positions(&owned, &asking_ranks, serves, len_of, &mut positions, &mut served)?;
        } else {
            self.walk_owned_ids(&owned, asks, serves, len_of, &mut positions, &mut served)?;
        }
        // Sorted by (step, requester, place in its batch): position i = k * P + rank is
        // place k % B of step k / B, so the key (step * P + rank) * B + place orders
        // them as plain integers (no division in the comparisons), and is one-to-one.
        // A batch larger than a rank's share (up to u64::MAX) holds the share: step and
        // place are the same with the share as the batch, and the keys cannot overflow
        // (they stay below the padded total plus a step).
        let (ranks, batch) = (self.ranks, self.batch.min(self.per_rank).max(1));
        let steps_key = ranks * batch;
        for entry in &mut positions {
            let (k, rank) = (*entry / ranks, *entry % ranks);
            *entry = ((k / batch) * ranks + rank) * batch + k % batch;
        }
        positions.sort_unstable();
        let mut step_starts = memory::with_room(steps + 1)?;
        for s in 0..=steps as u64 {
            step_starts.push(positions.partition_point(|&key| key / steps_key < s));
        }
        // Each key becomes its requester and id, in place: the steps then take no
        // permutation (a few Feistel rounds per sample, more when they cycle-walk).
        let mut requests = positions;
        for entry in &mut requests {
            let (step, rank, place) = (*entry / steps_key, (*entry / batch) % ranks, *entry % batch);
            let i = (step * batch + place) * ranks + rank;
            *entry = pack(rank as usize, self.perm.at(i % self.n) - owned.start);
        }
        Ok(OwnedPositions { owned, requests, step_starts, served })
    }

    /// The positions that take an id of `owned` (each id at p, p + N, ... below the
    /// padded total, or not at all past a dropped tail), those of asking ranks appended
    /// to `positions`, and the bytes served per step added to `served`. O(owned).
    fn walk_owned_ids(
        &self,
        owned: &Range<u64>,
        asks: &dyn Fn(usize) -> bool,
        serves: &dyn Fn(usize) -> bool,
        len_of: &dyn Fn(u64) -> u64,
        positions: &mut Vec<u64>,
        served: &mut [u64],
    ) -> Result<()> {
        let total = self.per_rank * self.ranks;
        for id in owned.clone() {
            let len = len_of(id);
            let mut i = self.perm.position_of(id);
            while i < total {
                let requester = (i % self.ranks) as usize;
                if asks(requester) {
                    push_growing(positions, i)?;
                }
                if serves(requester) {
                    served[self.step_of(i) as usize] += len;
                }
                i += self.n;
            }
        }
        Ok(())
    }

    /// As [`Epoch::walk_owned_ids`], from the other side: every position of the
    /// `asking` ranks, kept where its id is owned. O(asking ranks x per_rank).
    fn scan_positions(
        &self,
        owned: &Range<u64>,
        asking: &[usize],
        serves: &dyn Fn(usize) -> bool,
        len_of: &dyn Fn(u64) -> u64,
        positions: &mut Vec<u64>,
        served: &mut [u64],
    ) -> Result<()> {
        const CHUNK: u64 = 4096;
        let mut ids = Vec::with_capacity(CHUNK as usize);
        for &rank in asking {
            let serving = serves(rank);
            for first in (0..self.per_rank).step_by(CHUNK as usize) {
                let ks = first..(first + CHUNK).min(self.per_rank);
                let at = |k: u64| k * self.ranks + rank as u64;
                ids.clear();
                self.perm.extend_at(ks.clone().map(|k| at(k) % self.n), &mut ids);
                for (k, &id) in ks.zip(&ids) {
                    if owned.contains(&id) {
                        push_growing(positions, at(k))?;
                        if serving {
                            served[self.step_of(at(k)) as usize] += len_of(id);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The step position `i` of the padded split order belongs to.
    fn step_of(&self, i: u64) -> u64 {
        (i / self.ranks) / self.batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_permutation_for_awkward_sizes() {
        for n in [1u64, 2, 3, 4, 5, 17, 100, 1000, 4097] {
            let p = Permutation::new(n, 42, 3, true);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = p.at(i) as usize;
                assert!(!seen[x], "n = {n}: {x} twice");
                seen[x] = true;
            }
        }
    }

    #[test]
    fn pinned_values_never_change() {
        // These values define the shuffle of every past release: never update them.
        let p = Permutation::new(1000, 12345, 7, true);
        let first: Vec<u64> = (0..8).map(|i| p.at(i)).collect();
        assert_eq!(first, PINNED_1000_12345_7);
        let big = Permutation::new(1_000_000_000, 1, 0, true);
        assert_eq!([big.at(0), big.at(1), big.at(999_999_999)], PINNED_1E9_1_0);
    }

    const PINNED_1000_12345_7: [u64; 8] = [323, 698, 341, 780, 723, 929, 760, 87];
    const PINNED_1E9_1_0: [u64; 3] = [993006891, 688983554, 759634527];

    #[test]
    fn epochs_and_seeds_differ_and_identity_without_shuffle() {
        let a: Vec<u64> = (0..50).map(|i| Permutation::new(50, 1, 0, true).at(i)).collect();
        let b: Vec<u64> = (0..50).map(|i| Permutation::new(50, 1, 1, true).at(i)).collect();
        let c: Vec<u64> = (0..50).map(|i| Permutation::new(50, 2, 0, true).at(i)).collect();
        assert!(a != b && a != c);
        assert!((0..50).all(|i| Permutation::new(50, 1, 0, false).at(i) == i));
    }

    /// PyTorch's DistributedSampler: (N, P, drop_last) -> samples per rank.
    #[test]
    fn counts_match_distributed_sampler() {
        let table = [
            (10, 3, false, 4),
            (10, 3, true, 3),
            (9, 3, false, 3),
            (9, 3, true, 3),
            (2, 4, false, 1),
            (2, 4, true, 0),
            (0, 2, false, 0),
            (1001, 8, false, 126),
            (1001, 8, true, 125),
        ];
        for (n, p, drop_last, per_rank) in table {
            let e = Epoch::new(n, p, 0, 0, 16, true, drop_last).unwrap();
            assert_eq!(e.per_rank(), per_rank, "N={n} P={p} drop_last={drop_last}");
        }
    }

    #[test]
    fn every_sample_exactly_once_without_padding_and_wrapped_with_it() {
        let (n, p, batch) = (103u64, 4usize, 8u64);
        let e = Epoch::new(n, p, 9, 2, batch, true, true).unwrap();
        let mut count = vec![0; n as usize];
        let mut ids = Vec::new();
        for r in 0..p {
            for s in 0..e.steps() {
                e.batch_into(s, r, &mut ids);
                ids.iter().for_each(|&id| count[id as usize] += 1);
            }
        }
        assert_eq!(count.iter().filter(|&&c| c == 1).count() as u64, n / p as u64 * p as u64);
        assert!(count.iter().all(|&c| c <= 1));
        let padded = Epoch::new(n, p, 9, 2, batch, true, false).unwrap();
        let mut total = 0;
        for r in 0..p {
            for s in 0..padded.steps() {
                padded.batch_into(s, r, &mut ids);
                total += ids.len() as u64;
            }
            padded.batch_into(padded.steps(), r, &mut ids);
            assert!(ids.is_empty());
        }
        assert_eq!(total, n.div_ceil(p as u64) * p as u64);
    }

    /// With replica groups only this group's ranks ask an owner for its samples: the
    /// inversion keeps (and reserves room for) their requests alone, not every
    /// position of every owned id.
    #[test]
    fn an_owner_keeps_only_its_groups_requests() {
        let (n, ranks) = (64_000u64, 64usize);
        let e = Epoch::new(n, ranks, 5, 1, 100, true, false).unwrap();
        let owned = 0..8000;
        e.prepare_owned(owned.clone(), &|r| r < 8, &|r| r < 8 && r != 0, &|_| 1).unwrap();
        let inverse = e.inverse(&owned);
        let kept = inverse.requests.len();
        assert!((800..1200).contains(&kept), "{kept} requests of 8 asking ranks out of 64 for 8000 owned ids");
        assert!(inverse.requests.capacity() <= 2 * kept, "room for {} kept {kept}", inverse.requests.capacity());
        let mut ids = Vec::new();
        let asked: usize = (0..e.steps())
            .map(|step| {
                (0..8)
                    .map(|r| {
                        e.batch_into(step, r, &mut ids);
                        ids.iter().filter(|id| owned.contains(id)).count()
                    })
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(kept, asked, "every request of the asking ranks, and only those");
    }

    #[test]
    fn extend_at_matches_at() {
        for (n, shuffle) in [(1, true), (7, true), (1000, true), (1 << 18, true), (77, false)] {
            let p = Permutation::new(n, 3, 4, shuffle);
            let mut out = vec![u64::MAX];
            p.extend_at((0..n).rev(), &mut out);
            let expected: Vec<u64> = std::iter::once(u64::MAX).chain((0..n).rev().map(|i| p.at(i))).collect();
            assert_eq!(out, expected, "n = {n}");
        }
    }

    #[test]
    fn position_of_inverts_the_permutation() {
        for n in [1u64, 2, 5, 17, 1000, 4097] {
            for shuffle in [true, false] {
                let p = Permutation::new(n, 7, 1, shuffle);
                assert!((0..n).all(|i| p.position_of(p.at(i)) == i), "n = {n}");
            }
        }
    }

    /// Beyond 32-bit ids (N up to 2^40 is the target): the permutation stays a
    /// bijection into [0, N), and an owner's inversion (of a small range of a huge
    /// dataset) finds its ids in the batches.
    #[test]
    fn datasets_beyond_32_bit_ids() {
        let n = (1u64 << 40) - 3;
        let p = Permutation::new(n, 11, 2, true);
        for i in [0, 1, 1 << 31, (1 << 32) + 5, n / 2, n - 1] {
            let id = p.at(i);
            assert!(id < n);
            assert_eq!(p.position_of(id), i);
        }
        // 5 * 2^32 samples over 4096 ranks: an owner of 700,000 ids near the top, of
        // which the first 3 steps' 3 M samples hold about 100.
        let (n, ranks) = (5u64 << 32, 4096usize);
        let e = Epoch::new(n, ranks, 3, 0, 256, true, false).unwrap();
        let owned = n - 700_000..n;
        e.prepare_owned(owned.clone(), &|_| true, &|q| q != 17, &|_| 1).unwrap();
        let mut ids = Vec::new();
        let (mut found, mut requested) = (0u64, 0u64);
        // The first steps alone: the test only needs to see that what the inversion
        // lists is what the batches hold.
        for step in 0..3 {
            e.for_each_request(step, owned.clone(), |rank, id| {
                e.batch_into(step, rank, &mut ids);
                assert!(ids.contains(&id));
                found += 1;
            });
            requested += (0..ranks).map(|q| {
                e.batch_into(step, q, &mut ids);
                ids.iter().filter(|id| owned.contains(id)).count() as u64
            }).sum::<u64>();
        }
        assert!(found > 20, "{found} requests of the owner found");
        assert_eq!(found, requested);
    }

    /// A batch size far above a rank's share (u64::MAX is valid): one step, and the
    /// inversion's keys do not overflow (the fuzzer found that they did).
    #[test]
    fn batch_size_beyond_the_share() {
        let (n, p) = (189u64, 2usize);
        let e = Epoch::new(n, p, 5, 0, u64::MAX, true, false).unwrap();
        assert_eq!(e.steps(), 1);
        let owned = 0..163;
        e.prepare_owned(owned.clone(), &|_| true, &|q| q != 0, &|_| 1).unwrap();
        let mut by_rank = vec![Vec::new(); p];
        e.owned_in_batches(0, owned.clone(), &mut by_rank);
        let mut ids = Vec::new();
        for (q, got) in by_rank.iter().enumerate() {
            e.batch_into(0, q, &mut ids);
            let expected: Vec<u64> = ids.iter().copied().filter(|id| owned.contains(id)).collect();
            assert_eq!(got, &expected, "rank {q}");
        }
    }

    /// The inversion gives each owner exactly its ids of every rank's batch, in batch
    /// order, for padded and dropped tails, several owners and batch sizes.
    #[test]
    fn owned_in_batches_matches_the_batches() {
        for (n, p, batch, drop_last) in [(103u64, 4usize, 8u64, false), (103, 4, 8, true), (10, 3, 4, false), (2, 5, 1, false)] {
            let owners = [0..n / 3, n / 3..n / 2, n / 2..n];
            let len_of = |id: u64| id * 7 % 13 + 1;
            for (owner, owned) in owners.into_iter().enumerate() {
                let e = Epoch::new(n, p, 9, 2, batch, true, drop_last).unwrap();
                e.prepare_owned(owned.clone(), &|_| true, &|q| q != owner, &len_of).unwrap();
                let mut by_rank = vec![Vec::new(); p];
                let mut ids = Vec::new();
                for s in 0..e.steps() + 1 {
                    e.owned_in_batches(s, owned.clone(), &mut by_rank);
                    let mut served = 0;
                    for (q, got) in by_rank.iter().enumerate() {
                        e.batch_into(s, q, &mut ids);
                        let expected: Vec<u64> = ids.iter().copied().filter(|id| owned.contains(id)).collect();
                        assert_eq!(got, &expected, "n={n} p={p} b={batch} step {s} rank {q}");
                        if q != owner {
                            served += expected.iter().map(|&id| len_of(id)).sum::<u64>();
                        }
                    }
                    assert_eq!(e.served_bytes(s, owned.clone()), served, "n={n} p={p} b={batch} step {s}");
                }
            }
        }
    }

    /// With replica groups only the group's ranks ask an owner: the inversion then scans
    /// their positions instead of walking the owned ids. Both ways find the same
    /// positions and bytes, and the scan gives each asking rank its ids in batch order.
    #[test]
    fn scanning_the_asking_ranks_positions_equals_walking_the_owned_ids() {
        for (n, p, batch, drop_last) in [(1003u64, 8usize, 16u64, false), (1003, 8, 16, true), (97, 6, 5, false)] {
            let group = [2usize, 5];
            let asks = |q: usize| group.contains(&q);
            let len_of = |id: u64| id % 11 + 1;
            for owned in [0..n / 2, n / 2..n] {
                let serves = |q: usize| asks(q) && q != 5;
                let e = Epoch::new(n, p, 3, 1, batch, true, drop_last).unwrap();
                let (mut walked, mut scanned) = (Vec::new(), Vec::new());
                let (mut served_walking, mut served_scanning) = (vec![0; e.steps() as usize], vec![0; e.steps() as usize]);
                e.walk_owned_ids(&owned, &asks, &serves, &len_of, &mut walked, &mut served_walking).unwrap();
                e.scan_positions(&owned, &group, &serves, &len_of, &mut scanned, &mut served_scanning).unwrap();
                walked.sort_unstable();
                scanned.sort_unstable();
                assert!(!walked.is_empty());
                assert_eq!((walked, served_walking), (scanned, served_scanning), "n={n} p={p} b={batch}");
                // prepare_owned takes the scan here (2 ranks x per_rank < owned ids).
                assert!(group.len() as u64 * e.per_rank < owned.end - owned.start);
                e.prepare_owned(owned.clone(), &asks, &serves, &len_of).unwrap();
                let (mut by_rank, mut ids) = (vec![Vec::new(); p], Vec::new());
                for s in 0..e.steps() {
                    e.owned_in_batches(s, owned.clone(), &mut by_rank);
                    for (q, got) in by_rank.iter().enumerate() {
                        e.batch_into(s, q, &mut ids);
                        let expected: Vec<u64> = if asks(q) { ids.iter().copied().filter(|id| owned.contains(id)).collect() } else { Vec::new() };
                        assert_eq!(got, &expected, "n={n} p={p} b={batch} step {s} rank {q}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_owner_nobody_reads_through_an_engine_is_not_inverted() {
        let e = Epoch::new(1000, 2, 9, 0, 16, true, false).unwrap();
        e.prepare_owned(0..500, &|_| true, &|_| false, &|_| 1).unwrap();
        let mut by_rank = vec![Vec::new(); 2];
        e.owned_in_batches(0, 0..500, &mut by_rank);
        assert!(by_rank.iter().all(Vec::is_empty));
        assert_eq!(e.served_bytes(0, 0..500), 0);
    }

    #[test]
    fn refuses_batch_zero() {
        assert!(Epoch::new(10, 2, 0, 0, 0, true, false).is_err());
    }
}
