//! The global index: global id -> (owner rank, offset in the owner's window, length),
//! identical on every rank and answered without communication.
//!
//! It is the prefix sum of all sample lengths (8 bytes per sample of the whole dataset)
//! plus each rank's first id. Its memory is either this rank's own or, normally, one
//! array per node shared by the node's ranks (see `node_index`). A dataset whose
//! samples all have one length (agreed at registration) keeps no table at all: a
//! sample's place is arithmetic, which saves the memory (0.8 GB per node at 10^8
//! samples) and the cache miss per sample that a lookup in a large table costs.

use crate::mpi::SharedArray;

/// Where a sample lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub owner: usize,
    /// Byte offset in the owner's window.
    pub offset: u64,
    pub len: u64,
}

/// Where the prefix sums live.
#[derive(Debug)]
pub enum Starts {
    /// This rank's own copy.
    Private(Vec<u64>),
    /// One copy per node, in memory shared by the node's ranks.
    Node(SharedArray),
}

impl Starts {
    fn as_slice(&self) -> &[u64] {
        match self {
            Starts::Private(v) => v,
            Starts::Node(shared) => shared.as_slice(),
        }
    }
}

/// Global id -> location, identical on every rank.
#[derive(Debug)]
pub struct GlobalIndex {
    /// `first_id[r]` is rank r's first global id; `first_id[P]` is the number of samples.
    first_id: Vec<u64>,
    /// `shard_start[r] = starts[first_id[r]]`: where rank r's shard begins in the
    /// concatenation. P entries that stay in cache, where `starts[first_id[r]]` would
    /// be one more cache miss per sample in a large index.
    shard_start: Vec<u64>,
    /// Whether every sample of the job takes `uniform_len` bytes (then `starts` is
    /// empty). Plain fields rather than an enum over the table: optimised code may load
    /// a field of an enum's other variant before testing which variant it is, and
    /// valgrind reports the branch on those never-written bytes.
    uniform: bool,
    uniform_len: u64,
    /// `starts[g]` is sample g's position in the concatenation of all shards;
    /// `starts[N]` is the total size.
    starts: Starts,
}

/// Rank r's first global id at `[r]`, the number of samples last.
fn first_ids(per_rank: &[u64]) -> Vec<u64> {
    let mut first_id = Vec::with_capacity(per_rank.len() + 1);
    let mut next = 0;
    for &n in per_rank {
        first_id.push(next);
        next += n;
    }
    first_id.push(next);
    first_id
}

impl GlobalIndex {
    /// The index from each rank's sample count and the prefix sums of all lengths
    /// (`starts[0] = 0`, N + 1 entries).
    pub fn from_starts(per_rank: &[u64], starts: Starts) -> GlobalIndex {
        let first_id = first_ids(per_rank);
        assert_eq!(first_id[per_rank.len()] + 1, starts.as_slice().len() as u64, "per-rank counts must cover all samples");
        let shard_start = first_id[..per_rank.len()].iter().map(|&first| starts.as_slice()[first as usize]).collect();
        GlobalIndex { first_id, shard_start, uniform: false, uniform_len: 0, starts }
    }

    /// The index of a job whose samples all take `len` bytes.
    pub fn uniform(per_rank: &[u64], len: u64) -> GlobalIndex {
        let first_id = first_ids(per_rank);
        let shard_start = first_id[..per_rank.len()].iter().map(|&first| first * len).collect();
        GlobalIndex { first_id, shard_start, uniform: true, uniform_len: len, starts: Starts::Private(Vec::new()) }
    }

    /// The index from every sample's length (tests and the step-cost benchmark).
    pub fn from_lengths(lengths: &[u64], per_rank: &[u64]) -> GlobalIndex {
        let starts = std::iter::once(0).chain(lengths.iter().scan(0, |at, &len| {
            *at += len;
            Some(*at)
        }));
        GlobalIndex::from_starts(per_rank, Starts::Private(starts.collect()))
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

    #[inline]
    pub fn len_of(&self, id: u64) -> Option<u64> {
        if self.uniform {
            return (id < self.num_samples()).then_some(self.uniform_len);
        }
        let starts = self.starts.as_slice();
        let i = usize::try_from(id).ok().filter(|&i| i < starts.len() - 1)?;
        Some(starts[i + 1] - starts[i])
    }

    /// Ask the memory for `id`'s entry ahead of `len_of` or `locate` (a hint: no
    /// effect on results, nothing to ask for without a table).
    #[inline]
    pub fn prefetch(&self, id: u64) {
        if let Some(entry) = usize::try_from(id).ok().and_then(|i| self.starts.as_slice().get(i)) {
            crate::prefetch::lines(std::slice::from_ref(entry), 1);
        }
    }

    /// Owner rank of `id` (which must be in range).
    #[inline]
    fn owner_of(&self, id: u64) -> usize {
        // The last rank whose first id is <= id; empty ranks share their successor's
        // first id and are skipped by taking the last.
        self.first_id[..self.num_ranks()].partition_point(|&first| first <= id) - 1
    }

    #[inline]
    pub fn locate(&self, id: u64) -> Option<Location> {
        let len = self.len_of(id)?;
        Some(self.locate_in_range(id, len))
    }

    /// `locate` of an id already found in range, whose length `len` the caller knows
    /// (the batch plan has it from the output layout): no second range check.
    #[inline]
    pub fn locate_in_range(&self, id: u64, len: u64) -> Location {
        let owner = self.owner_of(id);
        let offset = if self.uniform {
            (id - self.first_id[owner]) * self.uniform_len
        } else {
            self.starts.as_slice()[id as usize] - self.shard_start[owner]
        };
        Location { owner, offset, len }
    }

    /// What the index keeps, for the registration's log line.
    pub fn describe(&self) -> String {
        match &self.starts {
            _ if self.uniform => format!("no index table (every sample takes {} bytes)", self.uniform_len),
            Starts::Node(_) => "an index table of 8 bytes per sample, one per node".into(),
            Starts::Private(_) => "an index table of 8 bytes per sample on each rank".into(),
        }
    }

    /// The prefix sums' memory, to free a node-shared copy (collective over the node);
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
        assert!(matches!(uniform.into_starts(), Starts::Private(v) if v.is_empty()));
    }

    #[test]
    fn empty_everywhere() {
        let index = GlobalIndex::from_lengths(&[], &[0, 0]);
        assert_eq!(index.num_samples(), 0);
        assert_eq!(index.locate(0), None);
    }
}
