//! What ran, told: the per-epoch summary line in the log and the job's statistics.

use super::core::Core;
use crate::backend::Backend;
use crate::error::Result;
use crate::stats::JobStats;

impl Core {
    /// After a `mdl_fetch_batch`: a summary line each time this rank has fetched about
    /// an epoch's worth of samples (its share of the dataset).
    pub(super) fn log_summary_every_epoch(&mut self, samples: u64) {
        let share = self.num_samples().unwrap_or(0) / self.comm.size() as u64;
        self.samples_since_summary += samples;
        if share > 0 && self.samples_since_summary >= share {
            self.log_summary("an epoch's worth of samples");
        }
    }

    /// The next summary line covers what runs from now on.
    pub fn start_summary(&mut self) {
        self.summarised = (self.stats.clone(), self.estimator.counters());
        self.samples_since_summary = 0;
    }

    /// An info line, on the loader's rank 0 (every rank decides alike), of what ran
    /// since the last one and why: the engines' steps, their predicted and measured
    /// times per step, probes and switches.
    pub fn log_summary(&mut self, what: &str) {
        let (stats, counters) = (self.stats.since(&self.summarised.0), self.estimator.counters());
        if self.comm.rank() == 0 {
            let chosen_by = if self.backend == Backend::Auto { "AUTO" } else { "forced (mdl_set_backend or MDL_BACKEND)" };
            log::info!(
                "{what}, engine {chosen_by}: {}; {} probes, {} switches; {}",
                stats.engines_and_why(),
                counters.probes - self.summarised.1.probes,
                counters.switches - self.summarised.1.switches,
                stats.probe_cost()
            );
        }
        self.start_summary();
    }

    /// Collective: the job's statistics as JSON (see `stats::JobStats`): every rank's
    /// numbers summed or maximised, the same text on every rank. `checks` carries an
    /// argument error found by the caller, so that every rank fails together.
    pub fn job_stats_json(&mut self, checks: Result<()>) -> Result<String> {
        self.agree_call(checks, &[])?;
        let sums = self.comm.allreduce_sum(&self.stats.summed())?;
        let maxima = self.comm.allreduce_max(&self.stats.maximised())?;
        let job = JobStats { ranks: self.comm.size(), backend: self.backend, counters: self.estimator.counters() };
        Ok(job.to_json(&self.stats, &sums, &maxima))
    }
}
