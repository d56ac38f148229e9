//! The handle behind `mdl_loader *`: how a C pointer reaches the loader safely.
//!
//! - **Threads.** Calls that change the loader take its lock, so two threads never hold
//!   two `&mut` to one loader. A collective call waits for the lock: refusing it on one
//!   rank alone would leave the other ranks waiting in the collective. The local
//!   setters (`mdl_set_backend`, `mdl_set_prefetch`) refuse with `MDL_ERR_STATE`
//!   instead of waiting behind a collective. The local queries read [`Published`] and
//!   never take the lock, so they never wait on other ranks.
//! - **Poison.** A panic caught inside a call, or a collective that timed out, leaves
//!   the loader half way through a step: every later call is refused, and finalize
//!   frees the memory only (a collective free could hang on the ranks that moved on).
//!   Ranks found in different calls (`MDL_ERR_CALL_MISMATCH`) do not poison it: the
//!   mismatch is found in a call's first agreement, before anything is done.
//! - **MPI_Finalize.** Every open handle is in a registry; a hook inside
//!   `MPI_Finalize` closes them in creation order (the same on every rank, as loaders
//!   are created collectively), freeing their MPI objects while MPI still works.

use crate::error::{Error, Result, mdl_status};
use crate::loader::{Loader, Published};
use crate::mpi;
use parking_lot::Mutex;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

/// Opaque loader handle. It may be moved between threads; calls on it from two threads
/// are serialised (see the header's conventions).
#[allow(non_camel_case_types)]
pub struct mdl_loader {
    inner: Arc<Handle>,
}

struct Handle {
    /// None once finalized by `MPI_Finalize`'s hook.
    loader: Mutex<Option<Loader>>,
    published: Arc<Published>,
    poison: Mutex<Option<Error>>,
}

/// Open handles, in creation order, for the `MPI_Finalize` hook.
static OPEN: Mutex<Vec<Arc<Handle>>> = Mutex::new(Vec::new());

impl mdl_loader {
    /// A handle for a new loader, registered for the `MPI_Finalize` hook (installed by
    /// [`install_finalize_hook`] before the loader's collective creation).
    pub fn open(loader: Loader) -> Box<mdl_loader> {
        let inner = Arc::new(Handle {
            published: loader.published().clone(),
            loader: Mutex::new(Some(loader)),
            poison: Mutex::new(None),
        });
        OPEN.lock().push(inner.clone());
        Box::new(mdl_loader { inner })
    }

    /// Collective, the first half of finalize: agree with the other ranks that all of
    /// them finalize. `MDL_ERR_CALL_MISMATCH` (a rank in another call) leaves the
    /// handle as it was, for the caller to finalize again; any other outcome goes to
    /// [`mdl_loader::close`]. A poisoned loader, or one closed at `MPI_Finalize`, needs
    /// no agreement: it is freed without communicating.
    pub fn agree_to_close(&self) -> Result<()> {
        if self.inner.poison.lock().is_some() || !mpi::is_usable() {
            return Ok(());
        }
        self.inner.loader.lock().as_mut().map_or(Ok(()), Loader::agree_to_finalize)
    }

    /// Collective: free the loader and the handle after [`mdl_loader::agree_to_close`]
    /// gave `agreed`.
    #[allow(clippy::boxed_local)] // the handle the C caller owned, taken back whole
    pub fn close(self: Box<mdl_loader>, agreed: Result<()>) -> Result<()> {
        let handle = self.inner;
        OPEN.lock().retain(|h| !Arc::ptr_eq(h, &handle));
        let Some(loader) = handle.loader.lock().take() else { return Ok(()) };
        if let Some(poison) = handle.poison.lock().clone() {
            log::warn!("finalizing a loader that failed earlier ({}): its MPI objects are not freed", poison.message);
            loader.stop_progress();
            std::mem::forget(loader); // its window and communicator may still be in use by MPI
            return Ok(());
        }
        if !mpi::is_usable() {
            return Ok(()); // MPI is gone; nothing of it can be freed any more
        }
        match agreed {
            Ok(()) => loader.finalize(),
            Err(err) => {
                loader.abandon(&err);
                Err(err)
            }
        }
    }
}

