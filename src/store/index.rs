//! The global index: global id -> (owner rank, offset in the owner's window, length),
//! identical on every rank and answered without communication.
//!
//! It is where every sample starts in the concatenation of all shards, packed (see
//! `packed`: one 64-byte line per 22-65 samples, 1-3 bytes a sample for samples up to
//! 64 KiB), plus each rank's first id. Its memory is either this rank's own or,
//! normally, one array per node shared by the node's ranks (see `node_index`). A
//! dataset whose samples all have one length (agreed at registration) keeps no table
//! at all: a sample's place is arithmetic, which saves the memory and the cache miss
//! per sample that a lookup in a large table costs.

use super::owners::Owners;
use super::packed::{LINE_WORDS, Line, Packing};
use crate::error::Result;
use crate::memory;
use crate::mpi::SharedArray;

/// Where a sample lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub owner: usize,
    /// Byte offset in the owner's window.
    pub offset: u64,
    pub len: u64,
}

/// Where the packed starts live.
#[derive(Debug)]
pub enum Starts {
    /// This rank's own copy.
    Private(PrivateWords),
    /// One copy per node, in memory shared by the node's ranks.
    Node(SharedArray),
}

impl Starts {
    fn as_slice(&self) -> &[u64] {
        match self {
            Starts::Private(words) => words.as_slice(),
            Starts::Node(shared) => shared.as_slice(),
        }
    }

    #[inline]
    fn lines(&self) -> &[Line] {
        self.as_slice().as_chunks().0
    }
}

/// A rank's own zeroed words, starting at a cache line so that a packed line is one
/// cache miss (a `Vec<u64>` is only 8-byte aligned).
#[derive(Debug, Default)]
pub struct PrivateWords {
    storage: Vec<u64>,
    skip: usize,
    len: usize,
}

impl PrivateWords {
    pub fn zeroed(len: usize) -> Result<PrivateWords> {
        let storage = memory::filled(len as u64 + LINE_WORDS as u64 - 1, 0u64)?;
        let words_into_line = (storage.as_ptr() as usize / 8) % LINE_WORDS;
        let skip = (LINE_WORDS - words_into_line) % LINE_WORDS;
        Ok(PrivateWords { storage, skip, len })
    }

    pub fn as_slice(&self) -> &[u64] {
        &self.storage[self.skip..self.skip + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u64] {
        &mut self.storage[self.skip..self.skip + self.len]
    }
}

/// Global id -> location, identical on every rank.
#[derive(Debug)]
pub struct GlobalIndex {
    /// Each rank's first global id, and which rank owns an id.
    owners: Owners,
    /// Where rank r's shard begins in the concatenation. P entries that stay in cache,
    /// where the start of its first sample would be one more cache miss per sample in
    /// a large index.
    shard_start: Vec<u64>,
    /// Whether every sample of the job takes `uniform_len` bytes (then `starts` is
    /// empty). Plain fields rather than an enum over the table: optimised code may load
    /// a field of an enum's other variant before testing which variant it is, and
    /// valgrind reports the branch on those never-written bytes.
    uniform: bool,
    uniform_len: u64,
    /// How `starts` packs the starts of samples 0..=N (N's: the total size).
    packing: Packing,
    starts: Starts,
}

/// [`GlobalIndex::table`]: what a lookup reads, copied out of the index once.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    samples: u64,
    uniform: bool,
    uniform_len: u64,
    packing: Packing,
    lines: &'a [Line],
}

impl Table<'_> {
    /// See [`GlobalIndex::span_of`].
    #[inline(always)]
    pub fn span_of(&self, id: u64) -> Option<(u64, u64)> {
        if id >= self.samples {
            return None;
        }
        if self.uniform {
            return Some((id * self.uniform_len, self.uniform_len));
        }
        let (start, end) = self.packing.bounds(self.lines, id);
        Some((start, end - start))
    }

    /// See [`GlobalIndex::prefetch`].
    #[inline(always)]
    pub fn prefetch(&self, id: u64) {
        if self.uniform || id >= self.samples {
            return;
        }
        crate::prefetch::lines(std::slice::from_ref(&self.lines[self.packing.line_of(id)]), 1);
    }
}

