//! Which rank owns a global id: ranks own consecutive ids, rank r from `first_id[r]`.
//!
//! A binary search over the P first ids costs log2(P) dependent steps per sample (about
//! 55 instructions at P = 32, twice that at P = 2048), more than the rest of a sample's
//! lookup. Instead the ids are cut into at most 2P buckets of 2^shift ids, and the owner
//! of every bucket's first id is kept (4 bytes a bucket, 16 KiB at P = 2048): where the
//! bucket holds one rank's ids only, which is nearly every bucket when shards are of
//! similar size, the owner is one shift and two loads away; otherwise a binary search
//! over the few ranks the bucket spans.

/// Rank r's first global id and the owner of every bucket of ids.
#[derive(Debug)]
pub struct Owners {
    /// `first_id[r]` is rank r's first global id; `first_id[P]` is the number of samples.
    first_id: Vec<u64>,
    /// log2 of the ids in a bucket.
    shift: u32,
    /// `bucket_owner[b]` owns id `b << shift` (ids past the last: the last rank); one
    /// more than there are buckets, so that a bucket's last owner is its successor's first.
    bucket_owner: Vec<u32>,
}

impl Owners {
    /// The owners of the ids when rank r holds `per_rank[r]` samples.
    pub fn new(per_rank: &[u64]) -> Owners {
        assert!(!per_rank.is_empty() && per_rank.len() <= u32::MAX as usize, "1 .. 2^32 ranks");
        let mut first_id = Vec::with_capacity(per_rank.len() + 1);
        let mut next = 0;
        for &n in per_rank {
            first_id.push(next);
            next += n;
        }
        first_id.push(next);
        let max_buckets = 2 * per_rank.len() as u64;
        let shift = (0..64).find(|&s| next.div_ceil(1 << s) <= max_buckets).expect("2^63 ids a bucket are one bucket");
        let mut owners = Owners { first_id, shift, bucket_owner: Vec::new() };
        let buckets = next.div_ceil(1 << shift);
        owners.bucket_owner = (0..=buckets).map(|b| owners.searched_owner(b << shift) as u32).collect();
        owners
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

    /// Owner rank of `id`, which must be below the number of samples.
    #[inline]
    pub fn owner_of(&self, id: u64) -> usize {
        let bucket = (id >> self.shift) as usize;
        let (low, high) = (self.bucket_owner[bucket] as usize, self.bucket_owner[bucket + 1] as usize);
        if low == high {
            return low;
        }
        // Ranks low + 1 ..= high begin in this bucket; those beginning at or before id
        // come after low.
        low + self.first_id[low + 1..=high].partition_point(|&first| first <= id)
    }

    /// The last rank whose first id is <= id: empty ranks share their successor's first
    /// id and are skipped by taking the last.
    fn searched_owner(&self, id: u64) -> usize {
        self.first_id[..self.num_ranks()].partition_point(|&first| first <= id) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(per_rank: &[u64]) {
        let owners = Owners::new(per_rank);
        let mut id = 0;
        for (rank, &n) in per_rank.iter().enumerate() {
            for _ in 0..n {
                assert_eq!(owners.owner_of(id), rank, "id {id} of {per_rank:?}");
                id += 1;
            }
        }
        assert_eq!(owners.num_samples(), id);
        assert!(owners.bucket_owner.len() as u64 <= 2 * per_rank.len() as u64 + 1, "at most 2P buckets");
    }

    #[test]
    fn even_shards_uneven_shards_and_empty_ranks() {
        check(&[10; 7]);
        check(&[1000, 1000, 999, 999]);
        check(&[0, 0, 5, 0, 3, 0]);
        check(&[1, 0, 0, 0, 0, 0, 0, 1000]);
        check(&[1000, 1, 1, 1, 1, 1, 1, 1]);
        check(&[0]);
        check(&[0, 0]);
        check(&[1]);
        check(&[3, 0]);
        let irregular: Vec<u64> = (0..300u64).map(|r| (r * 2_654_435_761) % 97).collect();
        check(&irregular);
    }

    #[test]
    fn buckets_of_one_rank_answer_without_a_search() {
        let owners = Owners::new(&[1 << 20; 4]);
        assert!(owners.bucket_owner.windows(2).filter(|w| w[0] != w[1]).count() <= 3);
        assert_eq!(owners.owner_of((1 << 22) - 1), 3);
    }
}
