//! The C boundary: every exported function runs its body through [`boundary`], which
//! catches panics, turns errors into status codes and records the message for
//! `mdl_last_error`. Pointer checks live in `args`; the exports themselves in `api`.

mod api;
mod args;
mod handle;
mod order;

pub use api::*;
pub use order::mdl_epoch_ids;

use crate::error::{Result, mdl_status};
use std::cell::RefCell;
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

/// Set up logging once, from `MDL_LOG` (default: warnings), to stderr. A host that
/// installed its own `log` backend keeps it.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("MDL_LOG").unwrap_or_else(|_| "warn".to_string());
        let _ = env_logger::Builder::new()
            .parse_filters(&filter)
            .target(env_logger::Target::Stderr)
            .try_init();
    });
}
