//! The keys of the RUNINFO and STATS records (`key=value` text), in one
//! place: each has one writer, and readers in several modules. Changing one
//! here changes what old traces are read as, so they never change.

// ---------------------------------------------------------------------------
// RUNINFO: written by `mtlab record` after the run (`record.rs`).

/// Wall-clock time of the traced run, in nanoseconds.
pub const WALL_NS: &str = "wall_ns";
/// The program's exit code, when it exited.
pub const EXIT_CODE: &str = "exit_code";
/// The signal that killed the program, when one did.
pub const SIGNAL: &str = "signal";
/// Killed by a signal: events of its threads' unwritten buffers that
/// `record` had copied from the process while it ran and added to the
/// trace (`salvage`), and the threads they are of.
pub const SALVAGED_EVENTS: &str = "salvaged_events";
pub const SALVAGED_THREADS: &str = "salvaged_threads";
/// Wall-clock time of the untraced run (`record --baseline`), in nanoseconds.
pub const BASELINE_WALL_NS: &str = "baseline_wall_ns";
/// "1" when `record --sample --inactive` started the sampler switched off.
pub const SAMPLE_STARTED_INACTIVE: &str = "sample_started_inactive";
/// "1" when the untraced run read an empty stdin (the traced run had a pipe
/// or terminal): a program that reads stdin did less work untraced.
pub const BASELINE_STDIN_EMPTY: &str = "baseline_stdin_empty";
/// The child traces beside the root file when the run ended, with each one's
/// command (`trace::family`): a report can then tell a deleted child trace
/// from a child that never wrote one.
pub const CHILD_TRACES: &str = "child_traces";
/// How many processes of the run got no trace file (`mtlab record` could not
/// make one for them either: `broker`); absent when none.
pub const UNTRACED_COUNT: &str = "untraced_count";
/// The first 100 of them, `PID:ERRNO:COMMAND` separated by `/` (`broker::encode`).
pub const UNTRACED: &str = "untraced";
/// `record --pid`: the process attached to (its trace starts at the attach,
/// not at its start: frees of blocks allocated before are not errors).
pub const ATTACHED_PID: &str = "attached_pid";
/// `record --pid`: when tracing started, nanoseconds since the Unix epoch.
pub const ATTACHED_AT_NS: &str = "attached_at_ns";
/// `record --pid`: how tracing ended: "detach" (the process runs on) or "exit".
pub const ATTACH_ENDED_BY: &str = "attach_ended_by";

// ---------------------------------------------------------------------------
// RUNINFO: written by the rewrites (`trace::finish`, `trace::compact`).

/// Damage found when the trace was rewritten; the records from there on
/// were dropped. May occur several times.
pub const FINISH_WARNING: &str = "finish_warning";
/// Bytes of the trace rewritten while the program still ran (only when not 0).
pub const REWRITTEN_WHILE_RUNNING: &str = "rewritten_while_running";
/// The finish's estimate of the most heap blocks live at once: allocations
/// less releases added up record by record in file order
/// (`columns::LiveCount`). Exact for one thread; with several, records
/// that overlap in time are counted one after the other, so it can be
/// higher (a record's frees of another thread's blocks come later in the
/// file) or lower. A reader sizes its table of live blocks by it.
pub const LIVE_BLOCKS_HINT: &str = "live_blocks_hint";
/// The time quantum of a compact trace, in ticks (`trace::compact`); its
/// presence marks the trace as compact.
pub const COMPACT_QUANTUM: &str = "compact_quantum";
/// The heap's peak measured on the exact trace before compaction, as the
/// JSON of an `analysis::model::PeakReport` (written by `mtlab compact`).
pub const COMPACT_PEAK: &str = "compact_peak";
/// `1` in a lean compact trace (`mtlab compact --lean`, `trace::lean`): its
/// heap addresses are made up and its frees carry no stack, so every figure
/// derived from addresses (fragmentation, mapped bytes, lifetimes) is gone.
pub const COMPACT_LEAN: &str = "compact_lean";

// ---------------------------------------------------------------------------
// RUNINFO of a flight recorder's window (`record --keep-last`, `flight::`).

/// The window's length asked for, in ns; its presence marks the trace as a window.
pub const FLIGHT_KEEP_LAST_NS: &str = "flight_keep_last_ns";
/// Why the window was written: `ctl dump`, `signal N (NAME)`, a cgroup
/// memory event, memory pressure.
pub const FLIGHT_TRIGGER: &str = "flight_trigger";
/// The window's first and last event, in ns since tracing started.
pub const FLIGHT_START_NS: &str = "flight_start_ns";
pub const FLIGHT_END_NS: &str = "flight_end_ns";
/// Events of the run before the window (dropped from the ring).
pub const FLIGHT_EVENTS_BEFORE: &str = "flight_events_before";
/// The trace of the root process's latest image when it had exec'd by the
/// time the window was written: the ring holds its first image's events
/// only (the flight recorder does not follow an exec).
pub const FLIGHT_EXECD: &str = "flight_execd";

// ---------------------------------------------------------------------------
// STATS: written by the preload library at process exit (`writer.c`,
// `sampler.c`).

