//! What mtlab needs from Linux beyond the standard library, behind small
//! safe functions: processes, shared pages, the cycle counter.

pub mod huge_pages;
pub mod interrupt;
pub mod names;
pub mod process;
pub mod safe_fs;
pub mod shared_page;
pub mod tsc;
