//! Asking the memory for data ahead of use. Small samples (and index entries) at random
//! places cost a cache miss each, which the CPU overlaps only a few at a time by
//! itself; asked for a few iterations ahead, their misses overlap with the work between.

/// Ask for the first `lines` cache lines of `items` (a hint: it never faults and
/// changes nothing, so any live slice will do).
#[inline]
pub fn lines<T>(items: &[T], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = std::mem::size_of_val(items);
        let start = items.as_ptr().cast::<u8>();
        for line in (0..bytes).step_by(64).take(lines) {
            // SAFETY: `line < bytes`, so the address is inside the live slice; a
            // prefetch only hints the cache.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(start.add(line).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, lines);
}
