//! The index's compact form: where every sample starts in the concatenation of all
//! shards, in one 64-byte line per `per_line` consecutive samples.
//!
//! A line is eight `u64` words. Word 0 holds the absolute start of the line's first
//! sample (its base), rotated right by `width` bits; the other 448 bits hold the next
//! `per_line - 1` samples' starts, each as its low `width` bits. The rotation puts the
//! base's own low bits at the top of word 0, just before slot 1's entry, so that slot 0
//! has an entry like every other slot and a lookup decodes every slot alike, with no
//! branch on the slot. A start is recovered from its base: the distance from
//! the base is below 2^width (no sample is longer than the job's longest, `longest`,
//! so `(per_line - 1) * longest < 2^width`), hence `start = base + ((entry - base) mod
//! 2^width)`. Entries are those low bits rather than the distance itself so that each
//! rank can write its own samples' entries knowing only where its shard starts, not
//! where a line that began in another rank's shard starts.
//!
//! Why this shape: a lookup reads one cache line (base and entry together; a sample's
//! end is the next entry, or for a line's last sample the next line's base), as the
//! plain prefix sums did, while a sample takes `64 / per_line` bytes instead of 8.
//! `per_line` is the most samples whose entries fit in 448 bits, so the width follows
//! the longest sample, agreed by every rank at registration: 65 samples a line (0.98
//! bytes each) for 1-byte samples, 22 (2.91 bytes) up to 99,864 bytes (64 KiB and
//! more), 18 (3.6 bytes) up to 1 MiB, 15 (4.3 bytes) up to 292 MiB. Entries are at
//! most 32 bits wide, so that a sample's two (start and end) are read at once, or else
//! 64: longer samples take 8 bytes each (8 a line), the old size, and never more for
//! any sample a process can hold.
//! The start of sample N (one past the last) is stored too: the last sample's end.

use crate::error::{Error, Result};

/// Words in a line: one 64-byte cache line.
pub(super) const LINE_WORDS: usize = 8;
/// A line of the index.
pub type Line = [u64; LINE_WORDS];
/// Bits a line has for entries (all but the base word).
const ENTRY_BITS: u64 = (LINE_WORDS as u64 - 1) * 64;
/// The largest sample count the exact division below serves (2^62: no memory holds
/// an index that large anyway).
const MAX_SAMPLES: u64 = 1 << 62;

/// How the starts are packed, from the job's sample count and longest sample (agreed
/// facts: every rank computes the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packing {
    per_line: u64,
    width: u32,
    /// Where slot 0's entry begins: the top `width` bits of word 0.
    first_bit: u64,
    mask: u64,
    lines: usize,
    line_of: Divisor,
}

impl Packing {
    /// The packing of `samples` samples none longer than `longest` bytes.
    pub fn new(samples: u64, longest: u64) -> Result<Packing> {
        let too_many = || Error::invalid(format!("the shards hold {samples} samples, too many for an index in memory"));
        if samples >= MAX_SAMPLES {
            return Err(too_many());
        }
        let (per_line, width) = densest_line(longest);
        let lines = (samples + 1).div_ceil(per_line);
        let fits = lines.checked_mul(LINE_WORDS as u64 * 8).is_some_and(|bytes| bytes <= isize::MAX as u64);
        if !fits {
            return Err(too_many());
        }
        let mask = u64::MAX >> (64 - width);
        let first_bit = 64 - width as u64;
        Ok(Packing { per_line, width, first_bit, mask, lines: lines as usize, line_of: Divisor::new(per_line) })
    }

    /// Words of the whole index.
    pub fn words(&self) -> usize {
        self.lines * LINE_WORDS
    }

    /// Bytes of the whole index.
    pub fn bytes(&self) -> u64 {
        self.words() as u64 * 8
    }

    pub fn per_line(&self) -> u64 {
        self.per_line
    }

    /// The line holding `id`'s start and the start's place in it.
    #[inline]
    fn place(&self, id: u64) -> (usize, u64) {
        let line = self.line_of.quotient(id);
        (line as usize, id - line * self.per_line)
    }

    /// Where the entry of a line's `slot`-th sample begins, in bits from the line's
    /// (slot 0's: the top bits of the rotated base).
    #[inline]
    fn entry_bit(&self, slot: u64) -> u64 {
        self.first_bit + slot * self.width as u64
    }

    /// A line's base, from its word 0.
    #[inline]
    fn base(&self, line: &Line) -> u64 {
        line[0].rotate_left(self.width)
    }

