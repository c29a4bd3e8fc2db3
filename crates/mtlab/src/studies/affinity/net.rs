//! The study's own network: a namespace holding the receiver, joined to the
//! host by a veth pair, addressed from 198.18.0.0/15 (the range RFC 2544
//! reserves for benchmarks), so no traffic leaves the machine. Receive
//! processing of the flow is steered by the receiving veth's RPS mask.
//!
//! Made with iproute2's `ip`, the tool every Linux host has for it.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

use super::journal::{Journal, Undo};
use crate::platform::names;
use crate::studies::StudyError;

pub struct Netns {
    pub name: String,
    /// The receiving end, inside the namespace.
    pub ns_if: String,
    pub host_if: String,
    pub host_addr: Ipv4Addr,
    pub ns_addr: Ipv4Addr,
    /// /run/netns/NAME, open for setns.
    file: File,
}

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip` (Debian: apt-get install iproute2): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

pub fn delete_netns(name: &str) -> Result<(), String> {
    match ip(&["netns", "delete", name]) {
        Ok(_) => Ok(()),
        // Already gone is what we wanted.
        Err(e) if e.contains("No such file") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Namespaces this study made, with the pid of the run that made each.
pub fn mtlab_namespaces() -> Vec<(String, u32)> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|n| names::affinity_netns_pid(&n).map(|pid| (n, pid)))
        .collect()
}

/// A pair of addresses of a /30 inside 198.18.0.0/15, distinct per pid so
/// that concurrent runs do not clash on the host side.
fn addresses(pid: u32) -> (Ipv4Addr, Ipv4Addr) {
    let block = pid % (1 << 15); // 2^17 addresses in the /15, 4 per block
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + block * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

impl Netns {
    /// Creates the namespace and the veth pair, noting them in the journal first.
    pub fn create(journal: &Journal) -> Result<Netns, StudyError> {
        let pid = std::process::id();
        let name = names::affinity_netns(pid);
        let (host_if, ns_if) = (format!("mtaf{pid}h"), format!("mtaf{pid}n"));
        let (host_addr, ns_addr) = addresses(pid);
        journal.note(Undo::Netns { name: name.clone() })?;
        let fail = |e: String| StudyError::Config(format!("cannot build the study's network namespace: {e}"));
        ip(&["netns", "add", &name]).map_err(fail)?;
        let host_cidr = format!("{host_addr}/30");
        let ns_cidr = format!("{ns_addr}/30");
        for args in [
            vec!["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &name],
            vec!["addr", "add", &host_cidr, "dev", &host_if],
            vec!["link", "set", &host_if, "up"],
            vec!["-n", &name, "addr", "add", &ns_cidr, "dev", &ns_if],
            vec!["-n", &name, "link", "set", &ns_if, "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
        ] {
            ip(&args).map_err(fail)?;
        }
        let path = format!("/run/netns/{name}");
        let file = File::open(&path).map_err(|source| StudyError::Io { path: path.into(), source })?;
        Ok(Netns { name, ns_if, host_if, host_addr, ns_addr, file })
    }

    /// Makes `cmd`'s process start inside the namespace.
    pub fn put_command_in(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let fd = self.file.as_raw_fd();
        // SAFETY: between fork and exec the closure only calls setns, a
        // system call, on the namespace file the child inherited open.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Runs a shell command inside the namespace with its own sysfs view
    /// (`ip netns exec` remounts /sys for the namespace).
    fn exec_sh(&self, script: &str) -> Result<String, String> {
        ip(&["netns", "exec", &self.name, "sh", "-c", script])
    }

    /// Steers the receiving veth's packets to `cpu` (its RPS mask, every receive queue).
    pub fn set_rps(&self, cpu: usize) -> Result<(), StudyError> {
        let mask = rps_mask(&[cpu]);
        self.exec_sh(&format!("for q in /sys/class/net/{}/queues/rx-*; do echo {mask} > $q/rps_cpus || exit 1; done", self.ns_if))
            .map(|_| ())
            .map_err(|e| StudyError::Config(format!("cannot set the RPS mask of {}: {e}", self.ns_if)))
    }

    /// `ethtool -k` of the receiving veth, for the pre-flight (None when ethtool is missing).
    pub fn features(&self) -> Option<String> {
        self.exec_sh(&format!("ethtool -k {}", self.ns_if)).ok()
    }
}

/// A CPU mask as sysfs takes it: hex words of 32 bits, comma-separated, most significant first.
pub fn rps_mask(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    w.iter().rev().map(|x| format!("{x:08x}")).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_sysfs_words() {
        assert_eq!(rps_mask(&[0]), "00000001");
        assert_eq!(rps_mask(&[1]), "00000002");
        assert_eq!(rps_mask(&[33]), "00000002,00000000");
        assert_eq!(rps_mask(&[0, 5]), "00000021");
    }

    #[test]
    fn addresses_stay_in_the_benchmark_range_and_differ_by_pid() {
        for pid in [1, 2, 4_194_303, 32_767, 32_768] {
            let (h, n) = addresses(pid);
            assert_eq!(h.octets()[0], 198);
            assert!(h.octets()[1] == 18 || h.octets()[1] == 19, "{h}");
            assert_eq!(u32::from(n), u32::from(h) + 1);
            assert_eq!(u32::from(h) % 4, 1);
        }
        assert_ne!(addresses(100), addresses(101));
    }
}
