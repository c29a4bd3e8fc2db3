//! The differential flame graphs of `report --diff --html` (Brendan Gregg's
//! differential flame graphs, drawn by inferno): frames sized by NEW and
//! coloured by the change (red grew, blue shrank, the deeper the colour the
//! larger the change), and a second one sized by BASE in the same colours,
//! where what shrank or is gone in NEW still has its width.

use std::collections::BTreeMap;

use inferno::flamegraph::{self, Options};

use super::sites::SiteChange;
use super::PairDiff;
use crate::profile::flame::FlameValue;

fn value(c: &SiteChange, v: FlameValue, new: bool) -> u64 {
    let f = if new { c.new } else { c.base }.unwrap_or_default();
    match v {
        FlameValue::AllocBytes => f.bytes,
        FlameValue::AllocObjects => f.calls,
        FlameValue::InuseBytes => f.leaked_bytes,
        FlameValue::InuseObjects => f.leaked_objects,
    }
}

/// Folded stacks, outermost frame first, with BASE's and NEW's value of
/// `v`: equal stacks summed (frames are named by function only).
pub fn folded(p: &PairDiff, v: FlameValue) -> BTreeMap<String, (u64, u64)> {
    let mut lines: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for c in &p.sites {
        let (b, n) = (value(c, v, false), value(c, v, true));
        if b == 0 && n == 0 {
            continue;
        }
        let names: Vec<String> = c
            .frames
            .iter()
            .rev()
            .map(|f| f.function.clone().or_else(|| f.location.clone()).unwrap_or_default().replace([';', ' '], "_"))
            .collect();
        let stack = if names.is_empty() { crate::profile::flame::EMPTY_STACK.replace(' ', "_") } else { names.join(";") };
        let e = lines.entry(stack).or_default();
        e.0 += b;
        e.1 += n;
    }
    lines
}

/// The SVG of the differential flame graph of `v`, sized by NEW (or, with
/// `by_base`, by BASE); None when there is nothing to draw.
pub fn svg(p: &PairDiff, v: FlameValue, by_base: bool) -> Option<String> {
    let lines: Vec<String> = folded(p, v)
        .into_iter()
        // inferno sizes by the second count and colours by second − first.
        .map(|(s, (b, n))| if by_base { format!("{s} {n} {b}") } else { format!("{s} {b} {n}") })
        .collect();
    let mut opt = Options::default();
    opt.title = format!(
        "{}: sized by {}, red grew in NEW, blue shrank",
        v.description(),
        if by_base { "BASE (what shrank or is gone keeps its width)" } else { "NEW" }
    );
    opt.count_name = v.unit().to_string();
    opt.name_type = "Function:".to_string();
    // Colours say the change: by BASE the delta is first − second.
    opt.negate_differentials = by_base;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out).ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}
