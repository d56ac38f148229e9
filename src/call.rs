//! Which collective call of the library a thread is in, so that every agreement can
//! carry it and ranks that made different calls are told so, naming the calls, instead
//! of decoding each other's values as their own (see `agree`).
//!
//! A leaf: the C boundary sets the call for the caller's thread, the prefetch thread
//! sets its own, and the agreements read it.

use std::cell::Cell;

/// Calls grouped as their agreements must match. An epoch's steps are one call
/// whichever thread runs them (`mdl_next_batch`'s caller or the prefetch thread, and a
/// begin or seek that ends the steps under way): the pipeline enters
/// [`Call::EpochStep`] itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Call {
    /// No export named (the library's own tests, a call the table below does not name).
    Other = 0,
    Init = 1,
    Register = 2,
    Fetch = 3,
    EpochBegin = 4,
    EpochBeginIds = 5,
    EpochSeek = 6,
    EpochStep = 7,
    Stats = 8,
    Finalize = 9,
}

const ALL: [Call; 10] = [
    Call::Other,
    Call::Init,
    Call::Register,
    Call::Fetch,
    Call::EpochBegin,
    Call::EpochBeginIds,
    Call::EpochSeek,
    Call::EpochStep,
    Call::Stats,
    Call::Finalize,
];

impl Call {
    /// The group of the export named `name`.
    pub fn of_export(name: &str) -> Call {
        match name {
            "mdl_init" | "mdl_init_f" | "mdl_init_replicated" | "mdl_init_replicated_f" => Call::Init,
            "mdl_register_shard" => Call::Register,
            "mdl_fetch_batch" => Call::Fetch,
            "mdl_next_batch" => Call::EpochStep,
            "mdl_epoch_begin" => Call::EpochBegin,
            "mdl_epoch_begin_ids" => Call::EpochBeginIds,
            "mdl_epoch_seek" => Call::EpochSeek,
            "mdl_stats_json_job" => Call::Stats,
            "mdl_finalize" => Call::Finalize,
            _ => Call::Other,
        }
    }

    pub fn from_code(code: u64) -> Option<Call> {
        ALL.iter().copied().find(|c| *c as u64 == code)
    }

    /// The call as a user wrote it.
    pub fn name(self) -> &'static str {
        match self {
            Call::Other => "another call of the library",
            Call::Init => "mdl_init",
            Call::Register => "mdl_register_shard",
            Call::Fetch => "mdl_fetch_batch",
            Call::EpochBegin => "mdl_epoch_begin",
            Call::EpochBeginIds => "mdl_epoch_begin_ids",
            Call::EpochSeek => "mdl_epoch_seek",
            Call::EpochStep => "an epoch's step (mdl_next_batch)",
            Call::Stats => "mdl_stats_json_job",
            Call::Finalize => "mdl_finalize",
        }
    }
}

thread_local! {
    static CURRENT: Cell<Call> = const { Cell::new(Call::Other) };
}

/// The call this thread is in.
pub fn current() -> Call {
    CURRENT.with(Cell::get)
}

/// This thread is in `call` until the guard is dropped (the call before comes back: an
/// export may run inside another's body, as the Fortran wrappers do).
pub fn enter(call: Call) -> Entered {
    Entered(CURRENT.with(|c| c.replace(call)))
}

pub struct Entered(Call);

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_survives_its_code() {
        for call in ALL {
            assert_eq!(Call::from_code(call as u64), Some(call));
        }
        assert_eq!(Call::from_code(ALL.len() as u64), None);
    }

    #[test]
    fn an_epochs_begins_seek_and_steps_are_told_apart() {
        let calls = ["mdl_epoch_begin", "mdl_epoch_begin_ids", "mdl_epoch_seek", "mdl_next_batch"].map(Call::of_export);
        assert_eq!(calls, [Call::EpochBegin, Call::EpochBeginIds, Call::EpochSeek, Call::EpochStep]);
        assert_eq!(Call::of_export("mdl_fetch_batch"), Call::Fetch);
    }

    #[test]
    fn entering_restores_the_outer_call() {
        let _outer = enter(Call::Finalize);
        {
            let _inner = enter(Call::Fetch);
            assert_eq!(current(), Call::Fetch);
        }
        assert_eq!(current(), Call::Finalize);
    }
}
