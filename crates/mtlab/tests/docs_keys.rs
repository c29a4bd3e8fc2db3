//! Docs that keep themselves true: every key `mtlab report --json` emits is
//! documented in docs/metrics.md and every key a table there documents is
//! emitted by some report; every RUNINFO, STATS, ALLOCSTATS and header key a
//! trace holds is written down in docs/trace-format.md and listed in
//! `trace/keys.rs` (or the header's parser), and the other way round.
//!
//! The reports are those of real runs of tiny programs: a full trace (with
//! `--baseline` and `--callers`), its compact copy, a sampled trace with a
//! `ctl dump`, a live profile (`record --live`), a process tree with one child trace deleted, a damaged copy.

mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use util::*;

/// What a Markdown file documents: the names in backticks of each section
/// (heading and body) and of each paragraph or table row.
struct Doc {
    blocks: Vec<BTreeSet<String>>,
    /// Keys in the first column of tables whose header's first cell is
    /// `key`, in the sections before `stop_at` (the report's sections).
    table_keys: Vec<(String, usize)>,
}

/// The identifiers inside the backticked spans of `text`: `a.b[]`,
/// `{x, y}`, `functions.<name>` all give their words.
fn backticked_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 1 {
            out.extend(identifiers(span));
        }
    }
    out
}

fn identifiers(span: &str) -> Vec<String> {
    span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

impl Doc {
    fn read(rel: &str, stop_at: &str) -> Doc {
        let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
        let mut blocks = Vec::new();
        let mut table_keys = Vec::new();
        let mut section = String::new();
        let mut paragraph = String::new();
        let mut in_report_part = true;
        let mut key_table = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') {
                blocks.push(backticked_names(&section));
                section.clear();
                if line.starts_with("## ") && line.contains(stop_at) {
                    in_report_part = false;
                }
            }
            section.push_str(line);
            section.push('\n');
            let row = line.starts_with('|');
            if line.trim().is_empty() || row {
                blocks.push(backticked_names(&paragraph));
                paragraph.clear();
            }
            if row {
                blocks.push(backticked_names(line));
                let first = line.trim_start_matches('|').split('|').next().unwrap_or("").trim();
                if first == "key" {
                    key_table = true;
                } else if key_table && in_report_part && !first.starts_with("--") && !first.starts_with(":-") {
                    for (i, span) in first.split('`').enumerate() {
                        if i % 2 == 1 {
                            table_keys.extend(identifiers(span).into_iter().map(|k| (k, n + 1)));
                        }
                    }
                }
            } else {
                key_table = false;
                paragraph.push_str(line);
                paragraph.push('\n');
            }
        }
        blocks.push(backticked_names(&section));
        blocks.push(backticked_names(&paragraph));
        Doc { blocks, table_keys }
    }

    /// A key is documented when one section, paragraph or table row names it
    /// together with the object it belongs to (top-level keys: anywhere).
    fn documents(&self, path: &[String]) -> bool {
        let path: Vec<&String> = path.iter().filter(|c| *c != FUNCTION).collect();
        let leaf = path.last().unwrap();
        match path.len() {
            1 => self.blocks.iter().any(|b| b.contains(*leaf)),
            n => self.blocks.iter().any(|b| b.contains(*leaf) && b.contains(path[n - 2])),
        }
    }
}

/// Stands for each function's name in `functions.<name>` paths.
const FUNCTION: &str = "<name>";

/// Every key path of `v`: array elements and the per-function map's names
/// collapse, each child process's keys are the top level's.
fn key_paths(v: &Value, path: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
    match v {
        Value::Object(map) => {
            let is_function_map = path.last().is_some_and(|k| k == "functions") && path.len() == 1;
            for (k, child) in map {
                if is_function_map {
                    path.push(FUNCTION.to_string());
                    key_paths(child, path, out);
                    path.pop();
                    continue;
                }
                if path.is_empty() && k == "children" {
                    for c in child.as_array().into_iter().flatten() {
                        key_paths(c, path, out);
                    }
                    continue;
                }
                path.push(k.clone());
                out.insert(path.clone());
                key_paths(child, path, out);
                path.pop();
            }
        }
        Value::Array(items) => items.iter().for_each(|i| key_paths(i, path, out)),
        _ => {}
    }
}

