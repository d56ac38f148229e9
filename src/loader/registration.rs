//! Registration: the shard copied into the store (and checked against the other
//! replica groups), the cost model calibrated or loaded, the progress thread started.

use super::core::Core;
use crate::agree::{Setting, agree_identical, agree_on_checks, agree_on_split};
use crate::config::{Calibration as CalibrationMode, Progress};
use crate::error::{Error, Result, mdl_status, outcome_of};
use crate::estimator::calibrate::{self, Calibration, CalibrationSettings};
use crate::estimator::model::CostParams;
use crate::estimator::{Estimator, Settings};
use crate::mpi::{self, ProgressThread};
use crate::store::{ShardView, Store, StoreSettings};

impl Core {
    /// Collective: copy this rank's shard into the store, build the global index and
    /// calibrate the estimator (or load and agree on the parameters of a file).
    pub fn register_shard(&mut self, shard: Result<ShardView>) -> Result<()> {
        let loaded = match &self.config.calibration {
            CalibrationMode::File(path) => Some(calibrate::load(path)),
            CalibrationMode::Measure | CalibrationMode::Off => None,
        };
        let checks = match (&self.store, &shard, &loaded) {
            (Some(_), _, _) => Err(Error::state("a shard is already registered on this loader")),
            (None, Err(err), _) | (None, Ok(_), Some(Err(err))) => Err(err.clone()),
            (None, Ok(_), _) => Ok(()),
        };
        // A file is read on each rank (its path may be node-local): its parameters and
        // its noise must be the same bit for bit, or the ranks would choose different
        // engines (the noise decides which buckets are probed early and which steps are
        // surprises; a file that differed only there passed registration, and every
        // step after it was refused on its fingerprint).
        let (params, noise) = match &loaded {
            Some(Ok(c)) => (c.params, c.confidence.noise),
            _ => (CostParams::default(), [0.0; 2]),
        };
        let noise = [("noise_onesided", noise[0]), ("noise_collective", noise[1])];
        let named: Vec<(String, f64)> = params
            .named()
            .into_iter()
            .chain(noise)
            .map(|(n, v)| (format!("MDL_CALIBRATION file: \"{n}\""), v))
            .collect();
        let file_settings: Vec<Setting> = named.iter().map(|(name, v)| Setting::float(name, *v)).collect();
        // The buffers of mdl_fetch_batch's agreements, reserved where a failure is agreed.
        let checks = checks.and_then(|()| self.reserve_agreements(1));
        agree_identical(&self.comm, checks, &file_settings)?;
        let shard = shard.expect("agreed that every rank's shard is valid");
        let started = mpi::wtime();
        let store = self.register_copy(&shard)?;
        log::info!(
            "registered {} samples ({} bytes) of {} in {:.3} s; {}",
            shard.num_samples(),
            shard.data.len(),
            store.index.num_samples(),
            mpi::wtime() - started,
            store.index.describe()
        );
        let calibration = match loaded {
            Some(loaded) => Ok(loaded.expect("agreed that every rank loaded its file")),
            None if self.config.calibration == CalibrationMode::Off => Ok(Calibration::default_params("default")),
            None => self.measure_calibration(&store),
        };
        // A registration that fails leaves no shard behind: the caller may try again.
        // Every rank failed alike (calibration agrees on its failures), so the store is
        // freed together, but after a timeout or a call mismatch (a peer may be stuck
        // in a collective of it, or not in this call at all, and freeing the window
        // would wait for it): then it is leaked.
        self.calibration = match calibration {
            Ok(calibration) => calibration,
            Err(err) if matches!(err.status, mdl_status::MDL_ERR_TIMEOUT | mdl_status::MDL_ERR_CALL_MISMATCH) => {
                std::mem::forget(store);
                return Err(err);
            }
            Err(err) => {
                // The failure is what the caller needs to know; a failure to free after
                // it is only logged.
                if let Err(freeing) = store.free() {
                    log::warn!("freeing the store after a failed registration: {}", freeing.message);
                }
                return Err(err);
            }
        };
        self.published.set_index(store.index.clone());
        self.store = Some(store);
        self.estimator = Estimator::new(
            perturbed_for_tests(self.calibration.params),
            Settings {
                probe_interval: self.config.probe_interval,
                hysteresis: self.config.hysteresis,
                probe_budget: self.config.probe_budget,
                calibration_noise: self.calibration.confidence.noise,
            },
        );
        self.published.set_calibration(&self.calibration);
        self.publish();
        self.progress = self.start_progress();
        self.gets_end_in_barrier = self.agree_on_lingering()?;
        Ok(())
    }

