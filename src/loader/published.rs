//! What the local calls (`mdl_num_samples`, `mdl_sample_size`, `mdl_stats_json`) read.
//!
//! They must never wait on other ranks, yet the step lock is held for a whole step
//! (by the prefetch thread, say), and a step waits on every rank. So the core hands
//! these over here: the index once at registration (immutable afterwards), the
//! statistics after every step, behind a lock held only to copy them.

use crate::config::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::estimator::EstimatorCounters;
use crate::estimator::calibrate::Calibration;
use crate::stats::Stats;
use crate::store::GlobalIndex;
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

pub struct Published {
    rank: usize,
    ranks: usize,
    index: OnceLock<Arc<GlobalIndex>>,
    stats: Mutex<StatsView>,
}

struct StatsView {
    stats: Stats,
    backend: Backend,
    counters: EstimatorCounters,
    calibration: Calibration,
}

impl Published {
    pub fn new(rank: usize, ranks: usize, backend: Backend) -> Published {
        let stats = StatsView {
            stats: Stats::default(),
            backend,
            counters: EstimatorCounters::default(),
            calibration: Calibration::default_params("default"),
        };
        Published { rank, ranks, index: OnceLock::new(), stats: Mutex::new(stats) }
    }

    pub fn set_index(&self, index: Arc<GlobalIndex>) {
        // Registration happens once per loader (checked and agreed before).
        let _ = self.index.set(index);
    }

    pub fn set_stats(&self, stats: &Stats, backend: Backend, counters: EstimatorCounters, calibration: &Calibration) {
        let mut view = self.stats.lock();
        view.stats.clone_from(stats);
        view.backend = backend;
        view.counters = counters;
        if view.calibration != *calibration {
            view.calibration = calibration.clone();
        }
    }

    fn index(&self) -> Result<&GlobalIndex> {
        self.index.get().map(|i| &**i).ok_or_else(|| Error::state("no shard registered yet (call mdl_register_shard first)"))
    }

    pub fn num_samples(&self) -> Result<u64> {
        Ok(self.index()?.num_samples())
    }

    pub fn sample_size(&self, id: u64) -> Result<u64> {
        let index = self.index()?;
        index.len_of(id).ok_or_else(|| {
            Error::new(
                mdl_status::MDL_ERR_OUT_OF_RANGE,
                format!("sample id {id} is out of range (num_samples = {})", index.num_samples()),
            )
        })
    }

    /// This rank's statistics as JSON.
    pub fn stats_json(&self) -> String {
        let view = self.stats.lock();
        view.stats.to_json(self.rank, self.ranks, view.backend, &view.counters, &view.calibration)
    }
}
