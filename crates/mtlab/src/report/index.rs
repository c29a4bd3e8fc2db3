//! The process index: one row per traced process of the run, before the
//! detailed reports. On screen a large tree is cut to the busiest processes
//! and a count of the rest (a 2000-process build would otherwise push the
//! reports off the screen); JSON and CSV keep every row.

use std::collections::BTreeMap;

use serde::Serialize;

use super::human_bytes;
use super::select::DETAILED;
use crate::export::{Cell, Table, View};
use crate::analysis::ProcessReport;
use crate::trace::family::command_name;

/// Rows shown on screen before the rest are counted instead.
pub const SCREEN_ROWS: usize = 20;

/// How a traced process ended, as far as its trace tells.
/// JSON: `"end": "exit_code"` with `"exit_code": N`, `"signal"` with
/// `"signal": N`, or `"exited"`, `"execd"`, `"running"`, `"no_end"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum Ending {
    /// The root process: its exit code (RUNINFO).
    ExitCode { exit_code: i32 },
    /// The root process: the signal that killed it (RUNINFO).
    Signal { signal: i32 },
    /// Ran its exit handlers (END record); children's exit codes are not recorded.
    Exited,
    /// No END, and a later trace of the same pid exists: it exec'd.
    Execd,
    /// No END yet, and its writer still holds the file open.
    Running,
    /// No END: _exit, a fatal signal, or an exec whose image wrote nothing.
    NoEnd,
}

impl Ending {
    pub fn text(self) -> String {
        match self {
            Ending::ExitCode { exit_code } => format!("exit code {exit_code}"),
            Ending::Signal { signal } => format!("killed by signal {signal}"),
            Ending::Exited => "exited".into(),
            Ending::Execd => "exec'd".into(),
            Ending::Running => "running".into(),
            Ending::NoEnd => "no END (_exit, signal or exec)".into(),
        }
    }

    /// How the program ended, as a report's `exit` says it: the exit code or
    /// signal `mtlab record` saw, which only the root pid's last image has.
    pub fn exit_text(self) -> Option<String> {
        match self {
            Ending::ExitCode { .. } | Ending::Signal { .. } => Some(self.text()),
            _ => None,
        }
    }
}

/// One traced process (one image of it: a pid that exec'd has a row per image).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IndexRow {
    pub pid: u32,
    pub ppid: u32,
    /// Base name of the first argument: what `--comm` matches (with the executable's).
    pub command: String,
    pub cmdline: Vec<String>,
    pub exe: String,
    pub file: String,
    /// Traced calls decoded from the trace; samples, for a sampled trace.
    pub events: u64,
    /// Live bytes at the heap's peak; null for a sampled trace, which has no exact heap.
    pub peak_live_bytes: Option<u64>,
    #[serde(flatten)]
    pub ending: Ending,
    /// Reported in detail below: the processes `--pid`/`--comm` name; with
    /// neither, every one, or in a run of more than `select::DETAILED`
    /// processes the root and the busiest others (`--all-processes`: every one).
    pub reported: bool,
    /// Named by `--pid`/`--comm` (every process when neither is given): what
    /// the profile exports choose from, whether reported in detail or not.
    #[serde(skip)]
    pub selected: bool,
}

impl IndexRow {
    /// Does `name` name this process (`--comm`)? The first argument's base
    /// name, or the executable's (`python3` runs `/usr/bin/python3.11`).
    pub fn is_command(&self, name: &str) -> bool {
        self.command == name || self.exe.rsplit('/').next() == Some(name)
    }

    /// `1234 (cc1)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.pid, self.command)
    }
}

/// What the index takes of a process's report: its row, before the ending
/// that depends on the other processes (a later image of its pid; the root's
/// exit code) is known. A process listed only in the index keeps no more of
/// its report than this.
#[derive(Debug, Clone)]
pub struct Facts {
    row: IndexRow,
    clean_end: bool,
    running: bool,
    /// RUNINFO's `exit code N` or `killed by signal N` (root trace only).
    exit: Option<String>,
}

impl Facts {
    pub fn of(p: &ProcessReport) -> Facts {
        Facts {
            row: IndexRow {
                pid: p.pid,
                ppid: p.ppid,
                command: command_name(&p.cmdline, &p.exe),
                cmdline: p.cmdline.clone(),
                exe: p.exe.clone(),
                file: p.file.clone(),
                events: p.profile.as_ref().map_or(p.events, |s| s.totals.samples),
                peak_live_bytes: p.profile.is_none().then_some(p.peak.heap.live_bytes),
                ending: Ending::NoEnd,
                reported: true,
                selected: true,
            },
            clean_end: p.clean_end,
            running: p.running,
            exit: p.exit.clone(),
        }
    }
}

