//! loadshape's pure core, compiled natively (for the `loadshape` agent) and to wasm32 (for the page).
//!
//! Everything here is deterministic: no clocks, threads or I/O. Time comes in as a parameter, randomness from a
//! seed stored in the [`scenario::Scenario`]. Same input, same bytes out, on native and wasm alike.
//!
//! Principal modules:
//! - [`record`]: the per-request [`record::RequestRecord`] that simulated and live runs both produce.
//! - [`version`]: the protocol and agent versions, defined once.

pub mod budget;
pub mod calibrate;
pub mod capacity;
pub mod deploy;
pub mod engine;
pub mod error;
pub mod filler;
pub mod interop;
pub mod ladder;
pub mod link;
pub mod metrics;
pub mod order;
pub mod predict;
pub mod presets;
pub mod protocol;
pub mod pyrand;
pub mod record;
pub mod replicas;
pub mod scenario;
pub mod seed_diagnostics;
pub mod seed_model;
pub mod version;
pub mod window;
pub mod workload;
