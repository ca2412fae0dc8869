//! Pieces every view draws with: charts ([`charts`]), metric values ([`metric`]) and number formats ([`fmt`]).

pub mod charts;
pub mod fmt;
pub mod metric;
