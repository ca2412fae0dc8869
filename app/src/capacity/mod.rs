//! Capacity: the simulated search's card in the explorer ([`panel`], over [`view`]) and the live search's card in
//! the live view ([`live`]).

pub mod live;
pub mod panel;
pub mod view;
