//! Workloads shared by the simulator and the live replay.
//!
//! - [`session::SessionWorkload`]: agent sessions as the seed's `agent_replay.py` runs them.

pub mod session;

pub use session::{SessionPlan, SessionWorkload};