/// The index of `processes` (root first, then the family's order).
pub fn rows(processes: &[ProcessReport]) -> Vec<IndexRow> {
    rows_of(processes.iter().map(Facts::of).collect())
}

/// The index of the processes `facts` are of (root first, then the family's order).
pub fn rows_of(facts: Vec<Facts>) -> Vec<IndexRow> {
    // mtlab record knows how the root pid ended (RUNINFO of the root file):
    // that is the end of the pid's last image, which may be an exec'd one.
    let root_exit = facts.first().and_then(|p| {
        let e = p.exit.as_deref()?;
        if let Some(c) = e.strip_prefix("exit code ") {
            c.parse().ok().map(|exit_code| Ending::ExitCode { exit_code })
        } else {
            e.strip_prefix("killed by signal ")?.parse().ok().map(|signal| Ending::Signal { signal })
        }
    });
    let root_pid = facts.first().map(|p| p.row.pid);
    // A later image of the same pid: the last index of each pid, in one pass
    // (a scan of the later rows per row is quadratic on a tree of thousands).
    let mut last: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, p) in facts.iter().enumerate() {
        last.insert(p.row.pid, i);
    }
    facts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let later_image = last[&p.row.pid] > i;
            let ending = match root_exit {
                _ if p.running => Ending::Running,
                _ if !p.clean_end && later_image => Ending::Execd,
                Some(e) if Some(p.row.pid) == root_pid && !later_image => e,
                _ if p.clean_end => Ending::Exited,
                _ => Ending::NoEnd,
            };
            IndexRow { ending, ..p.row }
        })
        .collect()
}

/// The command line for a table cell: the command's base name and its
/// arguments, cut to `width` characters.
fn command_cell(r: &IndexRow, width: usize) -> String {
    let mut line = r.command.clone();
    for a in r.cmdline.iter().skip(1) {
        line.push(' ');
        line.push_str(a);
    }
    if line.chars().count() > width {
        line = line.chars().take(width.saturating_sub(1)).collect::<String>() + "…";
    }
    line
}

/// Which rows the screen shows, in order: the root, then the rows reported
/// in detail, then the others; each group by peak live bytes, largest first
/// (then by events), so the processes that held the most memory lead however
/// the tree was started. Cut to `limit` rows.
pub fn screen_rows(rows: &[IndexRow], limit: usize) -> Vec<usize> {
    if rows.is_empty() {
        return Vec::new();
    }
    let mut rest: Vec<usize> = (1..rows.len()).collect();
    // Stable: equal figures keep the family's order.
    rest.sort_by(|&a, &b| {
        let (a, b) = (&rows[a], &rows[b]);
        b.reported.cmp(&a.reported).then(b.peak_live_bytes.cmp(&a.peak_live_bytes)).then(b.events.cmp(&a.events))
    });
    std::iter::once(0).chain(rest.into_iter().take(limit.saturating_sub(1))).collect()
}

/// The line naming the process that held the most memory (and which it
/// is), for an index of more than one process.
fn largest_peak(rows: &[IndexRow]) -> Option<String> {
    let top = rows.iter().filter(|r| r.peak_live_bytes.is_some()).max_by_key(|r| r.peak_live_bytes)?;
    (rows.len() > 1).then(|| format!("largest peak live: {} in {}; processes below by peak live bytes, the root first", peak_text(top), top.label()))
}