/// The reports of the traces described in the module comment, by name.
fn reports(lab: &Lab) -> BTreeMap<&'static str, Value> {
    let known = lab.compile("h_known");
    let forks = lab.compile("fork_many");
    let mut out = BTreeMap::new();

    let o = lab.record_cmd("full.mtl", &["--baseline"], &known, &[]).output().unwrap();
    assert_success(&o, "record --baseline h_known");
    out.insert("full (--callers --threads)", report_with(lab, "full.mtl", &["--callers", "--threads"]));

    std::fs::copy(lab.path("full.mtl"), lab.path("compact.mtl")).unwrap();
    let o = lab.command(MTLAB).arg("compact").arg(lab.path("compact.mtl")).output().unwrap();
    assert_success(&o, "mtlab compact");
    out.insert("compact", report_with(lab, "compact.mtl", &[]));

    let o = lab.record_cmd("sampled.mtl", &["--sample", "4KiB"], &known, &[]).output().unwrap();
    assert_success(&o, "record --sample");
    out.insert("sampled", report_with(lab, "sampled.mtl", &[]));

    lab.record_ok("tree.mtl", &forks, &["3", "10"]);
    let child = lab.family("tree.mtl").into_iter().nth(1).expect("a child trace");
    std::fs::remove_file(lab.path(&child)).unwrap();
    out.insert("tree (one child trace deleted)", report_with(lab, "tree.mtl", &[]));

    let o = lab.command(MTLAB).args(["record", "--live", "-o"]).arg(lab.path("live.prof")).arg("--").arg(&known).output().unwrap();
    assert_success(&o, "record --live");
    out.insert("live profile", report_with(lab, "live.prof", &[]));

    // Cut in the middle of the events: a damaged trace, read with a warning.
    let bytes = std::fs::read(lab.path("full.mtl")).unwrap();
    let events = raw_records(&bytes).into_iter().filter(|r| r.ty == 1).max_by_key(|r| r.end - r.offset).unwrap();
    std::fs::write(lab.path("cut.mtl"), &bytes[..(events.offset + (events.end - events.offset) / 2) as usize]).unwrap();
    out.insert("cut", report_with(lab, "cut.mtl", &[]));
    out
}

fn report_with(lab: &Lab, trace: &str, extra: &[&str]) -> Value {
    let o = lab.command(MTLAB).args(["report", "--json"]).args(extra).arg(lab.path(trace)).output().unwrap();
    assert_success(&o, &format!("report --json {trace}"));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn every_report_key_is_documented_and_every_documented_key_is_emitted() {
    let lab = Lab::new();
    let doc = Doc::read("docs/metrics.md", "CSV tables");
    let mut emitted: BTreeMap<Vec<String>, &str> = BTreeMap::new();
    let reports = reports(&lab);
    for (name, v) in &reports {
        let mut paths = BTreeSet::new();
        key_paths(v, &mut Vec::new(), &mut paths);
        for p in paths {
            emitted.entry(p).or_insert(name);
        }
    }
    let undocumented: Vec<String> = emitted
        .iter()
        .filter(|(p, _)| !doc.documents(p))
        .map(|(p, from)| format!("  {} (in the {from} report)", p.join(".").replace(".<name>", "")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "`mtlab report --json` emits keys docs/metrics.md does not document (name each with its object, \
         e.g. in the table or paragraph of that object):\n{}",
        undocumented.join("\n")
    );

    let names: BTreeSet<&String> = emitted.keys().flatten().collect();
    let never: Vec<String> = doc
        .table_keys
        .iter()
        .filter(|(k, _)| !names.contains(k))
        .map(|(k, line)| format!("  `{k}` (docs/metrics.md:{line})"))
        .collect();
    assert!(
        never.is_empty(),
        "docs/metrics.md documents report keys that none of the reports ({}) emits: remove them or make a \
         report that has them:\n{}",
        reports.keys().copied().collect::<Vec<_>>().join(", "),
        never.join("\n")
    );
}

/// `pub const NAME: &str = "value";` values of trace/keys.rs.
fn keys_rs() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("crates/mtlab/src/trace/keys.rs")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \""))
        .map(|l| l.split('"').nth(1).unwrap().to_string())
        .collect()
}

/// The keys of a trace's header, RUNINFO, STATS and ALLOCSTATS records.
fn trace_keys(path: &Path, header: &mut BTreeSet<String>, records: &mut BTreeSet<String>) {
    let t = mtlab::trace::decode::TraceFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    header.extend(t.header.raw.iter().map(|(k, _)| k.clone()));
    records.extend(t.runinfo.iter().chain(&t.stats).chain(t.allocator_readings.iter().flatten()).map(|(k, _)| k.clone()));
}

