//! `mtlab record --pid PID`: flags → `attach::AttachConfig` → one call.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::attach::{self, AttachConfig, Ended};
use crate::record::{SampleConfig, Stacks, Unwind};

/// Sampling interval of `record --pid` without --sample or --full.
const DEFAULT_INTERVAL: u64 = 512 * 1024;

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// Attach to the running process PID instead of starting a program: sample it (--sample,
    /// 512KiB by default), trace every call (--full), or analyse every call live into a profile
    /// (--live, -o default mtlab.pidPID.live) until --duration ends, Ctrl-C (with --live also
    /// `mtlab ctl PID stop`) or its exit; then detach, leaving it running as before. (`--keep-last` does not attach:
    /// it is refused, not ignored.)
    #[arg(long, value_name = "PID", conflicts_with_all = ["baseline", "compact", "no_follow"])]
    pub pid: Option<i32>,
    /// With --pid: a full trace of every allocation call instead of sampling.
    #[arg(long, requires = "pid", conflicts_with = "sample")]
    pub full: bool,
    /// With --pid: detach after this many seconds.
    #[arg(long, value_name = "SECONDS", requires = "pid")]
    pub duration: Option<f64>,
    /// With --pid: attach although the process has a seccomp filter (it must allow openat,
    /// pwrite64, mmap, mprotect and futex, and clone3 with --sample; Docker's default profile does).
    #[arg(long, requires = "pid")]
    pub allow_seccomp: bool,
}

/// `--live` with `--pid`: the profile and its snapshots' period.
pub struct LiveArgs {
    pub live: bool,
    pub snapshot_every: Duration,
    pub keep_raw: bool,
}

#[allow(clippy::too_many_arguments)]
pub fn cmd_attach(
    pid: i32,
    a: AttachArgs,
    l: LiveArgs,
    output: Option<PathBuf>,
    sample: Option<SampleConfig>,
    stacks: Stacks,
    unwind: Unwind,
    depth: u32,
    free_stacks: bool,
    push: Option<crate::otlp::periodic::Config>,
) -> Result<ExitCode, CliError> {
    if a.full && push.is_some() {
        return Err(CliError::Other("--push-every with --pid pushes the sampled profile: leave out --full (sampling, 512KiB by default, or --sample INTERVAL)".into()));
    }
    if l.live && (push.is_some() || sample.is_some()) {
        return Err(CliError::Other(
            "--live with --pid analyses the full trace: leave out --sample and --push-every (or drop --live to sample the process)".into(),
        ));
    }
    let sample = match (a.full || l.live, sample) {
        (true, _) => None,
        (false, Some(s)) => Some(SampleConfig { push, ..s }),
        (false, None) => Some(SampleConfig { interval: DEFAULT_INTERVAL, inactive: false, seed: 0, push }),
    };
    if let Some(d) = a.duration.filter(|d| !(d.is_finite() && *d > 0.0)) {
        return Err(CliError::Other(format!("--duration {d}: give a positive number of seconds")));
    }
    let live = l.live.then(|| crate::live::LiveConfig {
        profile: output.clone().unwrap_or_else(|| PathBuf::from(format!("mtlab.pid{pid}.live"))),
        snapshot_every: l.snapshot_every,
        keep_raw: l.keep_raw,
        publish: None,
    });
    let output = match &live {
        // The raw trace beside the profile, as `record --live -- PROGRAM` puts it.
        Some(l) => super::live_raw(&l.profile),
        None => output.unwrap_or_else(|| PathBuf::from(format!("mtlab.pid{pid}.mtl"))),
    };
    let cfg = AttachConfig {
        pid,
        output,
        sample,
        stacks,
        unwind,
        depth,
        free_stacks,
        duration: a.duration.map(Duration::from_secs_f64),
        allow_seccomp: a.allow_seccomp,
        live,
    };
    let out = attach::record_attached(&cfg).map_err(|e| CliError::Other(e.to_string()))?;
    let how = match out.ended {
        Ended::Detached => format!(
            "detached from process {pid} after {:.3} s (it was stopped {:.1} ms at attach, {:.1} ms at detach; {})",
            out.traced_for.as_secs_f64(),
            out.stopped_at_attach.as_secs_f64() * 1e3,
            out.stopped_at_detach.unwrap_or_default().as_secs_f64() * 1e3,
            if out.unloaded { "mtlab's library unloaded" } else { "mtlab's library left loaded, inert" }
        ),
        Ended::Exited => format!("process {pid} ended after {:.3} s of tracing", out.traced_for.as_secs_f64()),
    };
    say!("mtlab: {how}");
    if out.ended == Ended::Detached {
        let st = &out.attach_steps;
        say!(
            "mtlab: at attach, its {} threads were stopped for {:.1} ms until one was chosen; on that one dlopen took {:.1} ms, starting the trace {:.1} ms",
            st.threads,
            st.all_stopped.as_secs_f64() * 1e3,
            st.dlopen.as_secs_f64() * 1e3,
            st.begin.as_secs_f64() * 1e3
        );
        say!("mtlab: the stop at attach, step by step: {}", st.outside.line());
        say!("mtlab: inside mtlab_attach_begin: {}", st.inside.line());
        let d = &out.detach_steps;
        say!("mtlab: the stop at detach, step by step: {}", d.end.line());
        say!("mtlab: inside mtlab_attach_end: {}", d.inside.line());
        if !d.unload.0.is_empty() {
            say!("mtlab: the unload's stop (every thread), step by step: {}", d.unload.line());
        }
    }
    if let (Some(l), Some(s)) = (&cfg.live, &out.live) {
        super::say_live(&l.profile, s, "");
    }
    if let Some(t) = &out.trace {
        say!("mtlab: wrote {}; read it with `mtlab report {}`", t.display(), crate::platform::process::shell_word(t));
    }
    if let Some((url, stats)) = &out.pushed {
        say!("mtlab: {}{}", if stats.dropped > 0 { "warning: " } else { "" }, stats.summary(url));
    }
    for w in &out.warnings {
        say!("mtlab: warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
