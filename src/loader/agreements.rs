//! The buffers of the core's agreements. A step's agreement, and the first agreement
//! of every other collective call, goes through buffers reserved ahead, padded to one
//! length: no agreement then allocates (where a failure on one rank would leave the
//! others waiting in the reduction), and ranks in different calls meet reductions of
//! one length and are told so (see `agree`).

use super::core::Core;
use super::measurement::{MEASUREMENTS_PER_AGREEMENT, VALUES_PER_MEASUREMENT};
use crate::agree::{AgreementBuffers, CALL_AGREEMENT_MIN, Setting, agree_settings_in};
use crate::error::Result;
use crate::estimator::features;
use crate::memory;

impl Core {
    /// The most values (besides the header) any step's agreement proposes (its
    /// measured steps and the larger of the two feature layouts), and at least as many
    /// as any other call's first agreement.
    fn agreement_values_max(&self) -> usize {
        let (ranks, matrix_max_ranks) = (self.data_comm().size(), self.matrix_max_ranks());
        let step = VALUES_PER_MEASUREMENT * MEASUREMENTS_PER_AGREEMENT
            + features::encoded_len(ranks, matrix_max_ranks).max(features::KNOWN_LEN);
        step.max(CALL_AGREEMENT_MIN)
    }

    /// Collective: agree on `checks` and `settings` as the first agreement of a call
    /// that is not a step (an epoch's start, the job's statistics, finalize), padded
    /// like the steps' agreements.
    pub fn agree_call(&mut self, checks: Result<()>, settings: &[Setting]) -> Result<Vec<u64>> {
        let mut buffers = self.take_agreement_buffers();
        let reserved = buffers.is_reserved();
        // Unreserved: the agreement of a few values on the stack, which cannot fail alone.
        let agreed = agree_settings_in(&self.comm, checks, settings, reserved.then_some(&mut buffers));
        self.give_back_agreement_buffers(buffers);
        agreed
    }

    /// Buffers for a step's or a call's first agreement: once the loader is registered
    /// (on every rank alike), reserved ones, which pad it to one length; before, or
    /// where none is left, unreserved ones, on every rank alike too (the reserved
    /// buffers are taken and given back in the same order everywhere).
    pub(super) fn take_agreement_buffers(&mut self) -> AgreementBuffers {
        match self.store {
            Some(_) => self.agreement_buffers.pop().unwrap_or_default(),
            None => AgreementBuffers::default(),
        }
    }

    pub(super) fn give_back_agreement_buffers(&mut self, buffers: AgreementBuffers) {
        if buffers.is_reserved() {
            self.agreement_buffers.push(buffers);
        }
    }

    /// Reserve buffers for `under_way` step agreements at once, before an agreement
    /// that carries the failure to every rank (registration: one, for
    /// `mdl_fetch_batch`; an epoch's start: its steps agreed ahead).
    pub fn reserve_agreements(&mut self, under_way: usize) -> Result<()> {
        let values = self.agreement_values_max();
        while self.agreement_buffers.len() < under_way {
            memory::reserve(&mut self.agreement_buffers, 1)?;
            self.agreement_buffers.push(AgreementBuffers::reserve(values)?);
        }
        Ok(())
    }
}
