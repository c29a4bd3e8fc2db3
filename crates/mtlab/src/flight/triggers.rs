//! What makes the flight recorder write its window, besides `mtlab ctl PID
//! dump` (`control.rs`) and the program's death by a signal: a new `high`,
//! `oom` or `oom_kill` in the memory.events of the program's cgroup (or of a
//! cgroup above it: a limit set there counts its events there; on a hybrid
//! system whose memory controller is on cgroup v1, a new `failcnt` or
//! `oom_kill`), and memory pressure (`/proc/pressure/memory`) crossing a
//! `--pressure` threshold.

use std::path::{Path, PathBuf};


/// `--pressure`: `some|full avg10|avg60|avg300 >|>= PERCENT`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    pub full: bool,
    /// 10, 60 or 300 (seconds of the average).
    pub avg: u32,
    pub at_least: bool,
    pub percent: f64,
}

impl Pressure {
    /// Parses `some avg10>20` (spaces optional, `>=` too).
    pub fn parse(s: &str) -> Result<Pressure, String> {
        let bad = || {
            format!(
                "--pressure {s:?}: expected `some|full avg10|avg60|avg300>PERCENT` (e.g. `some avg10>20`: more than 20 % \
                 of the last 10 s some task waited for memory), as in /proc/pressure/memory"
            )
        };
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let (full, rest) = if let Some(r) = t.strip_prefix("some") {
            (false, r)
        } else if let Some(r) = t.strip_prefix("full") {
            (true, r)
        } else {
            return Err(bad());
        };
        let rest = rest.strip_prefix("avg").ok_or_else(bad)?;
        let (avg, rest) = ["10", "60", "300"]
            .iter()
            .find_map(|a| rest.strip_prefix(a).map(|r| (a.parse::<u32>().expect("a number"), r)))
            .ok_or_else(bad)?;
        let (at_least, num) = match rest.strip_prefix(">=") {
            Some(n) => (true, n),
            None => (false, rest.strip_prefix('>').ok_or_else(bad)?),
        };
        let percent: f64 = num.trim_end_matches('%').parse().map_err(|_| bad())?;
        if !(0.0..=100.0).contains(&percent) {
            return Err(format!("--pressure {s:?}: the threshold is a percentage, 0 to 100"));
        }
        Ok(Pressure { full, avg, at_least, percent })
    }

    fn holds(&self, value: f64) -> bool {
        if self.at_least {
            value >= self.percent
        } else {
            value > self.percent
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} avg{}{}{}",
            if self.full { "full" } else { "some" },
            self.avg,
            if self.at_least { ">=" } else { ">" },
            self.percent
        )
    }
}

/// The `avgN` value of the `some` or `full` line of a PSI file.
pub fn psi_value(text: &str, full: bool, avg: u32) -> Option<f64> {
    let kind = if full { "full" } else { "some" };
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(kind))?;
    let key = format!("avg{avg}=");
    line.split_whitespace().find_map(|f| f.strip_prefix(key.as_str())?.parse().ok())
}

pub const PSI_MEMORY: &str = "/proc/pressure/memory";

/// Fires when the pressure goes from below the threshold to above it.
pub struct PressureWatch {
    spec: Pressure,
    path: PathBuf,
    above: bool,
}

impl PressureWatch {
    /// Err: why there is no PSI to read here (the kernel has none, or it is off).
    pub fn new(spec: Pressure, path: &Path) -> Result<PressureWatch, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "--pressure: cannot read {} ({e}): this kernel has no pressure stall information (CONFIG_PSI, or \
                 psi=0 on its command line); recording goes on without the pressure trigger",
                path.display()
            )
        })?;
        psi_value(&text, spec.full, spec.avg)
            .ok_or_else(|| format!("--pressure: {} has no `{}` line with avg{}", path.display(), if spec.full { "full" } else { "some" }, spec.avg))?;
        Ok(PressureWatch { spec, path: path.to_path_buf(), above: false })
    }

    /// The trigger's description when the threshold is newly crossed.
    pub fn poll(&mut self) -> Option<String> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        self.check(&text)
    }

    /// Fires again at the next poll that finds the threshold crossed.
    pub fn rearm(&mut self) {
        self.above = false;
    }

    fn check(&mut self, text: &str) -> Option<String> {
        let v = psi_value(text, self.spec.full, self.spec.avg)?;
        let was = std::mem::replace(&mut self.above, self.spec.holds(v));
        (self.above && !was).then(|| format!("memory pressure ({} memory avg{}={v:.2}, threshold {})", if self.spec.full { "full" } else { "some" }, self.spec.avg, self.spec.describe()))
    }
}

