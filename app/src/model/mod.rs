//! The view model every view reads: the explorer's state and signals ([`state`]), what a computation gives
//! ([`compute`]) and the page URL ([`url`]).

pub mod compute;
pub mod retention;
pub mod seed;
pub mod state;
pub mod url;
