//! What the local calls (`mdl_num_samples`, `mdl_sample_size`, `mdl_stats_json`) read.
//!
//! They must never wait on other ranks, yet the step lock is held for a whole step
//! (by the prefetch thread, say), and a step waits on every rank. So the core hands
//! these over here: the index at registration (immutable; released at finalize, before
//! a node-shared index is freed), the statistics after every step, each behind a lock
//! held only to read or copy them.

use super::replica::ReplicaInfo;
use crate::backend::Backend;
use crate::error::{Error, Result, mdl_status};
use crate::estimator::EstimatorCounters;
use crate::estimator::calibrate::Calibration;
use crate::stats::Stats;
use crate::store::GlobalIndex;
use parking_lot::Mutex;
use std::sync::Arc;

pub struct Published {
    rank: usize,
    ranks: usize,
    replicas: ReplicaInfo,
    index: Mutex<Option<Arc<GlobalIndex>>>,
    stats: Mutex<StatsView>,
}

struct StatsView {
    stats: Stats,
    backend: Backend,
    counters: EstimatorCounters,
    calibration: Calibration,
}

impl Published {
    pub fn new(rank: usize, ranks: usize, backend: Backend, replicas: ReplicaInfo) -> Published {
        let stats = StatsView {
            stats: Stats::default(),
            backend,
            counters: EstimatorCounters::default(),
            calibration: Calibration::default_params("default"),
        };
        Published { rank, ranks, replicas, index: Mutex::new(None), stats: Mutex::new(stats) }
    }

    /// This rank's replica group (fixed at init).
    pub fn replicas(&self) -> ReplicaInfo {
        self.replicas
    }

    pub fn set_index(&self, index: Arc<GlobalIndex>) {
        *self.index.lock() = Some(index);
    }

    /// Drop this reference to the index (at finalize, so that the store can free it).
    pub fn clear_index(&self) {
        *self.index.lock() = None;
    }

    /// After every step: a copy of a few counters.
    pub fn set_stats(&self, stats: &Stats, backend: Backend, counters: EstimatorCounters) {
        let mut view = self.stats.lock();
        view.stats.clone_from(stats);
        view.backend = backend;
        view.counters = counters;
    }

    /// At registration, where the cost model's parameters are settled.
    pub fn set_calibration(&self, calibration: &Calibration) {
        self.stats.lock().calibration = calibration.clone();
    }

    fn with_index<R>(&self, query: impl FnOnce(&GlobalIndex) -> Result<R>) -> Result<R> {
        let index = self.index.lock();
        query(index.as_deref().ok_or_else(|| Error::state("no shard registered yet (call mdl_register_shard first)"))?)
    }

    pub fn num_samples(&self) -> Result<u64> {
        self.with_index(|index| Ok(index.num_samples()))
    }

    pub fn sample_size(&self, id: u64) -> Result<u64> {
        self.with_index(|index| index.len_of(id).ok_or_else(|| {
            Error::new(
                mdl_status::MDL_ERR_OUT_OF_RANGE,
                format!("sample id {id} is out of range (num_samples = {})", index.num_samples()),
            )
        }))
    }

    /// This rank's statistics as JSON.
    pub fn stats_json(&self) -> String {
        let view = self.stats.lock();
        view.stats.to_json(self.rank, self.ranks, view.backend, &view.counters, &view.calibration)
    }
}
