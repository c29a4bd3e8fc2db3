//! Reading the environment a run measures: kernel, CPUs, libc, governor.
//! Everything here is best effort: what cannot be read stays `None`.

use std::path::Path;

use super::model::Environment;

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// CPUs as a compact list: `0-3,6`.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// The CPUs this process may run on (its affinity mask).
/// Parses a CPU list (`0-3,6`, as sysfs and taskset write them) into sorted, distinct CPUs.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let num = |s: &str| s.trim().parse::<usize>().map_err(|_| format!("`{s}` is not a CPU number (expected e.g. 0-3,6)"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a {
                    return Err(format!("`{part}`: the range runs backwards"));
                }
                if b - a > 1 << 16 {
                    return Err(format!("`{part}`: more CPUs than any machine has"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is valid; sched_getaffinity fills at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size and pointer describe `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads a bit of the initialized set; i < CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&i| unsafe { libc::CPU_ISSET(i, &set) }).collect()
}

fn uname() -> (String, String, String) {
    // SAFETY: an all-zero utsname is valid; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid utsname to fill.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (s(&u.nodename), s(&u.release), s(&u.version))
}

/// Where a PREEMPT_DYNAMIC kernel shows (and, if allowed, switches) its preemption model.
pub const PREEMPT_FILE: &str = "/sys/kernel/debug/sched/preempt";

/// The kernel's preemption model: debugfs knows the live one on
/// PREEMPT_DYNAMIC kernels (`none voluntary (full)`); otherwise the build string tells.
fn preemption(version: &str) -> Option<String> {
    if let Some(s) = read_trim(PREEMPT_FILE) {
        if let Some(live) = s.split_whitespace().find(|w| w.starts_with('(')) {
            return Some(live.trim_matches(|c| c == '(' || c == ')').to_string());
        }
    }
    preemption_from_build(version)
}

/// The preemption model a kernel was built with, from its `uname -v` string.
fn preemption_from_build(version: &str) -> Option<String> {
    if version.contains("PREEMPT_RT") {
        Some("rt".into())
    } else if version.contains("PREEMPT_DYNAMIC") {
        Some("dynamic (live model not readable without debugfs)".into())
    } else if version.contains("PREEMPT") {
        Some("full".into())
    } else {
        None
    }
}

fn cpuinfo_field(text: &str, key: &str) -> Option<String> {
    text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string())
}

/// glibc's own version string.
pub fn libc_version() -> String {
    extern "C" {
        fn gnu_get_libc_version() -> *const libc::c_char;
    }
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) }.to_string_lossy().into_owned()
}

/// The installed version of a Debian package, if dpkg knows it.
pub fn package_version(package: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", package])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

impl Environment {
    /// The environment of this process, now.
    pub fn read() -> Environment {
        let (host, kernel, kernel_version) = uname();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let allowed = allowed_cpus();
        let governor = allowed
            .first()
            .and_then(|c| read_trim(format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor")));
        Environment {
            preemption: preemption(&kernel_version),
            host,
            kernel,
            kernel_version,
            cpu_model: cpuinfo_field(&cpuinfo, "model name"),
            // SAFETY: sysconf has no preconditions.
            cpus_online: unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(0) as u32,
            smt: read_trim("/sys/devices/system/cpu/smt/active").map(|s| s == "1"),
            cpu_set: cpu_list(&allowed),
            governor,
            libc: libc_version(),
            software: Default::default(),
            virtualized: cpuinfo_field(&cpuinfo, "flags").map(|f| f.split_whitespace().any(|w| w == "hypervisor")),
        }
    }
}

/// Now, as RFC 3339 in UTC with second precision.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    rfc3339(secs as i64)
}

pub use crate::units::rfc3339;

/// `YYYY-MM-DDTHH:MM:SSZ` (as [`rfc3339`] writes it) as seconds since the
/// epoch (days-from-civil); None for any other form.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_back() {
        for secs in [0, 951_782_400, 1_795_467_723, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs));
        }
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-11-23 21:02:03"), None);
    }

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(cpu_list(&[0, 2, 4, 5]), "0,2,4-5");
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,6"), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("6,0-1,1\n"), Ok(vec![0, 1, 6]));
        assert_eq!(parse_cpu_list(""), Ok(vec![]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("0-99999999").is_err());
        for l in ["0-3,6", "1", "0,2,4-5"] {
            assert_eq!(cpu_list(&parse_cpu_list(l).unwrap()), l);
        }
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_467_723), "2026-11-23T21:02:03Z");
    }

    #[test]
    fn the_live_environment_is_read() {
        let e = Environment::read();
        assert!(!e.kernel.is_empty());
        assert!(e.cpus_online >= 1);
        assert!(!e.cpu_set.is_empty());
        assert!(e.libc.starts_with("2."), "{}", e.libc);
    }

    #[test]
    fn preemption_from_the_build_string() {
        assert_eq!(preemption_from_build("#1 SMP PREEMPT_RT Debian 6.1").as_deref(), Some("rt"));
        assert_eq!(preemption_from_build("#1 SMP PREEMPT Debian 6.1").as_deref(), Some("full"));
        assert!(preemption_from_build("#1 SMP PREEMPT_DYNAMIC Debian").unwrap().starts_with("dynamic"));
        assert_eq!(preemption_from_build("#1 SMP Debian 6.1.0"), None);
    }
}
