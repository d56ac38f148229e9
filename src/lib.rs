//! MDLoader: a hybrid in-memory data loader for distributed training.
//!
//! Each MPI rank holds a shard of a dataset of small variable-size samples; every step
//! each rank fetches a batch of samples that live on other ranks, through one of two
//! engines (MPI RMA gets or `MPI_Alltoallv`), chosen per step by a cost model.
//!
//! Layers, from the C boundary inwards, each using only those below it (checked by
//! `tests/layers.rs`): `ffi` (C ABI) -> `loader` (the handle, one step's protocol) ->
//! `estimator` (which engine) -> `engine` (moves bytes) -> `plan` (where each sample
//! comes from and goes) -> `store` (shard and global index) -> `mpi` (the only code
//! that calls MPI). Beside them, leaves any layer may use: `backend`, `config`, `agree`,
//! `call`, `error`, `memory`, `sampler`, `stats`, `node`, `rng`, `prefetch`.
//! `docs/layout.md` has one line per module.

mod agree;
mod backend;
mod call;
mod config;
mod engine;
mod error;
mod estimator;
pub mod ffi;
mod loader;
mod memory;
mod mpi;
mod node;
mod plan;
mod prefetch;
mod rng;
mod sampler;
mod stats;
mod store;

/// The internals the benchmark programs under `examples/` measure (`step_cost`) or
/// model (`scale_model`): built only with the `bench` feature, never in the product.
#[cfg(feature = "bench")]
pub mod bench;

pub use error::mdl_status;

/// Version of the library; the header carries the same numbers.
pub const MDL_VERSION_MAJOR: u32 = 0;
pub const MDL_VERSION_MINOR: u32 = 1;
pub const MDL_VERSION_PATCH: u32 = 0;

#[cfg(test)]
mod tests {
    #[test]
    fn version_constants_match_cargo_toml() {
        let version = format!(
            "{}.{}.{}",
            super::MDL_VERSION_MAJOR,
            super::MDL_VERSION_MINOR,
            super::MDL_VERSION_PATCH
        );
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
    }
}
