//! Per-CPU counters over one flow, kernel time included (protocol processing
//! runs in softirq): hardware events through perf_event_open where the CPU
//! and hypervisor offer them, software events (context switches,
//! migrations), and from /proc busy and softirq time and NET_RX softirqs.
//! The study divides each by the gigabytes delivered.

use std::collections::BTreeMap;

use std::path::Path;

use perf_event::events::{Dynamic, Event, Hardware, Software};
use perf_event::{Builder, Counter};

use crate::studies::StudyError;

/// A counter's name in metrics (`flow_<name>_per_gb`) and its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub name: &'static str,
    pub unit: &'static str,
    pub hardware: bool,
}

const HARDWARE: [(Kind, Hardware); 4] = [
    (Kind { name: "instructions", unit: "instructions", hardware: true }, Hardware::INSTRUCTIONS),
    (Kind { name: "cycles", unit: "cycles", hardware: true }, Hardware::CPU_CYCLES),
    // The generic cache events count the last-level cache on x86.
    (Kind { name: "llc_references", unit: "references", hardware: true }, Hardware::CACHE_REFERENCES),
    (Kind { name: "llc_misses", unit: "misses", hardware: true }, Hardware::CACHE_MISSES),
];

/// L2 events under the names CPUs give them in their PMU's sysfs `events/`
/// (Arm lists `l2d_cache` and `l2d_cache_refill` there); the generic perf
/// events have no L2 event.
const L2: [(Kind, &[&str]); 2] = [
    (Kind { name: "l2_references", unit: "references", hardware: true }, &["l2d_cache", "l2_rqsts.references", "l2_cache_accesses"]),
    (Kind { name: "l2_misses", unit: "misses", hardware: true }, &["l2d_cache_refill", "l2_rqsts.miss", "l2_cache_misses"]),
];

/// Where the kernel lists its PMUs.
const PMUS: &str = "/sys/bus/event_source/devices";

/// The L2 events a core PMU under `devices` names, built from its sysfs
/// format and event files.
pub fn named_l2_events(devices: &Path) -> Vec<(Kind, Dynamic)> {
    let Ok(rd) = std::fs::read_dir(devices) else { return Vec::new() };
    let mut pmus: Vec<std::path::PathBuf> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == "cpu" || n.starts_with("cpu_") || n.starts_with("armv8") || n.starts_with("armv9")
        })
        .map(|e| e.path())
        .collect();
    pmus.sort();
    let mut out = Vec::new();
    for (kind, names) in L2 {
        'found: for pmu in &pmus {
            for name in names {
                if !pmu.join("events").join(name).exists() {
                    continue;
                }
                let built = perf_event::events::DynamicBuilder::new(pmu).and_then(|mut b| {
                    b.event(name)?;
                    b.build().map_err(std::io::Error::other)
                });
                if let Ok(ev) = built {
                    out.push((kind, ev));
                    break 'found;
                }
            }
        }
    }
    out
}

const SOFTWARE: [(Kind, Software); 2] = [
    (Kind { name: "context_switches", unit: "switches", hardware: false }, Software::CONTEXT_SWITCHES),
    (Kind { name: "migrations", unit: "migrations", hardware: false }, Software::CPU_MIGRATIONS),
];

/// Read from /proc for every CPU, needing no permission.
pub const PROC: [Kind; 3] = [
    Kind { name: "busy_ms", unit: "ms", hardware: false },
    Kind { name: "softirq_ms", unit: "ms", hardware: false },
    Kind { name: "net_rx", unit: "softirqs", hardware: false },
];

pub struct CpuCounters {
    open: Vec<(usize, Kind, Counter)>,
    cpus: Vec<usize>,
    /// Said once in the run's notes (e.g. no hardware counters in this VM).
    pub notes: Vec<String>,
}

