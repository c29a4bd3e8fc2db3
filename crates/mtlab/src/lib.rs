//! mtlab: a performance lab for multithreaded programs on Linux.
//! docs/architecture.md maps these modules.

/// `eprintln!` that cannot panic: a message for the user on stderr, lost if
/// stderr is gone (`mtlab … 2>&1 | head -1` closed it; `eprintln!` then
/// panicked, and files still to be written were not).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod analysis;
pub mod attach;
pub mod broker;
pub mod cli;
pub mod compact;
pub mod ctl;
pub mod export;
pub mod flight;
pub mod heap;
pub mod live;
pub mod live_finish;
pub mod native;
pub mod otlp;
pub mod platform;
pub mod profile;
pub mod record;
pub mod report;
pub mod salvage;
pub mod store;
pub mod studies;
pub mod study;
pub mod symbolize;
#[cfg(test)]
mod testutil;
pub mod topo;
pub mod trace;
pub mod units;