    /// Collective: whether some rank serves one-sided gets without a progress thread
    /// (no `MPI_THREAD_MULTIPLE` on it, as Open MPI's pt2pt one-sided component
    /// demands). Such a rank serves a peer's get only while it is inside MPI; leaving a
    /// step for another library's collective (DDP's gloo all-reduce) while a peer still
    /// reads from it would hang both. Every one-sided step then ends in a barrier on
    /// every rank, so no rank leaves MPI before the last get of the step has been
    /// served; it costs the ranks' skew, which the estimator then sees in the one-sided
    /// engine's times. `MDL_PROGRESS=off` on a rank keeps it out of this (the user
    /// takes the risk, as with the thread).
    fn agree_on_lingering(&self) -> Result<bool> {
        let wanted = self.config.progress != Progress::Off && self.gets_made() && self.progress.is_none();
        let agreed = self.comm.allreduce_max(&[wanted as u8])?[0] != 0;
        if agreed {
            log::info!(
                "one-sided steps end in a barrier: a rank serves gets without a progress thread \
                 (MPI_THREAD_MULTIPLE missing), and would otherwise serve them only while inside MPI"
            );
        }
        Ok(agreed)
    }

    /// Whether any get is ever made (one node whose samples are all copies makes none).
    fn gets_made(&self) -> bool {
        let one_node = self.store.as_ref().is_some_and(|store| store.topology.is_one_node());
        self.data_comm().size() > 1 && !one_node
    }

    /// Stop the progress thread (a loader about to be leaked after a failure).
    pub fn stop_progress(&mut self) {
        self.progress = None;
    }

    /// The progress thread, where `MDL_PROGRESS` asks for it and MPI allows it. Local:
    /// it changes no communication, so the ranks need not agree.
    fn start_progress(&self) -> Option<ProgressThread> {
        let gets_made = self.gets_made();
        let wanted = match self.config.progress {
            Progress::Off => false,
            Progress::On => true,
            // Not MPICH alone: Open MPI's one-sided components over TCP (pt2pt, ucx's
            // emulation) also need the target's progress, and a poke every 20 ms
            // costs nothing measurable where they do not.
            Progress::Auto => gets_made,
        };
        if !wanted {
            return None;
        }
        if !mpi::thread_multiple() {
            // Said as a warning once per loader, by the lowest rank without it, where the
            // user asked for the thread.
            let why = "the progress thread needs MPI initialised with MPI_THREAD_MULTIPLE; not started on this rank";
            match (self.config.progress, &self.threads_refused) {
                (Progress::On, Some(refused)) => refused.log(&format!("MDL_PROGRESS=on: {why}")),
                _ => log::info!("{why} (a one-sided get then waits for its target to call MPI)"),
            }
            return None;
        }
        let interval = std::time::Duration::from_micros(self.config.progress_interval_us);
        match ProgressThread::start(self.data_comm(), interval) {
            Ok(thread) => {
                log::info!("progress thread started (MPI_Iprobe every {} us)", self.config.progress_interval_us);
                Some(thread)
            }
            // The loader then takes the path of a rank without the thread (see
            // `agree_on_lingering`). Expected after mdl_before_mpi_finalize (a state),
            // not when the thread could not be created.
            Err(err) => {
                let level = if err.status == mdl_status::MDL_ERR_STATE { log::Level::Info } else { log::Level::Warn };
                log::log!(level, "{}: one-sided steps end in a barrier instead", err.message);
                None
            }
        }
    }

