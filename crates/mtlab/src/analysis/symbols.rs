//! Symbols for the report: the frames of the sites shown (each site's made
//! once), and how whole the stacks are (`stack_quality`: does a stack reach
//! main or a thread's start?).

use rustc_hash::FxHashMap as HashMap;

use super::model::{FrameReport, StackQuality};
use crate::symbolize::{parse_all_maps, CodeRanges, Mapping, Symbolizer};
use crate::trace::{EventKind, Item, StackTable, TraceError, TraceFile};

const STACK_BOTTOMS: [&str; 7] =
    ["main", "__libc_start_call_main", "__libc_start_main", "_start", "start_thread", "clone", "clone3"];

fn is_bottom(name: &str) -> bool {
    // No `format!` here: this runs for the outer frames of every distinct stack.
    name.starts_with("__libc_start_main")
        || STACK_BOTTOMS.iter().any(|b| name.strip_prefix(b).is_some_and(|rest| rest.is_empty() || rest.starts_with('@')))
}

pub struct Symbols {
    pub sym: Symbolizer,
    /// Each site's frames once made: a site is in several top tables.
    sites: HashMap<u32, Vec<FrameReport>>,
    /// Whether a pc's frames include a stack's first function
    /// (`outermost_is_bottom`): asked of the last three pcs of every
    /// distinct stack, where a copy of the symbolizer's frames each time
    /// (names, files) was a twentieth of the report of a program with
    /// millions of call paths.
    bottom: HashMap<u64, bool>,
}

impl Symbols {
    pub fn new(maps: &[Mapping], recorded_until_ns: u64) -> Self {
        Symbols {
            sym: Symbolizer::new(maps).recorded_until(recorded_until_ns),
            sites: HashMap::default(),
            bottom: HashMap::default(),
        }
    }

    /// `frames(pcs)` of stack `id`.
    pub fn site_frames(&mut self, id: u32, pcs: &[u64]) -> Vec<FrameReport> {
        if let Some(f) = self.sites.get(&id) {
            return f.clone();
        }
        let f = self.frames(pcs);
        self.sites.insert(id, f.clone());
        f
    }

    pub fn frames(&mut self, pcs: &[u64]) -> Vec<FrameReport> {
        pcs.iter()
            .flat_map(|&pc| self.sym.symbolize(pc))
            .map(FrameReport::of)
            .collect()
    }

    /// Does the stack reach a thread's or the process's first frames? The
    /// last three frames are looked at: in a stripped program `_start` (and
    /// even `main`) have no name, but the libc frames above them do.
    pub fn outermost_is_bottom(&mut self, pcs: &[u64]) -> bool {
        pcs.iter().rev().take(3).any(|&pc| self.is_bottom(pc))
    }

    fn is_bottom(&mut self, pc: u64) -> bool {
        if let Some(&b) = self.bottom.get(&pc) {
            return b;
        }
        let b = self.sym.symbolize(pc).iter().any(|f| f.function.as_deref().is_some_and(is_bottom));
        self.bottom.insert(pc, b);
        b
    }
}

/// When the recording ended, in ns since the epoch (0: unknown): its END,
/// else the last event decoded.
pub fn recorded_until(trace: &TraceFile, last_tsc: u64) -> u64 {
    let end = trace.end.as_ref().map_or(last_tsc, |e| e.end_tsc.max(last_tsc));
    trace.header.ns_since_start(end).map_or(0, |ns| trace.header.start_ns.saturating_add(ns))
}

/// How whole the stacks of a full trace are, without the rest of the analysis
/// (one decode pass: the stacks, and the allocation calls of each).
pub fn stack_quality_of(trace: &TraceFile) -> Result<StackQuality, TraceError> {
    let maps = parse_all_maps(&trace.maps);
    let code = CodeRanges::new(&maps);
    let mut stacks = StackTable::default();
    let mut calls: HashMap<u32, u64> = HashMap::default();
    let mut last_tsc = 0;
    for item in trace.items()? {
        match item {
            Item::Stack { id, pcs } => {
                stacks.insert(id, &code.cut(pcs));
            }
            Item::Event(ev) => {
                last_tsc = last_tsc.max(ev.tsc);
                if matches!(ev.kind, EventKind::Alloc { .. } | EventKind::Realloc { .. }) {
                    *calls.entry(ev.stack).or_default() += 1;
                }
            }
        }
    }
    let mut symbols = Symbols::new(&maps, recorded_until(trace, last_tsc));
    let weighted = calls.iter().filter_map(|(&id, &n)| stacks.get(id).map(|pcs| (pcs, n)));
    Ok(stack_quality(trace, weighted, stacks.len() as u64, "allocation calls", &mut symbols))
}

/// How whole the stacks are: `weighted` gives each stack with the allocation
/// calls (or samples) it stands for.
pub fn stack_quality<'a>(
    trace: &TraceFile,
    weighted: impl Iterator<Item = (&'a [u64], u64)>,
    distinct: u64,
    what: &str,
    symbols: &mut Symbols,
) -> StackQuality {
    let mode = if trace.header.stacks == "none" {
        "none".to_string()
    } else if trace.header.unwind.is_empty() {
        trace.header.stacks.clone() // traces of mtlab before the unwind key: frame pointers
    } else {
        trace.header.unwind.clone()
    };
    let mut calls = 0u64;
    let mut truncated = 0u64;
    for (pcs, weight) in weighted {
        calls += weight;
        if !symbols.outermost_is_bottom(pcs) && pcs.len() < trace.header.max_depth as usize {
            truncated += weight;
        }
    }
    let fraction = if calls == 0 { 0.0 } else { truncated as f64 / calls as f64 };
    let note = (mode != "none" && fraction > 0.2).then(|| {
        let why = if mode == "fp" {
            "the program or its libraries were likely built without frame pointers (-fno-omit-frame-pointer), \
             so frame-pointer walking ends early: record with --unwind dwarf (the default) for whole stacks"
        } else {
            "the walk met code without unwind information (JIT-compiled code, hand-written assembly) \
             or a stack it cannot read (coroutines, a signal stack), or --depth cut it"
        };
        format!(
            "stacks look truncated: {:.0}% of {what} have a stack that stops before main or a thread start; {why}",
            fraction * 100.0
        )
    });
    StackQuality { mode, distinct, truncated_call_fraction: fraction, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_bottoms_are_named_exactly_or_with_a_version() {
        for name in ["main", "_start", "clone3", "start_thread@GLIBC_2.34", "__libc_start_main_impl", "__libc_start_call_main"] {
            assert!(is_bottom(name), "{name}");
        }
        for name in ["mainloop", "clone_x", "do_start_thread", "", "mai"] {
            assert!(!is_bottom(name), "{name}");
        }
    }
}