    /// The entries of a line's `slot`-th sample and the next (garbage after the line's
    /// last), in their low bits: two neighbouring
    /// entries of at most 32 bits in one 64-bit read (word indices masked to the line:
    /// no bounds checks), or two whole words.
    #[inline(always)]
    fn entries(&self, line: &Line, slot: u64) -> (u64, u64) {
        if self.width > 32 {
            return (line[slot as usize % LINE_WORDS], line[(slot as usize + 1) % LINE_WORDS]);
        }
        let bit = self.entry_bit(slot);
        let (word, shift) = (bit as usize / 64, bit % 64);
        // The next word's bits above `64 - shift` (none for shift 0: two shifts, as a
        // shift by 64 is not one).
        let pair = line[word % LINE_WORDS] >> shift | (line[(word + 1) % LINE_WORDS] << 1) << (63 - shift);
        (pair, pair >> self.width)
    }

    /// The start whose low bits are `low`, from the line's base.
    #[inline]
    fn near(&self, base: u64, low: u64) -> u64 {
        base + (low.wrapping_sub(base) & self.mask)
    }

    /// Where sample `id` (<= the sample count: N's start is the end of the last) starts,
    /// in the index's `lines`. Its end is not read: for id N in a line's last slot it
    /// would be in a line that does not exist (trailing empty ranks begin at N).
    #[inline]
    pub fn start(&self, lines: &[Line], id: u64) -> u64 {
        let (line, slot) = self.place(id);
        let here = &lines[line];
        self.near(self.base(here), self.entries(here, slot).0)
    }

    /// Where sample `id` (< the sample count) starts and ends: both entries read at
    /// once, the end from the next line's base after a line's last sample.
    #[inline(always)]
    pub fn bounds(&self, lines: &[Line], id: u64) -> (u64, u64) {
        let (line, slot) = self.place(id);
        let here = &lines[line];
        let base = self.base(here);
        let (start_low, end_low) = self.entries(here, slot);
        let start = self.near(base, start_low);
        let end = if slot + 1 < self.per_line { self.near(base, end_low) } else { self.base(&lines[line + 1]) };
        (start, end)
    }

    /// The line holding `id`'s start (to ask the memory for it).
    #[inline]
    pub fn line_of(&self, id: u64) -> usize {
        self.place(id).0
    }

    /// The words holding the starts of samples `ids` (not empty): a rank's part of the
    /// index. Neighbouring ranks' parts may share a word at their border.
    pub fn words_of(&self, ids: std::ops::Range<u64>) -> std::ops::Range<usize> {
        let first = self.slot_bits(ids.start).start / 64;
        let last = (self.slot_bits(ids.end - 1).end - 1) / 64;
        first as usize..last as usize + 1
    }

    /// The bits of `id`'s start in the whole index.
    fn slot_bits(&self, id: u64) -> std::ops::Range<u64> {
        let (line, slot) = self.place(id);
        let at = line as u64 * LINE_WORDS as u64 * 64;
        match slot {
            0 => at..at + 64,
            _ => at + self.entry_bit(slot)..at + self.entry_bit(slot) + self.width as u64,
        }
    }

    /// Write the starts of samples `first_id, first_id + 1, ...` (`starts`, absolute)
    /// by OR-ing their bits into the index's words through `or_into(word, bits)`, each
    /// word at most once a call, in order. The words must be zero where these starts go:
    /// ranks write their own samples into one zeroed copy, or into copies that are
    /// OR-ed together later.
    pub fn encode(&self, first_id: u64, starts: impl IntoIterator<Item = u64>, mut or_into: impl FnMut(usize, u64)) {
        let mut pending: Option<(usize, u64)> = None;
        let mut add = |word: usize, bits: u64| match pending {
            Some((at, ref mut held)) if at == word => *held |= bits,
            _ => {
                if let Some((at, held)) = pending.replace((word, bits)) {
                    or_into(at, held);
                }
            }
        };
        for (id, start) in (first_id..).zip(starts) {
            let (line, slot) = self.place(id);
            let line_word = line * LINE_WORDS;
            if slot == 0 {
                add(line_word, start.rotate_right(self.width));
                continue;
            }
            let bit = self.entry_bit(slot) as usize;
            let bits = ((start & self.mask) as u128) << (bit % 64);
            add(line_word + bit / 64, bits as u64);
            if bits >> 64 != 0 {
                add(line_word + bit / 64 + 1, (bits >> 64) as u64);
            }
        }
        if let Some((at, held)) = pending {
            or_into(at, held);
        }
    }
}