/// The index on screen: a table of processes (cut to `SCREEN_ROWS`), and for
/// a cut table the processes by command and what the rest hold.
pub fn views(rows: &[IndexRow]) -> Vec<View> {
    let selective = rows.iter().any(|r| !r.reported);
    let shown = screen_rows(rows, SCREEN_ROWS);
    let reported = rows.iter().filter(|r| r.reported).count();
    let mut out = vec![View::Note(format!(
        "══ {} traced processes{} ══{}",
        rows.len(),
        if selective { format!(", {reported} reported below (marked *)") } else { String::new() },
        largest_peak(rows).map(|l| format!("\n{l}")).unwrap_or_default()
    ))];
    let mut header = vec!["pid", "ppid", "command", "events", "peak live", "end"];
    if selective {
        header.insert(0, "");
    }
    let at = usize::from(selective);
    let mut t = Table::new("process_index", "", &header, at).text_column(2 + at).text_column(5 + at).screen_only();
    for &i in &shown {
        let r = &rows[i];
        let mut row = vec![
            Cell::Int(r.pid as i64),
            Cell::Int(r.ppid as i64),
            Cell::text(command_cell(r, 60)),
            Cell::Int(r.events as i64),
            r.peak_live_bytes.map(Cell::Bytes).unwrap_or_else(not_measured),
            Cell::text(r.ending.text()),
        ];
        if selective {
            row.insert(0, Cell::text(if r.reported { "*" } else { "" }));
        }
        t.push(row);
    }
    out.push(View::Table(t));
    let only = index_only_note(rows);
    if shown.len() < rows.len() {
        let rest: Vec<&IndexRow> = (0..rows.len()).filter(|i| !shown.contains(i)).map(|i| &rows[i]).collect();
        out.push(View::Note(format!(
            "… and {} more processes with {} events in total (`--json` and `--csv` list every one){}",
            rest.len(),
            rest.iter().map(|r| r.events).sum::<u64>(),
            if only.is_some() { "" } else { "; report some in detail with --pid PID or --comm NAME" }
        )));
        out.push(View::Table(by_command(rows)));
    }
    out.extend(only.map(View::Note));
    out
}

/// When a run has more processes than are reported in detail by default
/// (`select::DETAILED`): how many are in the index only, and how to see them.
pub fn index_only_note(rows: &[IndexRow]) -> Option<String> {
    let only = rows.iter().filter(|r| r.selected && !r.reported).count();
    if only == 0 {
        return None;
    }
    let detailed = rows.iter().filter(|r| r.reported).count();
    Some(format!(
        "{only} of {} processes are in the process index only: with more than {DETAILED} processes, the root and the {} busiest \
         (by events) are reported in detail; report others with --pid PID or --comm NAME, every one with --all-processes",
        rows.len(),
        detailed.saturating_sub(1)
    ))
}

/// Every process's row, for CSV.
pub fn table(rows: &[IndexRow]) -> Table {
    let mut t = Table::new("processes", "", &["pid", "ppid", "command", "events", "peak_live_bytes", "end", "reported", "file", "cmdline"], 3)
        .text_column(5)
        .text_column(6)
        .text_column(7)
        .text_column(8)
        .data_only();
    for r in rows {
        t.push(vec![
            Cell::Int(r.pid as i64),
            Cell::Int(r.ppid as i64),
            Cell::text(&r.command),
            Cell::Int(r.events as i64),
            r.peak_live_bytes.map(|b| Cell::Int(b as i64)).unwrap_or(Cell::Empty),
            Cell::text(r.ending.text()),
            Cell::text(if r.reported { "yes" } else { "no" }),
            Cell::text(&r.file),
            Cell::text(r.cmdline.join(" ")),
        ]);
    }
    t
}