#[test]
fn every_trace_key_is_in_keys_rs_and_documented_in_the_trace_format() {
    let lab = Lab::new();
    let known = lab.compile("h_known");
    let hold = lab.compile("s_hold");
    let forks = lab.compile("fork_many");
    let o = lab.record_cmd("full.mtl", &["--baseline"], &known, &[]).output().unwrap();
    assert_success(&o, "record --baseline h_known");
    lab.record_ok("tree.mtl", &forks, &["2", "10"]);
    std::fs::copy(lab.path("full.mtl"), lab.path("compact.mtl")).unwrap();
    assert_success(&lab.command(MTLAB).arg("compact").arg(lab.path("compact.mtl")).output().unwrap(), "compact");
    sampled_with_dump(&lab, &hold);

    let mut header = BTreeSet::new();
    let mut records = BTreeSet::new();
    for name in ["full.mtl", "tree.mtl", "compact.mtl", "sampled.mtl"] {
        trace_keys(&lab.path(name), &mut header, &mut records);
    }
    for child in lab.family("tree.mtl").into_iter().skip(1) {
        trace_keys(&lab.path(&child), &mut header, &mut records);
    }

    let listed = keys_rs();
    let not_listed: Vec<&String> = records.iter().filter(|k| !listed.contains(*k)).collect();
    assert!(
        not_listed.is_empty(),
        "RUNINFO/STATS/ALLOCSTATS keys written to real traces but not in crates/mtlab/src/trace/keys.rs \
         (the one list of them): {not_listed:?}"
    );

    let doc = std::fs::read_to_string(repo_root().join("docs/trace-format.md")).unwrap();
    let documented = backticked_names(&doc);
    let header_fields: BTreeSet<String> = doc
        .lines()
        .skip_while(|l| !l.starts_with("## File"))
        .take_while(|l| !l.starts_with("## Records"))
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| backticked_names(l.split('|').nth(1).unwrap()))
        .collect();
    let undocumented: Vec<&String> = listed.iter().chain(&records).filter(|k| !documented.contains(*k)).collect();
    assert!(undocumented.is_empty(), "trace keys docs/trace-format.md does not mention: {undocumented:?}");
    let header_undocumented: Vec<&String> = header.iter().filter(|k| !header_fields.contains(*k)).collect();
    assert!(
        header_undocumented.is_empty(),
        "header keys written but not in the header table of docs/trace-format.md: {header_undocumented:?}"
    );
    let header_never: Vec<&String> = header_fields.iter().filter(|k| !header.contains(*k)).collect();
    assert!(header_never.is_empty(), "header keys docs/trace-format.md lists but no trace has: {header_never:?}");

    // The key tables of the records name exactly the keys of keys.rs.
    let tabled: BTreeSet<String> = doc
        .lines()
        .skip_while(|l| !l.starts_with("## RUNINFO, STATS and ALLOCSTATS keys"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| backticked_names(l.split('|').nth(1).unwrap()))
        .collect();
    let stale: Vec<&String> = tabled.iter().filter(|k| !listed.contains(*k)).collect();
    assert!(stale.is_empty(), "docs/trace-format.md's key tables name keys that trace/keys.rs does not have: {stale:?}");
    let untabled: Vec<&String> = listed.iter().filter(|k| !tabled.contains(*k)).collect();
    assert!(untabled.is_empty(), "keys of trace/keys.rs missing from docs/trace-format.md's key tables: {untabled:?}");
}

/// A sampled run of `s_hold` with one `ctl dump` while it holds its blocks
/// (the heap manager's reading is an ALLOCSTATS record).
fn sampled_with_dump(lab: &Lab, hold: &Path) {
    use std::io::{BufRead, BufReader, Write};
    let mut cmd = lab.record_cmd("sampled.mtl", &["--sample", "4KiB"], hold, &["256", "4096"]);
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pid = 0u32;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(p) = line.strip_prefix("pid ") {
            pid = p.trim().parse().unwrap();
        }
        if line == "held" {
            break;
        }
    }
    assert!(pid > 0, "s_hold printed its pid");
    let o = lab.command(MTLAB).args(["ctl", &pid.to_string(), "dump", "-o"]).arg(lab.path("dump.pb.gz")).output().unwrap();
    assert_success(&o, "mtlab ctl dump");
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let status = wait_within(&mut child, std::time::Duration::from_secs(30)).expect("s_hold ends after its line");
    assert!(status.success(), "record of s_hold: {status}");
}
