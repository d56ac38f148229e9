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
    fits::<T>(len as u64, what)?;
    // SAFETY: non-NULL and aligned (checked), at most isize::MAX bytes (checked), valid
    // for len elements (caller's contract).
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
    fits::<T>(len as u64, what)?;
    // SAFETY: non-NULL and aligned (checked), at most isize::MAX bytes (checked), valid
    // for len elements (caller's contract).
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

/// Checks every out-pointer (as [`out`]) before any is written, so that a call failing
/// on a NULL one leaves the others untouched.
pub fn outs_present<T>(outs: &[(*mut T, &str)]) -> Result<()> {
    outs.iter().try_for_each(|&(ptr, what)| check(ptr, what))
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

/// A C length of `T` elements as `usize`, failing when `n` elements could not exist in
/// memory (more than `isize::MAX` bytes, Rust's and the C standard's limit of one
/// object).
pub fn len<T>(n: u64, what: &str) -> Result<usize> {
    fits::<T>(n, what)?;
    usize::try_from(n).map_err(|_| Error::invalid(format!("{what} = {n} does not fit in memory")))
}

/// `n + 1` elements of `T` (an offsets array), checked like [`len`].
pub fn count_plus_one<T>(n: u64, what: &str) -> Result<usize> {
    let plus_one = n.checked_add(1).ok_or_else(|| Error::invalid(format!("{what} = {n}: {what} + 1 overflows")))?;
    len::<T>(plus_one, what).map_err(|_| Error::invalid(format!("{what} = {n}: {what} + 1 elements do not fit in memory")))
}

fn fits<T>(n: u64, what: &str) -> Result<()> {
    let max = isize::MAX as u64 / size_of::<T>().max(1) as u64;
    if n > max {
        return Err(Error::invalid(format!("{what} = {n} does not fit in memory (at most {max} elements)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::mdl_status;

    #[test]
    fn lengths_that_cannot_exist_in_memory_are_invalid_arguments() {
        assert_eq!(len::<u8>(isize::MAX as u64, "out_cap"), Ok(isize::MAX as usize));
        assert_eq!(len::<u8>(isize::MAX as u64 + 1, "out_cap").unwrap_err().status, mdl_status::MDL_ERR_INVALID_ARG);
        assert_eq!(len::<u8>(u64::MAX, "out_cap").unwrap_err().status, mdl_status::MDL_ERR_INVALID_ARG);
        // 8-byte elements: a length is at most isize::MAX / 8.
        assert!(len::<u64>(isize::MAX as u64 / 8, "ids").is_ok());
        assert!(len::<u64>(isize::MAX as u64 / 8 + 1, "ids").is_err());
    }

    #[test]
    fn n_plus_one_never_wraps() {
        assert_eq!(count_plus_one::<u64>(0, "n"), Ok(1));
        let err = count_plus_one::<u64>(u64::MAX, "n").unwrap_err();
        assert!(err.message.contains("overflows"), "{}", err.message);
        assert!(count_plus_one::<u64>(u64::MAX / 8, "n").is_err());
    }

    #[test]
    fn slices_check_null_and_size_before_use() {
        let null: *const u64 = std::ptr::null();
        // SAFETY: NULL with length 0 is the empty array; NULL with a length is refused
        // before any access.
        unsafe {
            assert_eq!(slice(null, 0, "ids").unwrap().len(), 0);
            assert_eq!(slice(null, 3, "ids").unwrap_err().status, mdl_status::MDL_ERR_NULL_ARG);
            let one = [7u64];
            assert_eq!(slice(one.as_ptr(), usize::MAX, "ids").unwrap_err().status, mdl_status::MDL_ERR_INVALID_ARG);
        }
    }
}