/// Processes by command, the one with the largest peak first: what `--comm` can pick.
fn by_command(rows: &[IndexRow]) -> Table {
    let mut groups: BTreeMap<&str, (u64, u64, Option<u64>)> = BTreeMap::new();
    for r in rows {
        let g = groups.entry(&r.command).or_default();
        g.0 += 1;
        g.1 += r.events;
        g.2 = g.2.max(r.peak_live_bytes);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by_key(|g| std::cmp::Reverse((g.1 .2, g.1 .1)));
    let mut t = Table::new("process_commands", "processes by command (--comm NAME), largest peak live first", &["command", "processes", "events", "largest peak live"], 1).screen_only();
    for (cmd, (n, events, peak)) in groups.into_iter().take(SCREEN_ROWS) {
        t.push(vec![Cell::text(cmd), Cell::Int(n as i64), Cell::Int(events as i64), peak.map(Cell::Bytes).unwrap_or_else(not_measured)]);
    }
    t
}

/// "1234 (cc1)" for up to `n` rows, then "and K more".
pub fn labels(rows: &[&IndexRow], n: usize) -> String {
    let mut s: Vec<String> = rows.iter().take(n).map(|r| r.label()).collect();
    if rows.len() > n {
        s.push(format!("and {} more", rows.len() - n));
    }
    s.join(", ")
}

/// A screen cell for a peak a sampled trace does not measure (CSV leaves it empty).
fn not_measured() -> Cell {
    Cell::text("—")
}

/// Bytes for a sentence.
pub fn peak_text(r: &IndexRow) -> String {
    r.peak_live_bytes.map(human_bytes).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, command: &str, events: u64) -> IndexRow {
        IndexRow {
            pid,
            ppid: 1,
            command: command.into(),
            cmdline: vec![format!("/usr/bin/{command}"), "-x".into()],
            exe: format!("/usr/lib/{command}.real"),
            file: format!("t.mtl.{pid}"),
            events,
            peak_live_bytes: Some(events * 10),
            ending: Ending::Exited,
            reported: true,
            selected: true,
        }
    }

    #[test]
    fn a_large_index_shows_the_root_and_the_busiest_others() {
        let rows: Vec<IndexRow> = (0..30).map(|i| row(100 + i, if i % 2 == 0 { "cc1" } else { "as" }, (i as u64 * 7) % 31)).collect();
        let shown = screen_rows(&rows, 5);
        assert_eq!(shown[0], 0, "the root first");
        let events: Vec<u64> = shown[1..].iter().map(|&i| rows[i].events).collect();
        assert_eq!(events, [30, 29, 28, 27], "peak live bytes are 10 × events here");
        let mut small: Vec<IndexRow> = rows[..4].to_vec();
        small[2].peak_live_bytes = Some(1 << 30);
        small[3].peak_live_bytes = None;
        assert_eq!(screen_rows(&small, 5), [0, 2, 1, 3], "a small index shows all: the root, then by peak, unknown peaks last");
        let View::Note(head) = &views(&small)[0] else { panic!() };
        assert_eq!(
            head,
            "══ 4 traced processes ══\nlargest peak live: 1.0 GiB in 102 (cc1); processes below by peak live bytes, the root first"
        );
        let mut picked = rows.clone();
        for r in picked.iter_mut() {
            r.reported = r.pid == 101 || r.pid == 102;
        }
        assert_eq!(screen_rows(&picked, 5)[..3], [0, 2, 1], "the reported ones after the root, however quiet");
        let v = views(&rows);
        let View::Note(rest) = &v[2] else { panic!("{v:?}") };
        let cut: u64 = rows.iter().map(|r| r.events).sum::<u64>() - shown_events(&rows, &screen_rows(&rows, SCREEN_ROWS));
        assert!(rest.starts_with(&format!("… and 10 more processes with {cut} events")), "{rest}");
        let View::Table(by) = &v[3] else { panic!() };
        assert_eq!(by.rows.len(), 2);
        assert_eq!(by.rows[0][1], Cell::Int(15));
    }

    #[test]
    fn processes_in_the_index_only_are_counted_with_how_to_see_them() {
        let mut rows: Vec<IndexRow> = (0..30).map(|i| row(100 + i, "cc1", i as u64)).collect();
        assert_eq!(index_only_note(&rows), None);
        for r in rows.iter_mut().skip(DETAILED) {
            r.reported = false;
        }
        let note = index_only_note(&rows).unwrap();
        assert_eq!(
            note,
            format!(
                "10 of 30 processes are in the process index only: with more than {DETAILED} processes, the root and the {} busiest \
                 (by events) are reported in detail; report others with --pid PID or --comm NAME, every one with --all-processes",
                DETAILED - 1
            )
        );
        let v = views(&rows);
        assert!(matches!(v.last(), Some(View::Note(n)) if *n == note), "{v:?}");
        // Not reported because --pid/--comm did not name them: no such note.
        for r in rows.iter_mut().skip(DETAILED) {
            r.selected = false;
        }
        assert_eq!(index_only_note(&rows), None);
    }

    #[test]
    fn a_later_image_of_a_pid_makes_the_earlier_one_execd() {
        let facts = |pid: u32, clean_end: bool, exit: Option<&str>| Facts {
            row: row(pid, "sh", 1),
            clean_end,
            running: false,
            exit: exit.map(str::to_string),
        };
        let rows = rows_of(vec![facts(1, false, Some("exit code 3")), facts(2, false, None), facts(1, true, None), facts(2, true, None)]);
        let ends: Vec<Ending> = rows.iter().map(|r| r.ending).collect();
        assert_eq!(ends, [Ending::Execd, Ending::Execd, Ending::ExitCode { exit_code: 3 }, Ending::Exited]);
    }

    fn shown_events(rows: &[IndexRow], shown: &[usize]) -> u64 {
        shown.iter().map(|&i| rows[i].events).sum()
    }

    #[test]
    fn comm_matches_the_first_arguments_or_the_executables_base_name() {
        let r = row(5, "python3", 1);
        assert!(r.is_command("python3"));
        assert!(r.is_command("python3.real"));
        assert!(!r.is_command("python"));
        assert_eq!(command_cell(&r, 11), "python3 -x");
        assert_eq!(command_cell(&r, 5), "pyth…");
    }
}
