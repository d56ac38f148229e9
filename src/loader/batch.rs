//! One batch in loader-owned memory, as an epoch hands it to the caller.

use crate::memory::PageAlignedBytes;

/// One batch in loader-owned memory. The buffers keep their capacity from step to
/// step: no allocation once they have grown to the largest batch.
#[derive(Default)]
pub struct Batch {
    pub ids: Vec<u64>,
    /// Page-aligned: see `PageAlignedBytes`.
    pub data: PageAlignedBytes,
    pub offsets: Vec<u64>,
}
