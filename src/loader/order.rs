//! The order of an epoch's batches: the built-in sampler's, which every rank knows for
//! every rank, or the caller's own (`mdl_epoch_begin_ids`: a framework's sampler,
//! torch's `DistributedSampler`, a weighted one), which only its rank knows. Both run
//! the same way: steps planned and agreed ahead, fetched inline or on the prefetch
//! thread. Only the collective engine's knowledge differs: with the sampler's order an
//! owner works out what the others ask of it; with a given order they tell it, as in
//! `mdl_fetch_batch`.

use crate::memory;
use crate::agree::Setting;
use crate::error::{Error, Result};
use crate::engine::KnownBatches;
use crate::sampler::Epoch;
use std::ops::Range;

pub enum EpochOrder {
    Sampler(Epoch),
    Given(GivenOrder),
}

impl EpochOrder {
    pub fn steps(&self) -> u64 {
        match self {
            EpochOrder::Sampler(epoch) => epoch.steps(),
            EpochOrder::Given(given) => given.steps(),
        }
    }

    /// This rank's (`rank`'s) ids of `step`, in `ids`, whose room is reserved
    /// fallibly: a batch too large for this rank's memory is `MDL_ERR_NO_MEMORY`, to be
    /// agreed with the step, never an abort.
    pub fn batch_into(&self, step: u64, rank: usize, ids: &mut Vec<u64>) -> Result<()> {
        ids.clear();
        let len = match self {
            EpochOrder::Sampler(epoch) => epoch.batch_len(step),
            EpochOrder::Given(given) => given.batch_len(step),
        };
        let room = usize::try_from(len).map_err(|_| Error::no_memory(len.saturating_mul(8)))?;
        memory::reserve_exact(ids, room)?;
        match self {
            EpochOrder::Sampler(epoch) => epoch.batch_into(step, rank, ids),
            EpochOrder::Given(given) => given.batch_into(step, ids),
        }
        Ok(())
    }

    /// Every rank's batch of `step`, where this rank knows them.
    pub fn known(&self, step: u64) -> Option<SamplerStep<'_>> {
        match self {
            EpochOrder::Sampler(epoch) => Some(SamplerStep { epoch, step }),
            EpochOrder::Given(_) => None,
        }
    }

    pub fn sampler(&self) -> Option<&Epoch> {
        match self {
            EpochOrder::Sampler(epoch) => Some(epoch),
            EpochOrder::Given(_) => None,
        }
    }

    /// What must be the same on every rank for the ranks' steps to stay in step (the
    /// sampler's arguments are agreed by its caller).
    pub fn settings(&self) -> Vec<Setting<'static>> {
        match self {
            EpochOrder::Sampler(_) => Vec::new(),
            EpochOrder::Given(given) => vec![Setting::identical("number of batches (steps)", given.steps())],
        }
    }
}

/// One rank's batches as its caller gave them: step s is `ids[bounds[s]..bounds[s + 1]]`.
pub struct GivenOrder {
    ids: Vec<u64>,
    bounds: Vec<u64>,
}

impl GivenOrder {
    /// A copy of the caller's `ids` cut at `bounds` (steps + 1 entries from 0 to the
    /// number of ids, increasing: no batch is empty), every id below `num_samples`; the memory is
    /// allocated fallibly (8 bytes per id and per step).
    pub fn new(ids: &[u64], bounds: &[u64], num_samples: u64) -> Result<GivenOrder> {
        let (first, last) = (bounds.first().copied(), bounds.last().copied());
        if first != Some(0) || last != Some(ids.len() as u64) {
            return Err(Error::invalid(format!(
                "batch_offsets must run from 0 to the number of ids ({}): it runs from {} to {}",
                ids.len(),
                first.unwrap_or(0),
                last.unwrap_or(0)
            )));
        }
        // An empty batch would read as the epoch's end (mdl_next_batch's n == 0).
        if let Some(s) = bounds.windows(2).position(|w| w[1] <= w[0]) {
            return Err(Error::invalid(format!(
                "batch {s} is empty or ends before it begins (batch_offsets[{s}] = {}, batch_offsets[{}] = {}): \
                 every batch needs at least one id",
                bounds[s],
                s + 1,
                bounds[s + 1]
            )));
        }
        if let Some(k) = ids.iter().position(|&id| id >= num_samples) {
            return Err(Error::new(
                crate::error::mdl_status::MDL_ERR_OUT_OF_RANGE,
                format!("ids[{k}] = {} is out of range (num_samples = {num_samples})", ids[k]),
            ));
        }
        Ok(GivenOrder { ids: copied(ids)?, bounds: copied(bounds)? })
    }

    pub fn steps(&self) -> u64 {
        self.bounds.len() as u64 - 1
    }

    /// Where step `step` starts in `ids` (the end past the last step).
    fn start_of(&self, step: u64) -> usize {
        usize::try_from(step).ok().and_then(|s| self.bounds.get(s)).map_or(self.ids.len(), |&b| b as usize)
    }

    fn batch_len(&self, step: u64) -> u64 {
        (self.start_of(step.saturating_add(1)) - self.start_of(step)) as u64
    }

    fn batch_into(&self, step: u64, ids: &mut Vec<u64>) {
        ids.clear();
        ids.extend_from_slice(&self.ids[self.start_of(step)..self.start_of(step.saturating_add(1))]);
    }
}

fn copied(values: &[u64]) -> Result<Vec<u64>> {
    let mut copy = memory::with_room(values.len())?;
    copy.extend_from_slice(values);
    Ok(copy)
}

/// One step of the built-in sampler's epoch, whose batches every rank knows.
pub struct SamplerStep<'a> {
    pub epoch: &'a Epoch,
    pub step: u64,
}

impl KnownBatches for SamplerStep<'_> {
    fn for_each_request(&self, owned: Range<u64>, visit: &mut dyn FnMut(usize, u64)) {
        self.epoch.for_each_request(self.step, owned, visit);
    }

    fn served_bytes(&self, owned: Range<u64>) -> u64 {
        self.epoch.served_bytes(self.step, owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_batches_are_the_callers_cut_at_the_offsets() {
        let order = GivenOrder::new(&[5, 1, 4, 4, 0], &[0, 2, 5], 6).unwrap();
        assert_eq!(order.steps(), 2);
        let mut ids = vec![9];
        let batches: Vec<Vec<u64>> = (0..3)
            .map(|s| {
                assert_eq!(order.batch_len(s), [2, 3, 0][s as usize]);
                order.batch_into(s, &mut ids);
                ids.clone()
            })
            .collect();
        assert_eq!(batches, [vec![5, 1], vec![4, 4, 0], vec![]]);
    }

    #[test]
    fn bad_offsets_and_ids_are_refused_naming_them() {
        let refused = |ids: &[u64], bounds: &[u64]| GivenOrder::new(ids, bounds, 6).err().unwrap().message;
        assert!(refused(&[1, 2], &[1, 2]).contains("from 0"));
        assert!(refused(&[1, 2], &[0, 1]).contains("to the number of ids (2)"));
        assert!(refused(&[1, 2], &[]).contains("from 0"));
        assert!(refused(&[1, 2, 3], &[0, 2, 1, 3]).contains("batch 1 is empty or ends before it begins"));
        assert!(refused(&[1, 2, 3], &[0, 2, 2, 3]).contains("batch 1 is empty"));
        assert!(refused(&[1, 6], &[0, 2]).contains("ids[1] = 6"));
        assert_eq!(GivenOrder::new(&[], &[0], 0).unwrap().steps(), 0);
    }
}