/// The handle behind a C pointer. After `MPI_Finalize` every call is `MDL_ERR_STATE`,
/// even with a NULL handle.
fn handle_of<'a>(h: *const mdl_loader) -> Result<&'a Handle> {
    if !mpi::is_usable() {
        return Err(Error::state("MPI is not initialised or already finalised"));
    }
    // SAFETY: a non-NULL handle comes from mdl_init and is live until mdl_finalize.
    Ok(&unsafe { h.as_ref() }.ok_or_else(|| Error::null_arg("the loader handle"))?.inner)
}

/// Refusal of a call on a handle that cannot take it.
fn refused(handle: &Handle) -> Result<()> {
    if let Some(poison) = handle.poison.lock().as_ref() {
        return Err(Error::new(
            if poison.status == mdl_status::MDL_ERR_PANIC { mdl_status::MDL_ERR_PANIC } else { mdl_status::MDL_ERR_STATE },
            format!("the loader is unusable after an earlier failure ({}); finalize it", poison.message),
        ));
    }
    Ok(())
}

/// What a call does with the loader, which decides how it takes the lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Every rank makes it: waits while another thread of this rank is inside a call.
    Collective,
    /// This rank alone changes a setting: refused while another thread is inside.
    LocalSetter,
}

/// Run `body` on the loader behind `h` (a call that may change it or communicate).
pub fn with_loader<R>(h: *const mdl_loader, call: Call, body: impl FnOnce(&mut Loader) -> Result<R>) -> Result<R> {
    let handle = handle_of(h)?;
    refused(handle)?;
    let guard = match call {
        Call::Collective => Some(handle.loader.lock()),
        Call::LocalSetter => handle.loader.try_lock(),
    };
    let Some(mut guard) = guard else {
        return Err(Error::state("another thread is inside a call on this loader; settings change between calls"));
    };
    let loader = guard.as_mut().ok_or_else(|| Error::state("the loader was closed at MPI_Finalize"))?;
    match catch_unwind(AssertUnwindSafe(|| body(loader))) {
        Ok(result) => {
            let poison = match &result {
                Err(err) if err.status == mdl_status::MDL_ERR_PANIC => Some((err.status, "a panic was caught")),
                Err(err) if err.status == mdl_status::MDL_ERR_TIMEOUT => {
                    Some((err.status, "a collective timed out (MDL_TIMEOUT)"))
                }
                _ => None,
            };
            if let Some((status, why)) = poison {
                *handle.poison.lock() = Some(Error::new(status, why));
            }
            result
        }
        Err(panic) => {
            *handle.poison.lock() = Some(Error::new(mdl_status::MDL_ERR_PANIC, "a panic was caught"));
            resume_unwind(panic)
        }
    }
}

/// Run a local query on what the loader publishes: never waits on other ranks. It
/// still answers on a poisoned loader (its statistics tell what happened).
pub fn with_published<R>(h: *const mdl_loader, query: impl FnOnce(&Published) -> Result<R>) -> Result<R> {
    query(&handle_of(h)?.published)
}

/// Make `MPI_Finalize` close the loaders left open (once per process). Local; its
/// failure goes into `mdl_init`'s agreement.
pub fn install_finalize_hook() -> Result<()> {
    if !mpi::is_usable() {
        return Ok(()); // mdl_init fails on that anyway, with a clearer message
    }
    mpi::at_finalize(close_all_at_mpi_finalize)
}

/// The `MPI_Finalize` hook: finalize every open loader, in creation order.
fn close_all_at_mpi_finalize() {
    // No loader's progress thread may call MPI from here on, while the hook closes the
    // loaders one after the other.
    mpi::stop_progress_threads();
    let open = std::mem::take(&mut *OPEN.lock());
    for handle in open {
        let Some(loader) = handle.loader.lock().take() else { continue };
        if handle.poison.lock().is_some() {
            std::mem::forget(loader);
            continue;
        }
        log::info!("a loader was still open at MPI_Finalize: closing it");
        if let Err(err) = loader.agree_and_finalize() {
            log::warn!("closing a loader at MPI_Finalize: {}", err.message);
        }
    }
}
