//! `--steer irq --dev DEV`: a real NIC's receive interrupts, found from sysfs
//! and /proc/interrupts, all pointed at the flow core (through the journal,
//! so they are put back), and the device's IPv4 address for the receiver.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::journal::Journal;
use crate::studies::StudyError;

/// One interrupt line of the device.
#[derive(Debug, Clone, PartialEq)]
pub struct Irq {
    pub number: u32,
    /// Its name in /proc/interrupts (`eth0-TxRx-0`, `virtio2-input.0`).
    pub name: String,
}

/// The device's interrupts that serve receive queues: of its MSI/MSI-X
/// vectors (or its one legacy line), those whose names say rx, input or
/// completion queue; all of them when no name says so.
pub fn receive_irqs(sys_class_net: &Path, proc_interrupts: &str, dev: &str) -> Result<Vec<Irq>, StudyError> {
    let dir = sys_class_net.join(dev);
    if !dir.exists() {
        return Err(StudyError::Config(format!("--dev {dev}: no such network device (see `ip link`)")));
    }
    let device = dir.join("device");
    if !device.exists() {
        return Err(StudyError::Config(format!(
            "--dev {dev}: a virtual device with no interrupts of its own; use --steer rps (or none for loopback)"
        )));
    }
    // virtio and some others hang the NIC below the PCI function that owns the vectors.
    let mut numbers: Vec<u32> = Vec::new();
    for d in [device.join("msi_irqs"), device.join("../msi_irqs")] {
        if let Ok(rd) = std::fs::read_dir(&d) {
            numbers.extend(rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())));
            break;
        }
    }
    if numbers.is_empty() {
        if let Some(n) = std::fs::read_to_string(device.join("irq")).ok().and_then(|s| s.trim().parse().ok()).filter(|n: &u32| *n > 0) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    let names = interrupt_names(proc_interrupts);
    let all: Vec<Irq> = numbers.iter().map(|&n| Irq { number: n, name: names.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()).unwrap_or_default() }).collect();
    if all.is_empty() {
        return Err(StudyError::Config(format!("--dev {dev}: no interrupts found for it (no msi_irqs, no irq in {})", device.display())));
    }
    let rx: Vec<Irq> = all
        .iter()
        .filter(|i| {
            let n = i.name.to_ascii_lowercase();
            n.contains("rx") || n.contains("input") || n.contains("comp")
        })
        .cloned()
        .collect();
    Ok(if rx.is_empty() { all } else { rx })
}

/// (number, name) of every numbered line of /proc/interrupts; the name is its last column.
fn interrupt_names(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|l| {
            let (n, rest) = l.trim_start().split_once(':')?;
            Some((n.trim().parse().ok()?, rest.split_whitespace().last()?.to_string()))
        })
        .collect()
}

pub fn affinity_path(irq: &Irq) -> PathBuf {
    PathBuf::from(format!("/proc/irq/{}/smp_affinity_list", irq.number))
}

/// Points every interrupt at `cpu`, noting the old affinity first.
pub fn steer(journal: &Journal, irqs: &[Irq], cpu: usize) -> Result<(), StudyError> {
    for i in irqs {
        journal.write_file(&affinity_path(i), &cpu.to_string()).map_err(|e| {
            StudyError::Config(format!("cannot set the affinity of IRQ {} ({}): {e} (some interrupts are managed by the kernel and refuse it)", i.number, i.name))
        })?;
    }
    Ok(())
}

/// The device's first IPv4 address.
pub fn address(dev: &str) -> Result<Ipv4Addr, StudyError> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", dev])
        .output()
        .map_err(|source| StudyError::Spawn { what: "ip addr show".into(), source })?;
    parse_address(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| StudyError::Config(format!("--dev {dev}: it has no IPv4 address for the sender to reach (ip addr add … dev {dev})")))
}

/// `4: eth0    inet 192.0.2.2/24 brd …` → 192.0.2.2.
fn parse_address(ip_o: &str) -> Option<Ipv4Addr> {
    let mut words = ip_o.split_whitespace();
    words.find(|w| *w == "inet")?;
    words.next()?.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 38:          0       1723 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       1118          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
NMI:          0          0   Non-maskable interrupts
";

    fn fake_nic(root: &Path, vectors: &[u32], below_pci: bool) {
        let dev = root.join("eth9");
        let pci = root.join("pci");
        std::fs::create_dir_all(&dev).unwrap();
        let device = if below_pci { pci.join("virtio2") } else { pci.clone() };
        std::fs::create_dir_all(&device).unwrap();
        std::os::unix::fs::symlink(&device, dev.join("device")).unwrap();
        for v in vectors {
            std::fs::create_dir_all(pci.join("msi_irqs").join(v.to_string())).unwrap();
        }
    }

    #[test]
    fn receive_vectors_are_found_by_name_below_or_at_the_pci_function() {
        for below in [true, false] {
            let root = tempfile::tempdir().unwrap();
            fake_nic(root.path(), &[37, 38, 39], below);
            let irqs = receive_irqs(root.path(), INTERRUPTS, "eth9").unwrap();
            assert_eq!(irqs, vec![Irq { number: 38, name: "virtio2-input.0".into() }]);
        }
    }

    #[test]
    fn unknown_and_virtual_devices_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let e = receive_irqs(root.path(), INTERRUPTS, "nope0").unwrap_err().to_string();
        assert!(e.contains("no such network device"), "{e}");
        std::fs::create_dir_all(root.path().join("veth0")).unwrap();
        let e = receive_irqs(root.path(), INTERRUPTS, "veth0").unwrap_err().to_string();
        assert!(e.contains("virtual device") && e.contains("--steer rps"), "{e}");
    }

    #[test]
    fn addresses_are_read_from_ip() {
        let o = "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever preferred_lft forever\n";
        assert_eq!(parse_address(o), Some(Ipv4Addr::new(192, 0, 2, 2)));
        assert_eq!(parse_address(""), None);
    }
}