impl GlobalIndex {
    /// The index from each rank's sample count and the packed starts of every sample
    /// and of the end (`packing`'s layout).
    pub fn from_starts(per_rank: &[u64], packing: Packing, starts: Starts) -> GlobalIndex {
        let owners = Owners::new(per_rank);
        assert_eq!(packing.words(), starts.as_slice().len(), "the starts must be packed as `packing` says");
        let shard_start = owners.first_ids()[..per_rank.len()].iter().map(|&first| packing.start(starts.lines(), first)).collect();
        GlobalIndex { owners, shard_start, uniform: false, uniform_len: 0, packing, starts }
    }

    /// The index of a job whose samples all take `len` bytes.
    pub fn uniform(per_rank: &[u64], len: u64) -> GlobalIndex {
        let owners = Owners::new(per_rank);
        let shard_start = owners.first_ids()[..per_rank.len()].iter().map(|&first| first * len).collect();
        // No table: the packing of no sample, never read.
        let packing = Packing::new(0, 0).expect("an empty index fits");
        GlobalIndex { owners, shard_start, uniform: true, uniform_len: len, packing, starts: Starts::Private(PrivateWords::default()) }
    }

    /// The index from every sample's length (tests and the step-cost benchmark).
    pub fn from_lengths(lengths: &[u64], per_rank: &[u64]) -> GlobalIndex {
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let packing = Packing::new(lengths.len() as u64, longest).expect("an index of these lengths fits");
        let mut words = PrivateWords::zeroed(packing.words()).expect("memory for the index");
        let starts = std::iter::once(0).chain(lengths.iter().scan(0, |at, &len| {
            *at += len;
            Some(*at)
        }));
        let slice = words.as_mut_slice();
        packing.encode(0, starts, |word, bits| slice[word] |= bits);
        GlobalIndex::from_starts(per_rank, packing, Starts::Private(words))
    }

    /// Rank r's first global id is `first_ids()[r]`; the last entry is the total.
    pub fn first_ids(&self) -> &[u64] {
        self.owners.first_ids()
    }

    pub fn num_samples(&self) -> u64 {
        self.owners.num_samples()
    }

    pub fn num_ranks(&self) -> usize {
        self.owners.num_ranks()
    }

    /// The table seen once for many lookups (a batch plan's): where it lives and how it
    /// is packed are then read once, not again for every sample.
    #[inline]
    pub fn table(&self) -> Table<'_> {
        Table {
            samples: self.num_samples(),
            uniform: self.uniform,
            uniform_len: self.uniform_len,
            packing: self.packing,
            lines: self.starts.lines(),
        }
    }

    /// Where sample `id` starts in the concatenation of all shards, and its length
    /// (None out of range).
    #[inline]
    pub fn span_of(&self, id: u64) -> Option<(u64, u64)> {
        self.table().span_of(id)
    }

    #[inline]
    pub fn len_of(&self, id: u64) -> Option<u64> {
        self.span_of(id).map(|(_, len)| len)
    }

    /// Ask the memory for `id`'s entry ahead of `len_of` or `locate` (a hint: no
    /// effect on results, nothing to ask for without a table).
    #[inline]
    pub fn prefetch(&self, id: u64) {
        self.table().prefetch(id)
    }

    #[inline]
    pub fn locate(&self, id: u64) -> Option<Location> {
        let (start, len) = self.span_of(id)?;
        Some(self.locate_at(id, start, len))
    }

    /// `locate` of an id whose `span_of` the caller has already (the batch plan reads
    /// it while it lays out the output): no second lookup in the table.
    #[inline]
    pub fn locate_at(&self, id: u64, start: u64, len: u64) -> Location {
        let owner = self.owners.owner_of(id);
        Location { owner, offset: start - self.shard_start[owner], len }
    }

    /// What the index keeps, for the registration's log line.
    pub fn describe(&self) -> String {
        let packed = format!(
            "an index table of {:.2} bytes per sample ({} samples a 64-byte line)",
            64.0 / self.packing.per_line() as f64,
            self.packing.per_line()
        );
        match &self.starts {
            _ if self.uniform => format!("no index table (every sample takes {} bytes)", self.uniform_len),
            Starts::Node(_) => format!("{packed}, one per node"),
            Starts::Private(_) => format!("{packed} on each rank"),
        }
    }

    /// The table's memory, to free a node-shared copy (collective over the node);
    /// an empty private one for a uniform index.
    pub fn into_starts(self) -> Starts {
        self.starts
    }
}