/// Counter values by (CPU, counter name), cumulative.
pub type Snapshot = BTreeMap<(usize, &'static str), f64>;

fn open_one<E: Event + Clone>(event: E, cpu: usize) -> std::io::Result<Counter> {
    let mut c = Builder::new(event).one_cpu(cpu).any_pid().include_kernel().exclude_hv(false).build()?;
    c.enable()?;
    Ok(c)
}

/// Opens one event on every CPU, or on none (a counter missing on some CPUs
/// would make the flow and application figures incomparable).
fn open_everywhere<E: Event + Clone>(ev: E, kind: Kind, cpus: &[usize], open: &mut Vec<(usize, Kind, Counter)>) -> std::io::Result<()> {
    let mut got = Vec::new();
    for &cpu in cpus {
        got.push((cpu, kind, open_one(ev.clone(), cpu)?));
    }
    open.extend(got);
    Ok(())
}

impl CpuCounters {
    /// Opens every counter on every CPU. Software events that the kernel
    /// refuses are an error (they are the point of the study); hardware ones
    /// that do not exist here are left out with a note.
    pub fn open(cpus: &[usize]) -> Result<CpuCounters, StudyError> {
        let mut open = Vec::new();
        let mut notes = Vec::new();
        for &cpu in cpus {
            for (kind, ev) in SOFTWARE {
                let c = open_one(ev, cpu).map_err(|e| refused(kind.name, cpu, &e))?;
                open.push((cpu, kind, c));
            }
        }
        for (kind, ev) in HARDWARE {
            if let Err(e) = open_everywhere(ev, kind, cpus, &mut open) {
                notes.push(format!("hardware counter {} is not available here (perf_event_open: {e}); it is left out", kind.name));
            }
        }
        if notes.len() == HARDWARE.len() {
            // No PMU at all: say it once, and do not look for L2 events.
            notes = vec![format!(
                "hardware counters (instructions, cycles, LLC and L2 references and misses) are not available on this machine ({}); \
                 only software counters and /proc figures are reported",
                if crate::study::Environment::read().virtualized == Some(true) { "a virtual machine without a virtual PMU" } else { "perf_event_open refused them" }
            )];
            return Ok(CpuCounters { open, cpus: cpus.to_vec(), notes });
        }
        let l2 = named_l2_events(Path::new(PMUS));
        if l2.is_empty() {
            notes.push("this CPU's PMU names no L2 event in sysfs (the generic perf events have none): L2 is not counted".into());
        }
        for (kind, ev) in l2 {
            if let Err(e) = open_everywhere(ev, kind, cpus, &mut open) {
                notes.push(format!("{} (the PMU's own L2 event) could not be counted: perf_event_open: {e}", kind.name));
            }
        }
        Ok(CpuCounters { open, cpus: cpus.to_vec(), notes })
    }

    /// The counters this run has, in a stable order.
    pub fn kinds(&self) -> Vec<Kind> {
        let mut v: Vec<Kind> = PROC.to_vec();
        for (_, k, _) in &self.open {
            if !v.contains(k) {
                v.push(*k);
            }
        }
        v
    }

    pub fn snapshot(&mut self) -> Result<Snapshot, StudyError> {
        let mut s = proc_snapshot(&self.cpus)?;
        for (cpu, kind, c) in &mut self.open {
            let d = c.read_full().map_err(|source| StudyError::Io { path: format!("perf counter {} on CPU {cpu}", kind.name).into(), source })?;
            // Scaled for multiplexing: the count over the share of time it ran.
            let scale = match (d.time_enabled(), d.time_running()) {
                (Some(e), Some(r)) if !r.is_zero() => e.as_secs_f64() / r.as_secs_f64(),
                _ => 1.0,
            };
            s.insert((*cpu, kind.name), d.count() as f64 * scale);
        }
        Ok(s)
    }
}

fn refused(name: &str, cpu: usize, e: &std::io::Error) -> StudyError {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").map(|s| s.trim().to_string()).unwrap_or_default();
    StudyError::Config(format!(
        "cannot count {name} on CPU {cpu}: perf_event_open: {e} (kernel.perf_event_paranoid is {paranoid}; counting a whole CPU \
         needs root, CAP_PERFMON or `sysctl kernel.perf_event_paranoid=0`; or run without counters: --no-counters)"
    ))
}

/// `after - before` for every key both have.
pub fn delta(before: &Snapshot, after: &Snapshot) -> Snapshot {
    after.iter().filter_map(|(k, a)| before.get(k).map(|b| (*k, (a - b).max(0.0)))).collect()
}

fn proc_snapshot(cpus: &[usize]) -> Result<Snapshot, StudyError> {
    let read = |p: &str| std::fs::read_to_string(p).map_err(|source| StudyError::Io { path: p.into(), source });
    let mut s = parse_stat(&read("/proc/stat")?, clock_ticks());
    s.extend(parse_softirqs(&read("/proc/softirqs")?));
    s.retain(|(cpu, _), _| cpus.contains(cpu));
    Ok(s)
}

/// How busy each CPU is with work that is not the study's: /proc busy time
/// over `quiet` while no flow runs, as a fraction of that time (0..1).
pub fn background_busy(cpus: &[usize], quiet: std::time::Duration) -> Result<BTreeMap<usize, f64>, StudyError> {
    let (a, t0) = (proc_snapshot(cpus)?, std::time::Instant::now());
    std::thread::sleep(quiet);
    let (b, t1) = (proc_snapshot(cpus)?, std::time::Instant::now());
    let wall_ms = (t1 - t0).as_secs_f64() * 1000.0;
    let d = delta(&a, &b);
    Ok(cpus.iter().map(|&c| (c, (d.get(&(c, "busy_ms")).copied().unwrap_or(0.0) / wall_ms).clamp(0.0, 1.0))).collect())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// busy_ms (user, nice, system, irq, softirq) and softirq_ms per CPU from /proc/stat.
fn parse_stat(text: &str, hz: f64) -> Snapshot {
    let mut s = Snapshot::new();
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let Some(cpu) = f.next().and_then(|n| n.strip_prefix("cpu")).and_then(|n| n.parse::<usize>().ok()) else { continue };
        let v: Vec<f64> = f.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 7 {
            continue;
        }
        let ms = |t: f64| t * 1000.0 / hz;
        s.insert((cpu, "busy_ms"), ms(v[0] + v[1] + v[2] + v[5] + v[6]));
        s.insert((cpu, "softirq_ms"), ms(v[6]));
    }
    s
}

/// NET_RX softirqs per CPU from /proc/softirqs (columns named CPU0, CPU1, ...).
fn parse_softirqs(text: &str) -> Snapshot {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Snapshot::new() };
    let cols: Vec<Option<usize>> = header.split_whitespace().map(|c| c.strip_prefix("CPU").and_then(|n| n.parse().ok())).collect();
    let mut s = Snapshot::new();
    if let Some(l) = lines.find(|l| l.trim_start().starts_with("NET_RX:")) {
        for (i, v) in l.split_whitespace().skip(1).enumerate() {
            if let (Some(Some(cpu)), Ok(v)) = (cols.get(i), v.parse::<f64>()) {
                s.insert((*cpu, "net_rx"), v);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_and_softirqs_are_read_per_cpu() {
        let stat = "cpu  10 0 5 100 0 0 3 0 0 0\ncpu0 4 1 2 50 9 1 2 7 0 0\ncpu3 6 0 3 50 0 0 1 0 0 0\nintr 5\n";
        let s = parse_stat(stat, 100.0);
        // user+nice+system+irq+softirq = 4+1+2+1+2 ticks of 10 ms; iowait and steal are not busy.
        assert_eq!(s[&(0, "busy_ms")], 100.0);
        assert_eq!(s[&(0, "softirq_ms")], 20.0);
        assert_eq!(s[&(3, "busy_ms")], 100.0);
        assert!(!s.contains_key(&(1, "busy_ms")));
        let soft = "                    CPU0       CPU2\n          HI:          0          1\n      NET_RX:        539        767\n";
        let n = parse_softirqs(soft);
        assert_eq!(n[&(0, "net_rx")], 539.0);
        assert_eq!(n[&(2, "net_rx")], 767.0);
        assert_eq!(n.len(), 2);
    }

    #[test]
    fn l2_events_are_taken_from_the_pmus_own_names() {
        let root = tempfile::tempdir().unwrap();
        let pmu = root.path().join("armv8_pmuv3_0");
        std::fs::create_dir_all(pmu.join("format")).unwrap();
        std::fs::create_dir_all(pmu.join("events")).unwrap();
        std::fs::write(pmu.join("type"), "8\n").unwrap();
        std::fs::write(pmu.join("format/event"), "config:0-15\n").unwrap();
        std::fs::write(pmu.join("events/l2d_cache"), "event=0x0016\n").unwrap();
        std::fs::write(pmu.join("events/l2d_cache_refill"), "event=0x0017\n").unwrap();
        // Not a core PMU: ignored.
        std::fs::create_dir_all(root.path().join("software/events")).unwrap();
        let found = named_l2_events(root.path());
        let names: Vec<&str> = found.iter().map(|(k, _)| k.name).collect();
        assert_eq!(names, ["l2_references", "l2_misses"]);
        let debug = format!("{:?}", found[1].1);
        assert!(debug.contains("ty: 8") && debug.contains("config: 23"), "{debug}");
        std::fs::remove_file(pmu.join("events/l2d_cache_refill")).unwrap();
        assert_eq!(named_l2_events(root.path()).len(), 1);
        assert!(named_l2_events(&root.path().join("none")).is_empty());
    }

    #[test]
    fn deltas_never_go_negative() {
        let a: Snapshot = [((0, "net_rx"), 10.0), ((1, "net_rx"), 5.0)].into();
        let b: Snapshot = [((0, "net_rx"), 25.0), ((1, "net_rx"), 4.0)].into();
        let d = delta(&a, &b);
        assert_eq!(d[&(0, "net_rx")], 15.0);
        assert_eq!(d[&(1, "net_rx")], 0.0);
    }

    #[test]
    fn a_busy_loop_on_a_cpu_is_seen_as_background_load() {
        let cpu = crate::study::env::allowed_cpus()[0];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let spin = std::thread::spawn(move || {
            crate::studies::child::pin_thread(&[cpu]).unwrap();
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let bg = background_busy(&[cpu], std::time::Duration::from_millis(300)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spin.join().unwrap();
        // /proc/stat counts in ticks of 10 ms; other tests share the CPU with the loop.
        assert!(bg[&cpu] > 0.4, "{bg:?}");
    }

    #[test]
    fn this_machine_counts_software_events() {
        // Needs root or perf_event_paranoid <= 0, as the tests run.
        let cpus = crate::study::env::allowed_cpus();
        let mut c = CpuCounters::open(&cpus[..1]).unwrap();
        let a = c.snapshot().unwrap();
        for _ in 0..50 {
            std::thread::yield_now();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let b = c.snapshot().unwrap();
        let d = delta(&a, &b);
        assert!(d.contains_key(&(cpus[0], "context_switches")), "{d:?}");
        assert!(c.kinds().iter().any(|k| k.name == "net_rx"));
    }
}
