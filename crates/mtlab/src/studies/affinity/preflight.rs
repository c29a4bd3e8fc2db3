//! Before the matrix: what on this host could spoil it, said as warnings in
//! the run (irqbalance moving interrupts, RFS steering flows to the
//! application, a governor that changes frequency, SMT, GRO/TSO state).

use std::path::Path;

use crate::study::Environment;

/// Whether a process with this command name runs (from /proc/PID/comm).
fn running(comm: &str) -> bool {
    std::fs::read_dir("/proc").is_ok_and(|rd| {
        rd.flatten().any(|e| {
            e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm)
        })
    })
}

/// Receive queues of `dev` with an RPS mask set: under interrupt steering
/// their packets would be processed on the mask's CPUs, not the interrupt's.
pub fn rps_on_device(sys_class_net: &Path, dev: &str) -> Option<String> {
    let rd = std::fs::read_dir(sys_class_net.join(dev).join("queues")).ok()?;
    let mut set: Vec<String> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .filter_map(|e| {
            let mask = std::fs::read_to_string(e.path().join("rps_cpus")).ok()?;
            let mask = mask.trim();
            mask.chars().any(|c| c != '0' && c != ',').then(|| format!("{} {mask}", e.file_name().to_string_lossy()))
        })
        .collect();
    set.sort();
    (!set.is_empty()).then(|| {
        format!(
            "RPS is set on {dev}'s receive queues ({}): their packets are processed on those CPUs, not the interrupt's; \
             clear it for the matrix (echo 0 > /sys/class/net/{dev}/queues/rx-N/rps_cpus)",
            set.join(", ")
        )
    })
}

/// `on`/`off` of one feature in `ethtool -k` output.
pub fn feature(ethtool_k: &str, name: &str) -> Option<bool> {
    ethtool_k.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().starts_with("on"))
    })
}

/// The warnings, each one line; `features` is `ethtool -k` of the receiving device.
pub fn check(env: &Environment, irq_steering: bool, features: Option<&str>, sysroot: &Path) -> Vec<String> {
    let mut w = Vec::new();
    if irq_steering && running("irqbalance") {
        w.push("irqbalance is running: it may move the device's interrupts during the matrix (stop it: systemctl stop irqbalance)".into());
    }
    let flow_entries = std::fs::read_to_string(sysroot.join("proc/sys/net/core/rps_sock_flow_entries")).unwrap_or_default();
    if flow_entries.trim().parse::<u64>().unwrap_or(0) > 0 {
        w.push(format!(
            "RFS is on (net.core.rps_sock_flow_entries = {}): on devices whose queues have rps_flow_cnt set, flows follow the application's CPU, not the flow core",
            flow_entries.trim()
        ));
    }
    match env.governor.as_deref() {
        Some("performance") | None => {}
        Some(g) => w.push(format!("the cpufreq governor is `{g}`: frequency changes with load and can blur the classes (cpupower frequency-set -g performance)")),
    }
    if env.smt == Some(true) {
        w.push("SMT is on: two logical CPUs of one core share its execution units; `mtlab topo` shows which pairs are siblings".into());
    }
    match features {
        Some(f) => {
            for (name, what) in [("generic-receive-offload", "GRO"), ("tcp-segmentation-offload", "TSO")] {
                if let Some(on) = feature(f, name) {
                    w.push(format!("{what} is {} on the receiving device", if on { "on" } else { "off" }));
                }
            }
        }
        None => w.push("ethtool is not installed: GRO/TSO state not checked (Debian: apt-get install ethtool)".into()),
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rps_masks_on_a_nic_are_named() {
        let root = tempfile::tempdir().unwrap();
        for (q, mask) in [("rx-0", "00000000"), ("rx-1", "00000003"), ("tx-0", "")] {
            let d = root.path().join("eth9/queues").join(q);
            std::fs::create_dir_all(&d).unwrap();
            if !mask.is_empty() {
                std::fs::write(d.join("rps_cpus"), format!("{mask}\n")).unwrap();
            }
        }
        let w = rps_on_device(root.path(), "eth9").unwrap();
        assert!(w.starts_with("RPS is set on eth9's receive queues (rx-1 00000003)"), "{w}");
        std::fs::write(root.path().join("eth9/queues/rx-1/rps_cpus"), "00000000,00000000\n").unwrap();
        assert_eq!(rps_on_device(root.path(), "eth9"), None);
    }

    #[test]
    fn ethtool_features_are_read() {
        let k = "Features for mtt0:\nrx-checksumming: on\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\ngeneric-receive-offload: off\nlarge-receive-offload: off [fixed]\n";
        assert_eq!(feature(k, "generic-receive-offload"), Some(false));
        assert_eq!(feature(k, "tcp-segmentation-offload"), Some(true));
        assert_eq!(feature(k, "large-receive-offload"), Some(false));
        assert_eq!(feature(k, "nope"), None);
    }

    #[test]
    fn rfs_and_a_changing_governor_are_warned_about() {
        let root = tempfile::tempdir().unwrap();
        let core = root.path().join("proc/sys/net/core");
        std::fs::create_dir_all(&core).unwrap();
        std::fs::write(core.join("rps_sock_flow_entries"), "32768\n").unwrap();
        let env = Environment { governor: Some("powersave".into()), smt: Some(false), ..Default::default() };
        let w = check(&env, false, Some("generic-receive-offload: on\n"), root.path());
        assert!(w.iter().any(|l| l.starts_with("RFS is on")), "{w:?}");
        assert!(w.iter().any(|l| l.contains("`powersave`")), "{w:?}");
        assert!(w.iter().any(|l| l == "GRO is on on the receiving device"), "{w:?}");
        assert!(!w.iter().any(|l| l.contains("SMT")), "{w:?}");
        std::fs::write(core.join("rps_sock_flow_entries"), "0\n").unwrap();
        let w = check(&Environment::default(), false, None, root.path());
        assert_eq!(w, vec!["ethtool is not installed: GRO/TSO state not checked (Debian: apt-get install ethtool)".to_string()]);
    }
}