/// Bits to write `value`, at least one.
fn bits_of(value: u128) -> u32 {
    (128 - value.leading_zeros()).max(1)
}

/// Entry widths a lookup reads: two neighbouring entries fit in 128 bits from any bit
/// (up to 32 bits each), or one 64-bit entry on a word boundary.
fn readable(width: u32) -> Option<u32> {
    match width {
        0..=32 => Some(width),
        33..=64 => Some(64),
        _ => None,
    }
}

/// The most samples a line holds for samples of at most `longest` bytes, and the width
/// of their entries: the largest count whose `count - 1` entries, each wide enough for
/// `(count - 1) * longest`, fit in the line.
fn densest_line(longest: u64) -> (u64, u32) {
    let fitting = (2..=ENTRY_BITS + 1).map_while(|count| Some((count, readable(bits_of((count as u128 - 1) * longest as u128))?)));
    fitting
        .take_while(|&(count, width)| (count - 1) * width as u64 <= ENTRY_BITS)
        .last()
        .expect("two samples a line always fit: one 64-bit entry")
}

/// Division by a constant as a multiplication and a shift, exact for dividends below
/// `MAX_SAMPLES` (Granlund and Montgomery's rounded-up reciprocal): a lookup's line is
/// `id / per_line`, and a hardware division takes 20-90 cycles on the x86 cores this
/// library runs on, more than the rest of the lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Divisor {
    magic: u64,
    /// The shift beyond 64.
    shift: u32,
}

impl Divisor {
    /// With `shift = max(62 + ceil(log2 d), 64)` and `magic = ceil(2^shift / d) =
    /// (2^shift + e) / d` (e < d), `x * magic / 2^shift = x / d + x e / (d 2^shift)`,
    /// whose second term is below `2^(62 - shift)` <= 1/d for x < 2^62: too little to
    /// carry `x / d` past the next integer, so the floor is exact. `magic` <= 2^63 fits
    /// a u64, and a shift of 64 or more is the product's high word shifted.
    fn new(divisor: u64) -> Divisor {
        assert!(divisor >= 1);
        let shift = (62 + (64 - (divisor - 1).leading_zeros())).max(64);
        let magic = (1u128 << shift).div_ceil(divisor as u128);
        Divisor { magic: u64::try_from(magic).expect("magic < 2^64"), shift: shift - 64 }
    }