/// Stacks the sampler captured.
pub const STACKS_CAPTURED: &str = "stacks_captured";
/// Cycles the sampler spent capturing those stacks.
pub const UNWIND_CYCLES: &str = "unwind_cycles";
/// Samples whose blocks the sampler could not remember (its address set was full).
pub const SAMPLES_UNTRACKED: &str = "samples_untracked";
/// Threads started, under `--sample-seed`, without a name in the creation
/// tree (not by pthread_create, or while its slots were all in flight): their
/// draws follow the order of their first samples, which may change from run to run.
pub const SAMPLES_THREADS_UNNAMED: &str = "samples_threads_unnamed";
/// Samples taken.
pub const SAMPLES: &str = "samples";
/// Times the trace was opened again by path because the program had closed
/// or replaced mtlab's descriptor (close_range, closefrom, dup2 onto it).
pub const TRACE_REOPENED: &str = "trace_reopened";
/// Times a thread's guard was found left raised by a longjmp out of mtlab's
/// code or out of an allocator call (a signal handler jumping out), and
/// cleared at the thread's next allocator call, which is traced again.
pub const GUARDS_RESET: &str = "guards_reset";
/// Allocator calls made by signal handlers that interrupted mtlab's own code
/// (an event being written, a buffer being flushed): passed through untraced,
/// since recording one there would corrupt the interrupted event. Calls of
/// handlers that interrupted the program or the allocator are traced.
pub const SIGNAL_CALLS_UNTRACED: &str = "signal_calls_untraced";
/// Calls with a stack (allocations; samples when sampling) of threads made by
/// the clone system call without thread storage of their own: traced, with
/// their stacks, in the buffer (and so under the thread) of the thread whose
/// storage they share.
pub const SHARED_TLS_CALLS: &str = "shared_tls_calls";
/// 1 when the process was made by a raw fork or clone system call (no fork
/// handler ran): its events before its first flush were dropped.
pub const FORKED_WITHOUT_HANDLERS: &str = "forked_without_handlers";
/// The file offset of the first record a write could not hold whole (the
/// disk or the quota was full): no record was written after it but STATS
/// and END, at that offset. Absent when every write succeeded.
pub const WRITE_FAILED_AT: &str = "write_failed_at";
/// 1 when a record was not written because it would have crossed the file
/// size limit (RLIMIT_FSIZE, `ulimit -f`).
pub const SIZE_LIMITED: &str = "size_limited";
/// 1 when tracing was stopped (and the trace finished) before the program
/// installed a seccomp filter under which mtlab's library could not go on
/// writing: the events after it are not in the trace.
pub const STOPPED_BY_SECCOMP: &str = "stopped_by_seccomp";
/// 1 when something the process did not create (another user's file, a
/// link, a FIFO) was at its control page's name (`/dev/shm/mtlab-PID`): it
/// kept its page private, and only its signal reached its sampler.
pub const CTL_PAGE_REFUSED: &str = "ctl_page_refused";
/// Where the heap manager's own figures below come from (`mallinfo2`,
/// `jemalloc mallctl`, `tcmalloc MallocExtension`, `mimalloc mi_process_info`).
pub const ALLOCATOR_STATS: &str = "allocator_stats";
/// Bytes the heap manager counts as handed out at exit (glibc: uordblks +
/// hblkhd, chunk headers and thread-cached chunks included).
pub const ALLOCATOR_IN_USE_BYTES: &str = "allocator_in_use_bytes";
/// Bytes the heap manager holds from the system at exit.
pub const ALLOCATOR_MAPPED_BYTES: &str = "allocator_mapped_bytes";
/// glibc only: the bytes of its blocks that are their own mmap'd chunks
/// (`hblkhd`), part of `allocator_mapped_bytes`.
pub const ALLOCATOR_MMAPPED_BYTES: &str = "allocator_mmapped_bytes";
/// glibc only: free bytes held in its arenas (`fordblks`).
pub const ALLOCATOR_FREE_BYTES: &str = "allocator_free_bytes";
/// `allocator_in_use_bytes` when tracing started: what the loader and libc
/// had allocated before mtlab could see anything.
pub const ALLOCATOR_IN_USE_AT_START_BYTES: &str = "allocator_in_use_at_start_bytes";
/// `allocator_mapped_bytes` when tracing started.
pub const ALLOCATOR_MAPPED_AT_START_BYTES: &str = "allocator_mapped_at_start_bytes";
/// ALLOCSTATS records (after `mtlab ctl dump`) carry the keys above and these two:
/// the TSC when the figures were read, and the dump that asked for them.
pub const READING_TSC: &str = "tsc";
pub const READING_DUMP: &str = "dump";
/// Only with `MTLAB_UNWIND_CHECK=1`: dwarf stacks also taken by libgcc's
/// unwinder, and how many of them differed (`stack.c`).
pub const UNWIND_CHECKED: &str = "unwind_checked";
pub const UNWIND_MISMATCHED: &str = "unwind_mismatched";
/// The process's peak resident set size, in KiB (`getrusage`).
pub const MAX_RSS_KIB: &str = "max_rss_kib";
