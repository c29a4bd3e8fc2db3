//! mtlab: a performance lab for multithreaded programs on Linux.
//! docs/architecture.md maps these modules.

pub mod cli;
pub mod compact;
pub mod ctl;
pub mod export;
pub mod heap;
pub mod live_finish;
pub mod native;
pub mod platform;
pub mod profile;
pub mod record;
pub mod report;
pub mod store;
pub mod studies;
pub mod study;
pub mod symbolize;
pub mod topo;
pub mod trace;
pub mod units;
