//! Checked conversion of C arguments into Rust references.

use crate::error::{Error, Result};

/// A C array as a slice: `(NULL, 0)` is the empty array, `(NULL, n > 0)` an error.
///
/// # Safety
/// A non-NULL `ptr` must point to `len` valid, initialised `T` that stay valid and
/// unaliased by writers for `'a`.
pub unsafe fn slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    check(ptr, what)?;
    // SAFETY: non-NULL and aligned (checked), valid for len elements (caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A writable C array as a slice, with the same rules as [`slice`].
///
/// # Safety
/// A non-NULL `ptr` must point to `len` writable `T` that nothing else accesses for `'a`.
pub unsafe fn slice_mut<'a, T>(ptr: *mut T, len: usize, what: &str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    check(ptr, what)?;
    // SAFETY: non-NULL and aligned (checked), valid for len elements (caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// A required out-pointer.
///
/// # Safety
/// A non-NULL `ptr` must be valid for writes of a `T`.
pub unsafe fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T> {
    check(ptr, what)?;
    // SAFETY: non-NULL and aligned (checked), writable (caller's contract).
    Ok(unsafe { &mut *ptr })
}

fn check<T>(ptr: *const T, what: &str) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::null_arg(what));
    }
    if !ptr.is_aligned() {
        return Err(Error::invalid(format!("{what} is not aligned for its type")));
    }
    Ok(())
}

/// A C length as `usize`, failing on 32-bit targets where it does not fit.
pub fn len(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::invalid(format!("{what} = {n} does not fit in memory")))
}
