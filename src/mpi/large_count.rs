//! Exchanges whose parts exceed MPI's `int` counts.
//!
//! `MPI_Alltoallv` takes `int` counts and displacements, so a rank that sends or
//! receives more than 2^31 - 1 elements in one step cannot say so with it. MPI 4.0's
//! `MPI_Alltoallv_c` can, but Open MPI 4.1 lacks it. What every MPI since 2.0 has is
//! `MPI_Alltoallw`: one datatype per peer, with a count of 1 and a displacement of 0.
//! Each peer's part becomes a derived type of byte blocks (each at most `int` long)
//! at 64-bit byte offsets (`MPI_Aint`) from the buffer's start, so neither counts nor
//! displacements limit the step: it takes one round wherever the agreed figures fit
//! `MDL_MAX_MESSAGE_BYTES`.
//!
//! MPI matches a collective by its call, so every rank must take `MPI_Alltoallw`
//! where any rank needs it: the caller decides from agreed figures (the most bytes any
//! rank sends or receives, `CountWidth::for_most_bytes`), never from its own counts.
//! A rank whose own parts fit `int` then still takes this path.
//!
//! The types are made after the step's agreement, per step that needs them (no rank
//! can know its receive layout earlier). `MPI_Type_create_hindexed` only fails when
//! MPI itself runs out of memory, as its collectives may: that is the containment
//! `docs/hardening.md` describes for MPI's own allocations.

use super::{MAX_COUNT, check, ffi};
use crate::error::Result;
use std::os::raw::c_int;

/// One derived datatype per peer for an `MPI_Alltoallw` over one contiguous buffer,
/// whose part for peer p starts where peer p - 1's ends. Freed on drop.
pub struct PeerTypes {
    /// Each peer's part; a predefined byte type (never freed) for an empty one.
    types: Vec<ffi::MPI_Datatype>,
    /// Which entries of `types` this value made (and frees).
    made: Vec<bool>,
    /// 1 for a peer with bytes, 0 for an empty part.
    pub counts: Vec<c_int>,
    /// All 0: the offsets are inside the types.
    pub displacements: Vec<c_int>,
}

impl PeerTypes {
    /// Types for consecutive parts of `part_bytes[p]` bytes each.
    pub fn consecutive(part_bytes: &[u64]) -> Result<PeerTypes> {
        // SAFETY: reading an extern constant that mpi-sys exports.
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        let peers = part_bytes.len();
        let mut made = PeerTypes {
            types: vec![byte; peers],
            made: vec![false; peers],
            counts: vec![0; peers],
            displacements: vec![0; peers],
        };
        let mut offset: u64 = 0;
        for (p, &bytes) in part_bytes.iter().enumerate() {
            if bytes > 0 {
                made.types[p] = byte_blocks(offset, bytes)?;
                made.made[p] = true;
                made.counts[p] = 1;
            }
            offset += bytes;
        }
        Ok(made)
    }

    pub fn as_ptr(&self) -> *const ffi::MPI_Datatype {
        self.types.as_ptr()
    }
}

impl Drop for PeerTypes {
    fn drop(&mut self) {
        if !super::is_usable() {
            return;
        }
        for (ty, &made) in self.types.iter_mut().zip(&self.made) {
            if made {
                // SAFETY: `ty` is a committed type this value made; no pending
                // operation uses it (after a timeout the caller leaks the value).
                unsafe { ffi::MPI_Type_free(ty) };
            }
        }
    }
}

/// A committed type covering `bytes` bytes from byte `offset` of the buffer.
fn byte_blocks(offset: u64, bytes: u64) -> Result<ffi::MPI_Datatype> {
    let (lengths, offsets) = blocks(offset, bytes);
    let count = c_int::try_from(lengths.len()).expect("a part of 2^62 bytes at most has fewer than 2^31 blocks");
    // SAFETY: reading extern constants that mpi-sys exports.
    let (byte, mut ty) = unsafe { (ffi::RSMPI_UINT8_T, ffi::RSMPI_DATATYPE_NULL) };
    // SAFETY: both arrays hold `count` entries; `ty` receives the new type.
    check(
        unsafe { ffi::MPI_Type_create_hindexed(count, lengths.as_ptr(), offsets.as_ptr(), byte, &mut ty) },
        "MPI_Type_create_hindexed",
    )?;
    // SAFETY: `ty` was just created.
    if let Err(err) = check(unsafe { ffi::MPI_Type_commit(&mut ty) }, "MPI_Type_commit") {
        // SAFETY: `ty` was created above and is used by nothing.
        unsafe { ffi::MPI_Type_free(&mut ty) };
        return Err(err);
    }
    Ok(ty)
}

/// `bytes` bytes from byte `offset` as blocks of at most `MAX_COUNT` bytes: their
/// lengths and byte offsets.
fn blocks(offset: u64, bytes: u64) -> (Vec<c_int>, Vec<ffi::MPI_Aint>) {
    (0..bytes.div_ceil(MAX_COUNT))
        .map(|k| ((bytes - k * MAX_COUNT).min(MAX_COUNT) as c_int, (offset + k * MAX_COUNT) as ffi::MPI_Aint))
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_a_part_without_exceeding_int() {
        let max = MAX_COUNT as c_int;
        let (lengths, offsets) = blocks(7, 2 * MAX_COUNT + 5);
        assert_eq!(lengths, vec![max, max, 5]);
        assert_eq!(offsets, vec![7, 7 + max as ffi::MPI_Aint, 7 + 2 * max as ffi::MPI_Aint]);
        assert_eq!(blocks(3, 10), (vec![10], vec![3]));
    }
}
