//! One-sided engine: gets from the owners' windows inside the access epoch the window
//! keeps open, up to `MDL_MAX_GETS_IN_FLIGHT` in flight at once, one completion per group.
//!
//! Unlike DDStore's loop (lock, get, unlock per sample) there is no synchronisation per
//! sample, and samples adjacent both in the owner's window and in the output travel as
//! one get (the plan coalesces them).

use super::{Engine, StepContext};
use crate::error::Result;

pub struct OneSided;

impl Engine for OneSided {
    fn fetch(&self, step: &StepContext, out: &mut [u8]) -> Result<()> {
        step.store.window.get_all(&step.plan.gets, out, step.limits)
    }
}