#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_uniform_index_locates_as_the_table_does() {
        let per_rank = [3, 0, 2, 4];
        let table = GlobalIndex::from_lengths(&[7; 9], &per_rank);
        let uniform = GlobalIndex::uniform(&per_rank, 7);
        for id in 0..11 {
            assert_eq!(uniform.locate(id), table.locate(id), "id {id}");
            assert_eq!(uniform.len_of(id), table.len_of(id), "id {id}");
        }
        assert!(matches!(uniform.into_starts(), Starts::Private(w) if w.as_slice().is_empty()));
    }

    /// Every id's location as the plain prefix sums give it.
    fn expected(lengths: &[u64], per_rank: &[u64]) -> Vec<Location> {
        let mut out = Vec::new();
        let mut ids = lengths.iter();
        for (owner, &n) in per_rank.iter().enumerate() {
            let mut offset = 0;
            for &len in ids.by_ref().take(n as usize) {
                out.push(Location { owner, offset, len });
                offset += len;
            }
        }
        out
    }

    fn check(lengths: &[u64], per_rank: &[u64]) {
        let index = GlobalIndex::from_lengths(lengths, per_rank);
        for (id, want) in expected(lengths, per_rank).into_iter().enumerate() {
            index.prefetch(id as u64);
            assert_eq!(index.locate(id as u64), Some(want), "id {id}");
            assert_eq!(index.len_of(id as u64), Some(want.len), "id {id}");
        }
        let n = lengths.len() as u64;
        index.prefetch(n);
        assert_eq!((index.locate(n), index.len_of(n)), (None, None));
    }

    #[test]
    fn packed_lines_locate_across_ranks() {
        // Ranks that begin and end mid-line, on a line's first sample and its last,
        // empty ranks between; lengths 0..=64 KiB (22 samples a line) and 0..=1.
        for longest in [1u64, 300, 65536] {
            let lengths: Vec<u64> = (0..500u64).map(|i| (i * 2_654_435_761) % (longest + 1)).collect();
            for per_rank in [vec![500], vec![21, 1, 0, 22, 65, 0, 391], vec![0, 0, 500], vec![499, 1], vec![22, 22, 456]] {
                check(&lengths, &per_rank);
            }
        }
    }

    #[test]
    fn trailing_empty_ranks_when_the_end_is_a_lines_last_slot() {
        // Empty ranks begin at N; with N = per_line - 1 (mod per_line) the start of N sits
        // in a line's last slot, whose end would be in a line that does not exist.
        check(&[1; 64], &[64, 0]);
        check(&[1; 64], &[30, 34, 0, 0]);
        let lengths: Vec<u64> = (0..87u64).map(|i| (i * 2_654_435_761) % 50_001).collect();
        check(&lengths, &[28, 29, 30, 0]);
        check(&lengths, &[0, 87, 0]);
    }

    #[test]
    fn one_sample_and_zero_lengths() {
        check(&[65536], &[1]);
        check(&[0], &[0, 1]);
        check(&[0, 0, 7, 0], &[2, 0, 2]);
        assert!(GlobalIndex::from_lengths(&[0, 1], &[2]).describe().contains("65 samples a 64-byte line"));
    }

    #[test]
    fn empty_everywhere() {
        let index = GlobalIndex::from_lengths(&[], &[0, 0]);
        assert_eq!(index.num_samples(), 0);
        assert_eq!(index.locate(0), None);
    }
}
