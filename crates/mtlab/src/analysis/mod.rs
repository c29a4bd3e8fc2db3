//! The analysis of a trace: the report's data model (`model`) and the one
//! pass that decodes each event once and feeds it to the aggregators.

pub mod model;