    /// Collective: the store of this rank's group (the host, without groups), checked
    /// to hold the same dataset as every other group: the same number of samples and
    /// the same lengths (a checksum; the bytes themselves are the caller's promise). A
    /// group that fails fails every group.
    fn register_copy(&self, shard: &ShardView) -> Result<Store> {
        let Some(group) = &self.group else { return Store::register(&self.comm, shard, &self.store_settings()) };
        let settings = self.store_settings();
        // The groups of one node register in turns (see `Comm::one_part_at_a_time`).
        let node = agree_on_split(&self.comm, self.comm.split_shared(), "registering the node's replica groups in turns")?;
        let registered = node.one_part_at_a_time(group.info().group as u64, || Store::register(group.comm(), shard, &settings));
        node.free()?;
        let registered = registered?;
        let (samples, lengths) = match &registered {
            Ok(store) => {
                let first_id = store.index.first_ids()[group.comm().rank()];
                (store.index.num_samples(), group.comm().allreduce_sum(&[shard.lengths_checksum(first_id)])?[0])
            }
            Err(_) => (0, 0),
        };
        let same_dataset = [
            Setting::identical("the number of samples a replica group holds", samples),
            Setting::identical("the sample lengths a replica group holds (a checksum)", lengths),
        ];
        match agree_identical(&self.comm, outcome_of(&registered), &same_dataset) {
            Ok(()) => registered,
            Err(err) => {
                registered.map_or(Ok(()), Store::free)?;
                Err(err)
            }
        }
    }

    /// Collective: the cost model's parameters. With replica groups only the group of
    /// host rank 0 measures (on its own ranks, as every group fetches), and every rank
    /// of the job takes its figures, so that all decide alike; the other groups wait.
    /// Measuring in one group also keeps groups of one node from creating windows at
    /// once (see `Comm::one_part_at_a_time`).
    fn measure_calibration(&self, registered: &Store) -> Result<Calibration> {
        let settings = CalibrationSettings {
            budget_seconds: self.config.calibration_seconds,
            matrix_max_ranks: self.config.matrix_max_ranks,
            // The scratch store's windows are of the kind the registered store's are.
            store: StoreSettings { placement: Some(registered.placement), ..self.store_settings() },
            topology: registered.topology.clone(),
        };
        let Some(group) = &self.group else { return calibrate::measure(&self.comm, &settings) };
        let measures = group.info().group == 0;
        let measured = if measures { calibrate::measure(group.comm(), &settings) } else { Ok(Calibration::default_params("default")) };
        agree_on_checks(&self.comm, outcome_of(&measured))?;
        let mut measured = measured.expect("agreed that the measuring group succeeded");
        let mut figures: Vec<f64> = measured.params.named().iter().map(|(_, v)| *v).collect();
        figures.extend(measured.confidence.spread.named().iter().map(|(_, v)| *v));
        let was_measured = f64::from(u8::from(measured.source == "measured"));
        let noise = measured.confidence.noise;
        figures.extend([measured.seconds, measured.points[0] as f64, measured.points[1] as f64, was_measured, noise[0], noise[1]]);
        self.comm.bcast_into(0, &mut figures)?;
        let names = measured.params.named().map(|(n, _)| n.to_string());
        let named = |values: &[f64]| -> Vec<(String, f64)> { names.iter().cloned().zip(values.iter().copied()).collect() };
        let (params, rest) = figures.split_at(names.len());
        let (spread, rest) = rest.split_at(names.len());
        let [seconds, one_sided, collective, was_measured, noise_onesided, noise_collective] = rest[..] else {
            unreachable!("six figures follow the parameters and their spreads")
        };
        measured.params = CostParams::from_named(&named(params)).expect("the same names");
        measured.confidence.spread = CostParams::from_named(&named(spread)).expect("the same names");
        measured.confidence.noise = [noise_onesided, noise_collective];
        measured.seconds = seconds;
        measured.points = [one_sided as usize, collective as usize];
        measured.source = if was_measured == 1.0 { "measured" } else { "default" };
        Ok(measured)
    }
}

/// A test hook (the `test-hooks` feature), not a setting: `MDL_TEST_PERTURB_MODEL` in a
/// rank's environment at registration moves one parameter of that rank's cost model by
/// one ulp (the next double up: a fitted parameter may be 0), as a rank that computed
/// differently would; the steps' agreements must then refuse every step on every rank
/// (tests/c/errors_test.c --model, run by tests/run_fault_tests.sh).
#[cfg(feature = "test-hooks")]
fn perturbed_for_tests(mut params: CostParams) -> CostParams {
    if std::env::var_os("MDL_TEST_PERTURB_MODEL").is_some() {
        params.a_os = f64::from_bits(params.a_os.to_bits() + 1);
    }
    params
}

#[cfg(not(feature = "test-hooks"))]
fn perturbed_for_tests(params: CostParams) -> CostParams {
    params
}
