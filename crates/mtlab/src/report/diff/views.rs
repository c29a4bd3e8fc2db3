//! What `report --diff` shows: per pair of processes the totals, the
//! allocator functions' calls and cycles, and the changed sites — on screen
//! with signed, readable sizes, in CSV as raw integers (data-only tables),
//! in JSON as docs/metrics.md (*report --diff*) describes.

use serde_json::{json, Value};

use super::sites::{Figures, KeyBy, SiteChange};
use super::{PairDiff, RunDiff, Side};
use crate::export::{Cell, Document, Table, View};
use crate::report::views::{stack_width, ARROW};
use crate::units::human_bytes;

/// A signed change for the screen: `+1.5 KiB`, `−200 B`, `0`.
fn signed(v: f64, bytes: bool) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let sign = if v > 0.0 { "+" } else { "−" };
    let a = v.abs();
    if bytes {
        format!("{sign}{}", human_bytes(a.round() as u64))
    } else if a.fract() == 0.0 {
        format!("{sign}{a}")
    } else {
        format!("{sign}{a:.1}")
    }
}

fn plain(v: Option<f64>, bytes: bool) -> String {
    match v {
        None => "–".into(),
        Some(v) if bytes => human_bytes(v.round() as u64),
        Some(v) if v.fract() == 0.0 => format!("{v}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// `+12.5 %`, or nothing where BASE is 0 or either is missing.
fn percent(base: Option<f64>, new: Option<f64>) -> String {
    match (base, new) {
        (Some(b), Some(n)) if b != 0.0 => format!("{:+.1} %", (n - b) / b * 100.0),
        _ => String::new(),
    }
}

fn side_text(s: &Side) -> String {
    format!("process {} ({}{})", s.pid, s.command, if s.estimated { ", sampled: estimates" } else { "" })
}

/// A site's frames on one line, as many as fit `width` (at least one).
fn stack_line(frames: &[String], width: usize) -> String {
    let mut line = String::new();
    for (i, f) in frames.iter().enumerate() {
        if i > 0 && line.chars().count() + ARROW.len() + f.chars().count() > width {
            break;
        }
        if i > 0 {
            line.push_str(ARROW);
        }
        line.push_str(f);
    }
    if line.is_empty() {
        "(no stack recorded)".into()
    } else {
        line
    }
}

fn opt_int(v: Option<i64>) -> Cell {
    v.map_or(Cell::Empty, Cell::Int)
}

fn pair_views(out: &mut Vec<View>, n: usize, p: &PairDiff, top: usize) {
    let suffix = if n == 0 { String::new() } else { format!("_{}", n + 1) };
    out.push(View::Note(format!("══ {} → {} ══", side_text(&p.base), side_text(&p.new))));
    out.push(View::Note(format!("BASE trace: {}", p.base.file)));
    out.push(View::Note(format!("NEW trace:  {}", p.new.file)));
    let mut t = Table::new(&format!("diff_totals{suffix}"), "totals", &["figure", "BASE", "NEW", "change", "%"], 1).screen_only();
    let mut raw = Table::new(&format!("diff_totals{suffix}"), "", &["figure", "base", "new", "change"], 1).data_only();
    for c in &p.totals {
        let change = c.change().map_or("–".into(), |d| signed(d, c.bytes));
        t.push(vec![
            Cell::text(c.key.replace('_', " ")),
            Cell::text(plain(c.base, c.bytes)),
            Cell::text(plain(c.new, c.bytes)),
            Cell::text(change),
            Cell::text(percent(c.base, c.new)),
        ]);
        raw.push(vec![Cell::text(c.key), Cell::num(c.base, 0), Cell::num(c.new, 0), Cell::num(c.change(), 0)]);
    }
    out.push(View::Table(t));
    out.push(View::Table(raw));
    if !p.functions.is_empty() {
        let cols = ["function", "BASE calls", "NEW calls", "BASE cycles mean", "NEW cycles mean", "BASE p50", "NEW p50", "BASE p99", "NEW p99"];
        let mut t = Table::new(&format!("diff_functions{suffix}"), "allocator functions: calls and cycles per call", &cols, 1);
        for f in &p.functions {
            t.push(vec![
                Cell::text(&f.function),
                Cell::Int(f.base_calls as i64),
                Cell::Int(f.new_calls as i64),
                f.base_mean_cycles.map_or(Cell::Empty, |c| Cell::Num(c, 0)),
                f.new_mean_cycles.map_or(Cell::Empty, |c| Cell::Num(c, 0)),
                f.base_p50_cycles.map_or(Cell::Empty, |c| Cell::Int(c as i64)),
                f.new_p50_cycles.map_or(Cell::Empty, |c| Cell::Int(c as i64)),
                f.base_p99_cycles.map_or(Cell::Empty, |c| Cell::Int(c as i64)),
                f.new_p99_cycles.map_or(Cell::Empty, |c| Cell::Int(c as i64)),
            ]);
        }
        out.push(View::Table(t));
        out.push(View::Note(CYCLES_NOTE.into()));
    }
    out.push(View::Note(format!(
        "sites: {} in both runs ({} unchanged), {} only in BASE (gone), {} only in NEW (new){}",
        p.sites_in_both,
        p.sites_unchanged,
        p.sites_only_base,
        p.sites_only_new,
        if p.sites_unnamed > 0 {
            format!("; {} without any function name, matched by module offset only", p.sites_unnamed)
        } else {
            String::new()
        }
    )));
    let changed = p.changed();
    if changed.is_empty() {
        out.push(View::Note("no site changed".into()));
        return;
    }
    let shown = changed.len().min(top);
    let title = format!("changed sites, largest change of bytes first ({shown} of {})", changed.len());
    let cols = ["#", "site", "bytes", "calls", "peak live", "leaked bytes", "leaked", "temporary", "stack (innermost first)"];
    let mut t = Table::new(&format!("diff_sites{suffix}"), title, &cols, 0).text_column(1).text_column(8).screen_only();
    let width = stack_width(90);
    for (i, c) in changed.iter().take(top).enumerate() {
        t.push(vec![
            Cell::Int(i as i64 + 1),
            Cell::text(c.status()),
            Cell::text(signed(c.bytes() as f64, true)),
            Cell::text(signed(c.calls() as f64, false)),
            Cell::text(c.peak_bytes().map_or("–".into(), |d| signed(d as f64, true))),
            Cell::text(signed(c.leaked_bytes() as f64, true)),
            Cell::text(signed(c.leaked_objects() as f64, false)),
            Cell::text(c.temporary().map_or("–".into(), |d| signed(d as f64, false))),
            Cell::text(stack_line(&c.labels(), width)),
        ]);
    }
    out.push(View::Table(t));
    let cols = [
        "status", "base_calls", "new_calls", "base_bytes", "new_bytes", "bytes_change", "calls_change", "peak_live_bytes_change",
        "leaked_bytes_change", "leaked_objects_change", "temporary_change", "stack",
    ];
    let mut raw = Table::new(&format!("diff_sites{suffix}"), "", &cols, 1).text_column(11).data_only();
    for c in changed {
        let (b, n) = (c.base.unwrap_or_default(), c.new.unwrap_or_default());
        raw.push(vec![
            Cell::text(c.status()),
            Cell::Int(b.calls as i64),
            Cell::Int(n.calls as i64),
            Cell::Int(b.bytes as i64),
            Cell::Int(n.bytes as i64),
            Cell::Int(c.bytes()),
            Cell::Int(c.calls()),
            opt_int(c.peak_bytes()),
            Cell::Int(c.leaked_bytes()),
            Cell::Int(c.leaked_objects()),
            opt_int(c.temporary()),
            Cell::text(c.labels().join(";")),
        ]);
    }
    out.push(View::Table(raw));
}

/// Said under every table of per-call cycles of two runs.
pub const CYCLES_NOTE: &str = "cycles per call come from two separate runs, not interleaved: a machine busy with \
     other work in one of them moves them by 10–30 % with no change in the program; compare timings with `mtlab bench`";

fn key_by_text(by: KeyBy) -> &'static str {
    match by {
        KeyBy::Lines => "sites matched by their stacks' function names, files and lines (not addresses)",
        KeyBy::Functions => "sites matched by their stacks' function names (not lines, not addresses)",
    }
}

pub fn document(d: &RunDiff, top: usize) -> Document {
    let mut views = vec![View::Note(format!("mtlab report --diff: BASE {} → NEW {}", d.base_file, d.new_file))];
    views.push(View::Note(format!(
        "{}; a frame with no symbol matches by module and offset; processes paired root with root, the others by command and order",
        key_by_text(d.key_by)
    )));
    views.extend(d.warnings.iter().map(|w| View::Note(format!("warning: {w}"))));
    for s in &d.only_base {
        views.push(View::Note(format!("only in BASE: {} — no process of NEW pairs with it", side_text(s))));
    }
    for s in &d.only_new {
        views.push(View::Note(format!("only in NEW: {} — no process of BASE pairs with it", side_text(s))));
    }
    views.push(View::Note(String::new()));
    for (i, p) in d.pairs.iter().enumerate() {
        pair_views(&mut views, i, p, top);
        views.push(View::Note(String::new()));
    }
    Document { views, data: to_json(d) }
}

fn figures_json(f: &Option<Figures>) -> Value {
    match f {
        None => Value::Null,
        Some(f) => json!({
            "calls": f.calls,
            "bytes": f.bytes,
            "peak_live_objects": f.peak_live_objects,
            "peak_live_bytes": f.peak_live_bytes,
            "leaked_objects": f.leaked_objects,
            "leaked_bytes": f.leaked_bytes,
            "temporary": f.temporary,
        }),
    }
}

fn site_json(c: &SiteChange) -> Value {
    json!({
        "status": c.status(),
        "frames": c.labels(),
        "base": figures_json(&c.base),
        "new": figures_json(&c.new),
        "change": {
            "calls": c.calls(),
            "bytes": c.bytes(),
            "peak_live_bytes": c.peak_bytes(),
            "leaked_objects": c.leaked_objects(),
            "leaked_bytes": c.leaked_bytes(),
            "temporary": c.temporary(),
        },
    })
}

fn pair_json(p: &PairDiff) -> Value {
    let totals: serde_json::Map<String, Value> =
        p.totals.iter().map(|t| (t.key.to_string(), json!({"base": t.base, "new": t.new, "change": t.change()}))).collect();
    json!({
        "base": p.base,
        "new": p.new,
        "totals": totals,
        "functions": p.functions,
        "sites_in_both": p.sites_in_both,
        "sites_unchanged": p.sites_unchanged,
        "sites_only_base": p.sites_only_base,
        "sites_only_new": p.sites_only_new,
        "sites_unnamed": p.sites_unnamed,
        "sites": p.changed().iter().map(site_json).collect::<Vec<_>>(),
    })
}

pub fn to_json(d: &RunDiff) -> Value {
    json!({
        "base_file": d.base_file,
        "new_file": d.new_file,
        "key_by": d.key_by,
        "pairs": d.pairs.iter().map(pair_json).collect::<Vec<_>>(),
        "only_base": d.only_base,
        "only_new": d.only_new,
        "warnings": d.warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_with_their_sign_and_unit() {
        assert_eq!(signed(1536.0, true), "+1.5 KiB");
        assert_eq!(signed(-200.0, true), "−200 B");
        assert_eq!(signed(0.0, false), "0");
        assert_eq!(signed(-3.0, false), "−3");
        assert_eq!(percent(Some(200.0), Some(250.0)), "+25.0 %");
        assert_eq!(percent(Some(0.0), Some(5.0)), "");
        assert_eq!(stack_line(&["a (p.c:1)".into(), "main (p.c:9)".into()], 10), "a (p.c:1)");
        assert_eq!(stack_line(&["a".into(), "main".into()], 40), "a ← main");
    }
}
