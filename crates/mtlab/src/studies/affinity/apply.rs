//! `--apply FLOW,APP|best --dev DEV`: makes a placement the device's steady
//! state — the RPS mask of every receive queue (`rps`) or the affinity of
//! every receive interrupt (`irq`) set to the flow core — and says how to
//! undo it and where to run the application. Unlike the study's own changes,
//! these are meant to stay, so they are not journalled.

use std::path::{Path, PathBuf};

use super::journal::Undo;
use super::{irq, net, Steer};
use crate::studies::StudyError;

/// What was changed, with the old contents.
pub struct Applied {
    pub undo: Vec<Undo>,
    pub app_cpu: usize,
}

fn write(path: &Path, new: &str, undo: &mut Vec<Undo>) -> Result<(), StudyError> {
    let old = std::fs::read_to_string(path).map_err(|source| StudyError::Io { path: path.to_path_buf(), source })?;
    std::fs::write(path, new).map_err(|source| StudyError::Io { path: path.to_path_buf(), source })?;
    undo.push(Undo::File { path: path.to_path_buf(), old: old.trim().to_string() });
    Ok(())
}

/// The receive queues' RPS mask files of `dev` under `sys_class_net`.
fn rps_files(sys_class_net: &Path, dev: &str) -> Result<Vec<PathBuf>, StudyError> {
    let queues = sys_class_net.join(dev).join("queues");
    let rd = std::fs::read_dir(&queues).map_err(|_| StudyError::Config(format!("--dev {dev}: no such network device (see `ip link`)")))?;
    let mut files: Vec<PathBuf> =
        rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).map(|e| e.path().join("rps_cpus")).filter(|p| p.exists()).collect();
    files.sort();
    if files.is_empty() {
        return Err(StudyError::Config(format!("--dev {dev}: it has no receive queue with an RPS mask (kernel without CONFIG_RPS?)")));
    }
    Ok(files)
}

/// Steers `dev`'s receive processing to `flow` by `steer`'s mechanism.
pub fn apply(steer: Steer, sys_class_net: &Path, dev: &str, flow: usize, app: usize) -> Result<Applied, StudyError> {
    let mut undo = Vec::new();
    let result = match steer {
        Steer::Irq => {
            let interrupts = std::fs::read_to_string("/proc/interrupts").map_err(|source| StudyError::Io { path: "/proc/interrupts".into(), source })?;
            irq::receive_irqs(sys_class_net, &interrupts, dev)?
                .iter()
                .try_for_each(|i| write(&irq::affinity_path(i), &flow.to_string(), &mut undo))
        }
        Steer::Rps | Steer::None => {
            let mask = net::rps_mask(&[flow]);
            rps_files(sys_class_net, dev)?.iter().try_for_each(|f| write(f, &mask, &mut undo))
        }
    };
    if let Err(e) = result {
        // All or nothing: what was set before the failure is put back.
        for u in undo.iter().rev() {
            if let Undo::File { path, old } = u {
                let _ = std::fs::write(path, old);
            }
        }
        return Err(e);
    }
    Ok(Applied { undo, app_cpu: app })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_receive_queue_gets_the_mask_and_the_old_one_is_kept() {
        let root = tempfile::tempdir().unwrap();
        for q in ["rx-0", "rx-1", "tx-0"] {
            let d = root.path().join("eth9/queues").join(q);
            std::fs::create_dir_all(&d).unwrap();
            if q.starts_with("rx") {
                std::fs::write(d.join("rps_cpus"), "00000000\n").unwrap();
            }
        }
        let a = apply(Steer::Rps, root.path(), "eth9", 1, 0).unwrap();
        assert_eq!(std::fs::read_to_string(root.path().join("eth9/queues/rx-1/rps_cpus")).unwrap(), "00000002");
        assert_eq!(a.undo.len(), 2);
        assert_eq!(a.undo[0].command(), format!("echo 00000000 > {}", root.path().join("eth9/queues/rx-0/rps_cpus").display()));
        assert_eq!(a.app_cpu, 0);
        let e = apply(Steer::Rps, root.path(), "nope0", 1, 0).err().unwrap().to_string();
        assert!(e.contains("no such network device"), "{e}");
    }
}
