//! Fallible allocation: every allocation whose size comes from a caller's argument or
//! from the job's figures (shards, batches, plans, exchange buffers, the agreement's
//! buffers) goes through here, so that running out of memory is `MDL_ERR_NO_MEMORY`,
//! which the caller can agree with the other ranks, instead of an abort of the job.
//!
//! Built with the `test-hooks` feature (tests only), the k-th allocation made here
//! fails on a process started with `MDL_FAULT_ALLOC_AT=k`: the fault tests
//! (`tests/run_fault_tests.sh`) walk k along a job and report each failure that does
//! not end as an error on every rank (a hang, a rank left waiting in a collective).

use crate::error::{Error, Result};

/// Room for `additional` more elements (exactly), or `MDL_ERR_NO_MEMORY`.
pub fn reserve_exact<T>(v: &mut Vec<T>, additional: usize) -> Result<()> {
    grow(v, additional, Vec::try_reserve_exact)
}

/// Room for `additional` more elements (the vector may round up), or `MDL_ERR_NO_MEMORY`.
pub fn reserve<T>(v: &mut Vec<T>, additional: usize) -> Result<()> {
    grow(v, additional, Vec::try_reserve)
}

type TryReserve<T> = fn(&mut Vec<T>, usize) -> std::result::Result<(), std::collections::TryReserveError>;

/// `try_reserve` where the vector must grow (only a real allocation can fail, or be
/// made to fail by fault injection).
fn grow<T>(v: &mut Vec<T>, additional: usize, try_reserve: TryReserve<T>) -> Result<()> {
    if v.capacity() - v.len() >= additional {
        return Ok(());
    }
    refuse_if_injected(additional, size_of::<T>())?;
    try_reserve(v, additional).map_err(|_| no_memory(additional, size_of::<T>()))
}

/// An empty vector with room for `len` elements.
pub fn with_room<T>(len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    reserve_exact(&mut v, len)?;
    Ok(v)
}

/// `len` copies of `value`.
pub fn filled<T: Clone>(len: u64, value: T) -> Result<Vec<T>> {
    let len = usize::try_from(len).map_err(|_| Error::no_memory(len.saturating_mul(size_of::<T>() as u64)))?;
    let mut v = with_room(len)?;
    v.resize(len, value);
    Ok(v)
}

/// Bytes that start at a page boundary: the buffers the library copies samples into
/// (its batches, the collective engine's send and receive buffers). Copies of 4-16 KB
/// samples with glibc's `memmove` ran up to 3x slower (AMD EPYC) where the destination
/// lay a few bytes past the source modulo 4096 (a load then waits for an earlier store
/// to an address with the same low 12 bits: 4K aliasing), and 1.2-1.5x slower where
/// it lay off a cache line; `malloc` returns memory 16 bytes past a page or a line. A
/// buffer on a page boundary fills from MPICH's shard windows (page-aligned) at
/// distance 0 and from Open MPI's (264 bytes past a page) at 3832, both fast, and
/// samples of one length keep that distance all along it. Grows fallibly, like a
/// `Vec`, keeping its contents, and never gives memory back.
#[derive(Default)]
pub struct PageAlignedBytes {
    /// `start` bytes of padding, then the buffer's `len` bytes, then spare room.
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

/// The alignment of a `PageAlignedBytes` (the smallest page on x86-64 and AArch64;
/// also a multiple of their cache lines).
pub(crate) const PAGE: usize = 4096;

impl PageAlignedBytes {
    /// Make it `len` bytes long, keeping the first min(old, new) bytes (the rest hold
    /// whatever they held: callers overwrite them); room grows amortised, as a
    /// `Vec`'s. Or `MDL_ERR_NO_MEMORY`.
    pub fn resize(&mut self, len: usize) -> Result<()> {
        self.make_room(len, reserve)?;
        self.len = len;
        Ok(())
    }

