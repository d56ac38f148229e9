//! MPI's life cycle as the library sees it: a hook that runs inside `MPI_Finalize`.
//!
//! The MPI standard lets a library clean up at `MPI_Finalize` through an attribute on
//! `MPI_COMM_SELF`: finalize deletes that communicator's attributes first, calling
//! their delete callbacks while MPI is still fully usable, on every rank (finalize is
//! collective). Without it a loader left open at `MPI_Finalize` makes MPICH abort.

use super::{check, ffi};
use crate::error::Result;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

/// The function to run at `MPI_Finalize`, and whether the attribute is set.
static AT_FINALIZE: OnceLock<fn()> = OnceLock::new();

/// Run `hook` at `MPI_Finalize` (once per process: the first hook given is kept).
pub fn at_finalize(hook: fn()) -> Result<()> {
    if AT_FINALIZE.get().is_some() {
        return Ok(());
    }
    let mut keyval: c_int = 0;
    // SAFETY: both callbacks have the signatures MPI requires; the keyval is written by
    // MPI; COMM_SELF is valid while MPI is initialised (checked by the caller).
    unsafe {
        check(
            ffi::MPI_Comm_create_keyval(Some(never_copy), Some(on_delete), &mut keyval, std::ptr::null_mut()),
            "MPI_Comm_create_keyval",
        )?;
        check(ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, keyval, std::ptr::null_mut()), "MPI_Comm_set_attr")?;
        // The attribute keeps the key alive; the handle is no longer needed.
        check(ffi::MPI_Comm_free_keyval(&mut keyval), "MPI_Comm_free_keyval")?;
    }
    let _ = AT_FINALIZE.set(hook);
    Ok(())
}

/// `MPI_COMM_NULL_COPY_FN`: the attribute is not copied to duplicates.
unsafe extern "C" fn never_copy(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _value_in: *mut c_void,
    _value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer.
    unsafe { *flag = 0 };
    ffi::MPI_SUCCESS as c_int
}

/// Runs inside `MPI_Finalize` (or if the host frees the attribute itself). No panic may
/// unwind into MPI.
unsafe extern "C" fn on_delete(_comm: ffi::MPI_Comm, _keyval: c_int, _value: *mut c_void, _extra: *mut c_void) -> c_int {
    if let Some(hook) = AT_FINALIZE.get()
        && std::panic::catch_unwind(hook).is_err()
    {
        log::error!("the library's MPI_Finalize hook panicked; loaders may be left open");
    }
    ffi::MPI_SUCCESS as c_int
}