/// The value of `key` in a `key value` lines text (memory.events,
/// memory.oom_control); `None` as key: the whole text is one number.
pub fn events_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The cgroup path of a /proc/PID/cgroup text: of the v2 hierarchy (`0::`),
/// or with `v1_controller`, of that v1 controller's line.
pub fn cgroup_of(proc_cgroup: &str, v1_controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_id, ctl, path) = (f.next()?, f.next()?, f.next()?);
        let ok = match v1_controller {
            None => ctl.is_empty(),
            Some(c) => ctl.split(',').any(|x| x == c),
        };
        ok.then(|| path.to_string())
    })
}

/// Mount points from a /proc/self/mountinfo text: the cgroup v2 hierarchy's
/// and the v1 memory controller's.
pub fn cgroup_mounts(mountinfo: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1_memory) = (None, None);
    for l in mountinfo.lines() {
        let Some((left, right)) = l.split_once(" - ") else { continue };
        let Some(mount) = left.split_whitespace().nth(4) else { continue };
        let mut r = right.split_whitespace();
        let (fstype, _source, opts) = (r.next(), r.next(), r.next().unwrap_or(""));
        match fstype {
            Some("cgroup2") => v2 = v2.or(Some(PathBuf::from(mount))),
            Some("cgroup") if opts.split(',').any(|o| o == "memory") => v1_memory = v1_memory.or(Some(PathBuf::from(mount))),
            _ => {}
        }
    }
    (v2, v1_memory)
}

/// The counters watched (file, key) with cgroup v2 and with a v1 memory hierarchy.
const V2_COUNTERS: [(&str, Option<&str>); 3] = [("memory.events", Some("high")), ("memory.events", Some("oom")), ("memory.events", Some("oom_kill"))];
const V1_COUNTERS: [(&str, Option<&str>); 2] = [("memory.failcnt", None), ("memory.oom_control", Some("oom_kill"))];

/// One counter that triggers a dump when it grows.
struct Counter {
    file: PathBuf,
    /// The key of its line; None: the file is the number (memory.failcnt).
    key: Option<&'static str>,
    last: u64,
}

impl Counter {
    fn read(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.file).ok()?;
        match self.key {
            Some(k) => events_value(&text, k),
            None => text.trim().parse().ok(),
        }
    }
}

/// Watches the memory counters of the program's cgroup and of every cgroup
/// above it: with cgroup v2, memory.events `high`, `oom`, `oom_kill`; where
/// the memory controller is on a v1 hierarchy (hybrid systems), its
/// `memory.failcnt` (the limit was hit) and memory.oom_control `oom_kill`.
pub struct CgroupWatch {
    counters: Vec<Counter>,
    /// The program, and its /proc/PID/cgroup when the counters were found:
    /// a program moved to another cgroup is watched there.
    pid: u32,
    seen: String,
    /// The last growth of an `oom_kill` counter, said: the program's
    /// SIGKILL is then the OOM killer's.
    pub oom_kill: Option<String>,
}

impl CgroupWatch {
    /// For process `pid`. Err: why not (no cgroup with a memory controller).
    pub fn new(pid: u32) -> Result<CgroupWatch, String> {
        let proc_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let counters = Self::counters(&proc_cgroup).ok_or_else(|| {
            "no cgroup memory controller to watch (no cgroup v2 memory.events, nor a v1 memory hierarchy, for the \
             program's cgroup): recording goes on without the cgroup trigger"
                .to_string()
        })?;
        Ok(CgroupWatch { counters, pid, seen: proc_cgroup, oom_kill: None })
    }

