//! The C boundary: every exported function runs its body through [`boundary`], which
//! catches panics, turns errors into status codes and records the message for
//! `mdl_last_error`. Pointer checks live in `args`; the exports themselves in `api`.

// The exports (api, order) take raw pointers from C by design: they are `extern "C"`
// (a C caller cannot see `unsafe`), and each pointer is checked in `args` before use.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
mod api;
mod args;
mod handle;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
mod order;

pub use api::*;
pub use order::mdl_epoch_ids;

use crate::error::{Result, mdl_status};
use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: String) {
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

fn with_last_error<R>(f: impl FnOnce(&str) -> R) -> R {
    LAST_ERROR.with(|last| f(&last.borrow()))
}

/// Run an export's body: no panic crosses into C, every error becomes a status code
/// and a message for `mdl_last_error`.
fn boundary(call: &str, body: impl FnOnce() -> Result<()>) -> mdl_status {
    let _in_call = crate::call::enter(crate::call::Call::of_export(call));
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => mdl_status::MDL_OK,
        Ok(Err(err)) => {
            log::debug!("{call}: {}", err.message);
            set_last_error(format!("{call}: {}", err.message));
            err.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            log::error!("{call}: internal error: {what}");
            set_last_error(format!("{call}: internal error (please report): {what}"));
            mdl_status::MDL_ERR_PANIC
        }
    }
}

/// Set up logging once, from `MDL_LOG` (default: warnings), to stderr, each line
/// prefixed with this process's rank in `MPI_COMM_WORLD` (not a loader's rank in its
/// own communicator: one process, one prefix), read at the first `mdl_init` after MPI
/// is initialised. A host that installed its own `log` backend keeps it.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static WORLD_RANK: OnceLock<usize> = OnceLock::new();
    // Known once MPI is initialised: an mdl_init before MPI_Init fails, and the next
    // one sets it.
    if let (None, Some(rank)) = (WORLD_RANK.get(), crate::mpi::world_rank()) {
        let _ = WORLD_RANK.set(rank);
    }
    ONCE.call_once(|| {
        let filter = std::env::var("MDL_LOG").unwrap_or_else(|_| "warn".to_string());
        let _ = env_logger::Builder::new()
            .parse_filters(&filter)
            .target(env_logger::Target::Stderr)
            .format(|out, record| {
                let rank = WORLD_RANK.get().map_or("?".to_string(), |r| r.to_string());
                writeln!(out, "[mdloader {} rank {rank}] {}", record.level(), record.args())
            })
            .try_init();
    });
}
