//! Capacity: the simulated search's card in the explorer ([`panel`], over [`view`]) and the live search's card in
//! the live view ([`live`]); a deployment's GPUs and cost at the scenario's load in the former ([`gpus`]).

pub mod gpus;
pub mod live;
pub mod panel;
pub mod view;
