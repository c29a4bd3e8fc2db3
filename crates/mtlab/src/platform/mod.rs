//! What mtlab needs from Linux beyond the standard library, behind small
//! safe functions: processes, shared pages, the cycle counter.
//!
//! - `process.rs`: `pid_alive`, `find_in_path`.
//! - `shared_page.rs`: a page shared with a traced process (control page,
//!   watermark page): mmap, atomic fields, unmap.
//! - `prefetch.rs`: a hint to start loading a cache line soon read (the
//!   report's replay and the reader's far frees overlap their misses).
//! - `tsc.rs`: reading the cycle counter from Rust.
//! - `huge_pages.rs`: asking for 2 MiB pages for the report's large tables;
//!   `reserve` grows the slab into them.
//! - `interrupt.rs`: one SIGINT/SIGTERM/SIGHUP handler for the process:
//!   registered actions — put network settings back, stop the measured child,
//!   give it 3 s to finish and then kill it, remove a study's temporary traces
//!   — run newest first, then mtlab dies of the signal; a second signal cuts
//!   the waits short (`hurry`); a signal inherited as ignored, as under
//!   `nohup`, stays ignored.
//! - `safe_fs.rs`: files in places other users can write to: created new
//!   without following links, opened only when regular and the caller's,
//!   directories trusted only when no other user can change any component.
//! - `names.rs`: every predictable name mtlab uses, the trace family's included
//!   (the hostile-user tests `tests/hostile_*.rs` plant at each).

pub mod anon_table;
pub mod huge_pages;
pub mod interrupt;
pub mod names;
pub mod prefetch;
pub mod process;
pub mod recorder_page;
pub mod safe_fs;
pub mod shared_page;
pub mod tsc;