    #[inline]
    fn quotient(&self, x: u64) -> u64 {
        ((x as u128 * self.magic as u128) >> 64) as u64 >> self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed index with `lengths`' starts, and those starts (N + 1 of them).
    fn packed(lengths: &[u64]) -> (Packing, Vec<u64>, Vec<u64>) {
        let mut starts = vec![0];
        for &len in lengths {
            starts.push(starts[starts.len() - 1] + len);
        }
        let packing = Packing::new(lengths.len() as u64, lengths.iter().copied().max().unwrap_or(0)).unwrap();
        let mut words = vec![0u64; packing.words()];
        packing.encode(0, starts.iter().copied(), |w, bits| words[w] |= bits);
        (packing, words, starts)
    }

    fn lines(words: &[u64]) -> &[Line] {
        words.as_chunks().0
    }

    fn check(lengths: &[u64]) {
        let (packing, words, starts) = packed(lengths);
        for (id, &len) in lengths.iter().enumerate() {
            let id64 = id as u64;
            assert_eq!(packing.start(lines(&words), id64), starts[id], "start of {id} of {}", lengths.len());
            assert_eq!(packing.bounds(lines(&words), id64), (starts[id], starts[id] + len), "bounds of {id}");
        }
    }

    /// Lengths drawn between `low` and `high`, with the longest at `high` somewhere.
    fn lengths(n: usize, low: u64, high: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (0..n as u64).map(|i| low + (i * 2_654_435_761 + 12345) % (high - low + 1)).collect();
        if let Some(last) = v.get_mut(n / 2) {
            *last = high;
        }
        v
    }

    #[test]
    fn the_line_follows_the_longest_sample() {
        assert_eq!(densest_line(1), (65, 7));
        assert_eq!(densest_line(4), (57, 8));
        assert_eq!(densest_line(65535), (22, 21));
        assert_eq!(densest_line(65536), (22, 21));
        assert_eq!(densest_line(1 << 20), (18, 25));
        assert_eq!(densest_line(u64::MAX), (2, 64));
        // At most 3 bytes a sample up to 64 KiB.
        for longest in [1, 255, 256, 4096, 65535, 65536] {
            assert!(64.0 / densest_line(longest).0 as f64 <= 3.0, "{longest}");
        }
        // 22 a line (2.91 bytes) while 21 entries of 21 bits hold 21 x longest.
        assert_eq!(densest_line(99_864), (22, 21));
        assert_eq!(densest_line(99_865), (21, 21));
        // Entries of 33-64 bits are read as 64, where that packs more.
        assert_eq!(densest_line(306_783_378), (15, 32));
        assert_eq!(densest_line(400_000_000), (11, 32));
        assert_eq!(densest_line(1 << 30), (8, 64));
    }

    #[test]
    fn every_width_round_trips() {
        // Longest 1 .. 2^40: widths 7 .. 44, each width and line size the layout takes.
        for shift in 0..=40 {
            let high = 1u64 << shift;
            check(&lengths(300, 0, high));
            check(&lengths(301, high.saturating_sub(3), high));
        }
    }

    #[test]
    fn the_widest_entries_round_trip() {
        // Lengths so long that entries take 64 bits (never in memory, but in range).
        let lengths = [u64::MAX / 4, 3, u64::MAX / 4, 0, 5];
        let (packing, _, _) = packed(&lengths);
        assert_eq!(packing.width, 64);
        check(&lengths);
    }

    #[test]
    fn lines_end_where_they_should() {
        // 1-byte samples: 65 a line. Block boundaries, the last sample, N + 1 a multiple.
        for n in [1, 2, 63, 64, 65, 66, 129, 130, 131] {
            check(&lengths(n, 0, 1));
        }
        let (packing, _, _) = packed(&[1; 64]);
        assert_eq!(packing.words(), LINE_WORDS, "64 samples and the end fill one line");
        let (packing, _, _) = packed(&[1; 65]);
        assert_eq!(packing.words(), 2 * LINE_WORDS);
    }

    #[test]
    fn the_64_kib_edge() {
        let mut edge = vec![65536; 50];
        edge[7] = 0;
        check(&edge);
        check(&lengths(500, 65535, 65536));
        let n = 1_000_000_000;
        assert!(Packing::new(n, 65536).unwrap().bytes() as f64 / n as f64 <= 3.0);
    }

    #[test]
    fn zero_lengths_and_tiny_jobs() {
        check(&[0]);
        check(&[5]);
        check(&[0, 0, 0, 1]);
        check(&[0; 100]);
        let (packing, words, _) = packed(&[]);
        assert_eq!((packing.words(), words), (LINE_WORDS, vec![0; LINE_WORDS]));
    }

    #[test]
    fn ranks_written_apart_meet_in_one_index() {
        // Three "ranks" (one empty) encode into separate zeroed copies, OR-ed together,
        // as the leaders' exchange does; their words overlap only at borders.
        let lens = lengths(200, 0, 9000);
        let (packing, whole, starts) = packed(&lens);
        let mut merged = vec![0u64; packing.words()];
        for ids in [0..37u64, 37..37, 37..200, 200..201] {
            let mut copy = vec![0u64; packing.words()];
            let mut written = Vec::new();
            packing.encode(ids.start, starts[ids.start as usize..ids.end as usize].iter().copied(), |w, b| {
                written.push(w);
                copy[w] |= b;
            });
            if !ids.is_empty() {
                let range = packing.words_of(ids.clone());
                assert!(written.iter().all(|w| range.contains(w)), "{ids:?} wrote outside {range:?}");
                assert!(written.windows(2).all(|p| p[0] < p[1]), "each word once, in order");
            }
            merged.iter_mut().zip(&copy).for_each(|(m, c)| *m |= c);
        }
        assert_eq!(merged, whole);
    }

    #[test]
    fn the_division_is_exact() {
        for d in 2..=ENTRY_BITS + 1 {
            let div = Divisor::new(d);
            for x in (0..5000).chain([MAX_SAMPLES - 1, MAX_SAMPLES - d, MAX_SAMPLES / 2 + 1]) {
                assert_eq!(div.quotient(x), x / d, "{x} / {d}");
            }
            for k in 1..2000u64 {
                let x = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % MAX_SAMPLES;
                assert_eq!(div.quotient(x), x / d, "{x} / {d}");
                let near = (x / d) * d;
                assert_eq!(div.quotient(near.saturating_sub(1)), near.saturating_sub(1) / d);
            }
        }
    }

    #[test]
    fn too_many_samples_are_refused() {
        assert!(Packing::new(MAX_SAMPLES, 1).is_err());
        assert!(Packing::new(1 << 40, 1).is_ok());
    }
}
