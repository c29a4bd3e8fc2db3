//! Several processes' profiles as one (`report --merge`): the exporters sum
//! equal stacks, each stack symbolized in its own process.
//!
//! The exporters symbolize a profile's pcs through one memory map, and the
//! same address means different code in two processes. So each process's
//! pcs and mappings are moved to an address range of its own — process k
//! (from 0) by k × 2^47, above every user address of x86-64 with 4-level
//! paging — which keeps each pc's file offset, so the symbolizer finds the
//! same function, file and line. Addresses in a merged pprof are these moved
//! ones; the first process's are as recorded.

use super::data::ProfileData;

/// Where process k's addresses move: k × 2^47.
const SHIFT: u32 = 47;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("cannot merge the profile of process {pid}: its stacks hold addresses at or above 2^47 (5-level paging), which the merge uses to keep processes apart; export it alone with --pid {pid}")]
    HighAddresses { pid: u32 },
    #[error("cannot merge {0} profiles: at most 131071 processes")]
    TooMany(usize),
}

/// The profiles of `parts` (pid, profile) as one: samples side by side,
/// maps moved apart; the period is the parts' common one (0 when they differ);
/// it covers the time from the first start to the last end.
pub fn merge(parts: Vec<(u32, ProfileData)>) -> Result<ProfileData, MergeError> {
    if parts.len() >= 1 << (64 - SHIFT) {
        return Err(MergeError::TooMany(parts.len()));
    }
    let limit = 1u64 << SHIFT;
    let period = parts.first().map(|p| p.1.period_bytes).filter(|&b| parts.iter().all(|p| p.1.period_bytes == b)).unwrap_or(0);
    let start = parts.iter().map(|p| p.1.start_ns).min().unwrap_or(0);
    let end = parts.iter().map(|p| p.1.start_ns.saturating_add(p.1.duration_ns)).max().unwrap_or(0);
    let mut out = ProfileData { period_bytes: period, start_ns: start, duration_ns: end.saturating_sub(start), ..Default::default() };
    for (k, (pid, mut data)) in parts.into_iter().enumerate() {
        // Mappings up there are the kernel's ([vsyscall]), never code a
        // stack of this process returns to.
        data.maps.retain(|m| m.end <= limit);
        if data.samples.iter().any(|s| s.pcs.iter().any(|&pc| pc >= limit)) {
            return Err(MergeError::HighAddresses { pid });
        }
        let base = (k as u64) << SHIFT;
        for m in &mut data.maps {
            m.start += base;
            m.end += base;
        }
        for s in &mut data.samples {
            for pc in &mut s.pcs {
                *pc += base;
            }
        }
        out.maps.append(&mut data.maps);
        out.samples.append(&mut data.samples);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::flame::{folded, FlameValue};
    use crate::profile::pprof::tests::{self_maps, test_pcs};
    use crate::profile::StackSample;
    use crate::symbolize::Symbolizer;

    fn profile(pcs: Vec<u64>, bytes: f64, start_ns: u64) -> ProfileData {
        ProfileData {
            samples: vec![StackSample { pcs, alloc_objects: 1.0, alloc_bytes: bytes, ..Default::default() }],
            maps: self_maps(),
            period_bytes: 0,
            start_ns,
            duration_ns: 10,
        }
    }

    #[test]
    fn merged_stacks_are_symbolized_in_their_own_process_and_summed() {
        let (leaf, root) = test_pcs();
        let a = profile(vec![leaf, root], 100.0, 1000);
        let b = profile(vec![leaf, root], 250.0, 1005);
        let mut sym = Symbolizer::new(&a.maps);
        let alone = folded(&a, &mut sym, FlameValue::AllocBytes);
        assert_eq!(alone.len(), 1);
        let merged = merge(vec![(1, a), (2, b)]).unwrap();
        assert_eq!((merged.start_ns, merged.duration_ns), (1000, 15));
        assert_eq!(merged.samples[1].pcs[0], leaf + (1 << 47));
        let mut sym = Symbolizer::new(&merged.maps);
        let lines = folded(&merged, &mut sym, FlameValue::AllocBytes);
        assert_eq!(lines, vec![(alone[0].0.clone(), 350)], "the same stack in two processes adds up");
    }

    #[test]
    fn addresses_the_merge_needs_are_refused() {
        let p = profile(vec![1 << 47], 1.0, 0);
        assert_eq!(merge(vec![(7, p)]).unwrap_err(), MergeError::HighAddresses { pid: 7 });
    }
}