    /// Room for `len` bytes in all (exactly, where it must grow), so that filling them
    /// allocates nothing; or `MDL_ERR_NO_MEMORY`. Unlike a `Vec`'s reserve it writes
    /// the room (zeroes, once), so its pages are committed from then on.
    pub fn reserve_room(&mut self, len: usize) -> Result<()> {
        self.make_room(len, reserve_exact)
    }

    /// How many bytes it holds without growing.
    pub fn room(&self) -> usize {
        self.raw.len().saturating_sub(PAGE - 1)
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Append `bytes`, growing where needed.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<()> {
        let at = self.len;
        self.resize(at.checked_add(bytes.len()).ok_or_else(|| no_memory(bytes.len(), 1))?)?;
        self[at..].copy_from_slice(bytes);
        Ok(())
    }

    fn make_room(&mut self, len: usize, reserve: fn(&mut Vec<u8>, usize) -> Result<()>) -> Result<()> {
        // Room for `len` bytes wherever the allocation's first line boundary falls.
        let wanted = len.checked_add(PAGE - 1).ok_or_else(|| no_memory(len, 1))?;
        if self.raw.len() >= wanted {
            return Ok(());
        }
        let more = wanted - self.raw.len();
        reserve(&mut self.raw, more)?;
        self.raw.resize(wanted, 0);
        // A reallocation may have moved the first line boundary.
        let misaligned = self.raw.as_ptr().addr() % PAGE;
        let start = (PAGE - misaligned) % PAGE;
        self.raw.copy_within(self.start..self.start + self.len, start);
        self.start = start;
        Ok(())
    }
}

impl std::ops::Deref for PageAlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for PageAlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

fn no_memory(count: usize, size: usize) -> Error {
    Error::no_memory((count as u64).saturating_mul(size as u64))
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
fn refuse_if_injected(_count: usize, _size: usize) -> Result<()> {
    Ok(())
}

#[cfg(feature = "test-hooks")]
fn refuse_if_injected(count: usize, size: usize) -> Result<()> {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static MADE: AtomicU64 = AtomicU64::new(0);
    let at = *AT.get_or_init(|| std::env::var("MDL_FAULT_ALLOC_AT").ok().and_then(|k| k.parse().ok()));
    let made = MADE.fetch_add(1, Ordering::Relaxed) + 1;
    if at == Some(made) {
        // Where it failed, for the runner's log: the library's own frames.
        let trace = std::backtrace::Backtrace::force_capture().to_string();
        let ours: Vec<&str> = trace.lines().filter(|l| l.contains("mdloader::") && !l.contains("memory::")).collect();
        // One write, so that the launcher's merged output of other ranks cannot cut
        // into the line the runner looks for.
        let frames = ours.iter().take(8).copied().collect::<Vec<_>>().join(" <- ");
        let line = format!("MDL_FAULT_INJECTED {made} ({count} x {size} bytes) in {frames}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        return Err(no_memory(count, size));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_bytes_start_on_a_page_at_every_size_and_keep_their_contents() {
        let mut bytes = PageAlignedBytes::default();
        assert!(bytes.is_empty());
        for len in [1, 100, 64 * 1024, 3, 1 << 20, 0, 5000] {
            bytes.resize(len).unwrap();
            assert_eq!(bytes.len(), len);
            assert_eq!(bytes.as_ptr().addr() % PAGE, 0, "len {len}");
            bytes.fill(7);
        }
        let mut packed = PageAlignedBytes::default();
        packed.reserve_room(10).unwrap();
        assert!(packed.room() >= 10 && packed.is_empty());
        let mut expected = Vec::new();
        for k in 0..2000u32 {
            let piece: Vec<u8> = (0..k % 97).map(|b| (b ^ k) as u8).collect();
            packed.extend_from_slice(&piece).unwrap();
            expected.extend_from_slice(&piece);
            assert_eq!(packed.as_ptr().addr() % PAGE, 0);
        }
        assert_eq!(&packed[..], &expected[..]);
        packed.clear();
        assert!(packed.is_empty() && packed.room() >= expected.len());
    }
}