    fn counters(proc_cgroup: &str) -> Option<Vec<Counter>> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let (v2, v1) = cgroup_mounts(&mountinfo);
        let v2 = (v2, cgroup_of(proc_cgroup, None), &V2_COUNTERS[..]);
        let v1 = (v1, cgroup_of(proc_cgroup, Some("memory")), &V1_COUNTERS[..]);
        [v2, v1].into_iter().find_map(|(mount, path, files)| {
            let counters = Self::chain(&mount?, &path?, files);
            (!counters.is_empty()).then_some(counters)
        })
    }

    fn chain(root: &Path, path: &str, files: &[(&str, Option<&'static str>)]) -> Vec<Counter> {
        let mut out = Vec::new();
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            for &(name, key) in files {
                let mut c = Counter { file: dir.join(name), key, last: 0 };
                if let Some(v) = c.read() {
                    c.last = v;
                    out.push(c);
                }
            }
            if dir == root || !dir.pop() || !dir.starts_with(root) {
                break;
            }
        }
        out
    }

    /// The trigger's description when a counter grew since the last poll.
    pub fn poll(&mut self) -> Option<String> {
        // Moved (by hand, or by a service manager): watch the new place.
        if let Ok(now) = std::fs::read_to_string(format!("/proc/{}/cgroup", self.pid)) {
            if now != self.seen {
                if let Some(c) = Self::counters(&now) {
                    self.counters = c;
                }
                self.seen = now;
            }
        }
        let mut grew = Vec::new();
        for c in &mut self.counters {
            let Some(now) = c.read() else { continue };
            if now > c.last {
                let what = c.key.unwrap_or("failcnt");
                let said = format!("{} {what} {} → {now}", c.file.display(), c.last);
                if what == "oom_kill" {
                    self.oom_kill = Some(said.clone());
                }
                grew.push(said);
            }
            c.last = now;
        }
        (!grew.is_empty()).then(|| format!("cgroup memory event ({})", grew.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format of /proc/pressure/memory (Documentation/accounting/psi.rst).
    const PSI: &str = "some avg10=25.31 avg60=3.10 avg300=0.67 total=1234567\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn pressure_thresholds_parse() {
        assert_eq!(Pressure::parse("some avg10>20"), Ok(Pressure { full: false, avg: 10, at_least: false, percent: 20.0 }));
        assert_eq!(Pressure::parse("full avg300 >= 5.5%"), Ok(Pressure { full: true, avg: 300, at_least: true, percent: 5.5 }));
        for bad in ["", "some", "some avg20>1", "most avg10>1", "some avg10<1", "some avg10>x", "some avg10>101"] {
            assert!(Pressure::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn psi_lines_are_read_by_kind_and_average() {
        assert_eq!(psi_value(PSI, false, 10), Some(25.31));
        assert_eq!(psi_value(PSI, false, 300), Some(0.67));
        assert_eq!(psi_value(PSI, true, 10), Some(0.0));
        assert_eq!(psi_value("some avg10=1.00\n", true, 10), None);
    }

    #[test]
    fn pressure_fires_on_crossing_only() {
        let spec = Pressure::parse("some avg10>20").unwrap();
        let mut w = PressureWatch { spec, path: PathBuf::new(), above: false };
        let low = PSI.replace("avg10=25.31", "avg10=3.00");
        assert_eq!(w.check(&low), None);
        assert!(w.check(PSI).unwrap().contains("avg10=25.31"));
        assert_eq!(w.check(PSI), None, "still above: no second dump");
        assert_eq!(w.check(&low), None);
        assert!(w.check(PSI).is_some(), "crossed again");
    }

    #[test]
    fn a_kernel_without_psi_is_said_so() {
        let spec = Pressure::parse("some avg10>20").unwrap();
        let e = PressureWatch::new(spec, Path::new("/nonexistent/pressure/memory")).err().unwrap();
        assert!(e.contains("no pressure stall information") && e.contains("goes on without"), "{e}");
    }

    #[test]
    fn the_real_psi_file_parses_when_the_kernel_has_one() {
        match std::fs::read_to_string(PSI_MEMORY) {
            Ok(t) => assert!(psi_value(&t, false, 10).is_some(), "{t}"),
            Err(e) => eprintln!("SKIPPED no {PSI_MEMORY} here: {e}"),
        }
    }

    #[test]
    fn memory_events_and_cgroup_lines_parse() {
        let ev = "low 0\nhigh 17\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(events_value(ev, "high"), Some(17));
        assert_eq!(events_value(ev, "oom_kill"), Some(1));
        let cg = "4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/user.slice/a.scope\n";
        assert_eq!(cgroup_of(cg, None), Some("/user.slice/a.scope".into()));
        assert_eq!(cgroup_of(cg, Some("memory")), Some("/process_api/x".into()));
        assert_eq!(cgroup_of(cg, Some("cpuacct")), Some("/".into()));
        assert_eq!(cgroup_of("12:memory:/x\n", None), None);
        let mi = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup_mounts(mi), (Some("/sys/fs/cgroup/unified".into()), Some("/sys/fs/cgroup/memory".into())));
    }

    #[test]
    fn a_growing_counter_fires_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.events");
        std::fs::write(&f, "high 0\noom 0\noom_kill 0\n").unwrap();
        let n = dir.path().join("memory.failcnt");
        std::fs::write(&n, "5\n").unwrap();
        let counters = CgroupWatch::chain(dir.path(), "/", &[("memory.events", Some("high")), ("memory.failcnt", None)]);
        let mut w = CgroupWatch { counters, pid: 0, seen: String::new(), oom_kill: None };
        assert_eq!(w.counters.len(), 2);
        assert_eq!(w.poll(), None);
        std::fs::write(&f, "high 2\noom 0\noom_kill 0\n").unwrap();
        assert!(w.poll().unwrap().contains("high 0 → 2"));
        assert_eq!(w.poll(), None);
        std::fs::write(&n, "6\n").unwrap();
        assert!(w.poll().unwrap().contains("failcnt 5 → 6"));
    }
}
