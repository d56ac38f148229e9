//! The library's internals as its benchmark programs see them (`examples/step_cost`:
//! the CPU work of a step without MPI; `examples/scale_model`: the cost model fed with
//! an interconnect's parameters). Only with the `bench` feature.

pub use crate::backend::Backend;
pub use crate::engine::exchange_shape;
pub use crate::estimator::features;
pub use crate::estimator::model::{CostParams, StepFeatures};
pub use crate::plan::BatchPlan;
pub use crate::sampler::Epoch;
pub use crate::store::{GlobalIndex, Topology};
