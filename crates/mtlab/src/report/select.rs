//! Which processes `mtlab report` reports in detail (`--pid`, `--comm`,
//! `--all-processes`, and the default for a large tree: the root and the
//! busiest others), and which of them its profile exports take.

use std::collections::BTreeMap;

use super::index::{labels, IndexRow, SCREEN_ROWS};

/// Processes reported in detail, when a run has more of them and neither
/// `--pid`, `--comm` nor `--all-processes` says which: the root and the
/// busiest others by events. The others are in the process index only, and
/// cost only what it needs (their heaps replayed, nothing symbolized): a tree
/// of 600 small processes reported every one at 0.9 ms each, 7x its root alone.
pub const DETAILED: usize = SCREEN_ROWS;

/// `--pid`, `--comm` and `--all-processes`: a process is selected when it
/// matches any pid or name; with neither, every process is, and every one
/// is reported in detail up to `DETAILED` processes (`--all-processes`: however many).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub all_processes: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectError {
    #[error("{asked} matches no traced process in {file}; {available}")]
    NoMatch { asked: String, file: String, available: String },
}

impl Selection {
    /// Are processes named (`--pid`, `--comm`)?
    pub fn names(&self) -> bool {
        !self.pids.is_empty() || !self.comms.is_empty()
    }

    /// Marks the rows selected and those reported in detail: the named ones;
    /// with no name every one, cut to the root and the busiest others when
    /// there are more than `DETAILED` (unless `--all-processes`). Every pid
    /// and name asked for must match a process: a typo would otherwise
    /// report nothing, quietly.
    pub fn apply(&self, rows: &mut [IndexRow], file: &str) -> Result<(), SelectError> {
        let mut unmatched: Vec<String> = Vec::new();
        for pid in &self.pids {
            if !rows.iter().any(|r| r.pid == *pid) {
                unmatched.push(format!("--pid {pid}"));
            }
        }
        for name in &self.comms {
            if !rows.iter().any(|r| r.is_command(name)) {
                unmatched.push(format!("--comm {name}"));
            }
        }
        if !unmatched.is_empty() {
            return Err(SelectError::NoMatch { asked: unmatched.join(", "), file: file.to_string(), available: available(rows) });
        }
        for r in rows.iter_mut() {
            r.selected = !self.names() || self.pids.contains(&r.pid) || self.comms.iter().any(|n| r.is_command(n));
            r.reported = r.selected;
        }
        if !self.names() && !self.all_processes && rows.len() > DETAILED {
            let chosen = busiest(rows.iter().map(|r| r.events), DETAILED);
            for (r, busy) in rows.iter_mut().zip(chosen) {
                r.reported = busy;
            }
        }
        Ok(())
    }
}

/// The first (the root) and the busiest others by `events`, `limit` in all
/// (equal counts in the family's order): true for each one chosen.
pub fn busiest(events: impl Iterator<Item = u64>, limit: usize) -> Vec<bool> {
    let events: Vec<u64> = events.collect();
    let mut order: Vec<usize> = (1..events.len()).collect();
    // Stable: equal counts keep the family's order.
    order.sort_by_key(|&i| std::cmp::Reverse(events[i]));
    let mut chosen = vec![false; events.len()];
    for i in std::iter::once(0).chain(order).take(limit).filter(|&i| i < events.len()) {
        chosen[i] = true;
    }
    chosen
}

/// The processes as "PID (command)", or for a large tree the commands with
/// their counts (what `--comm` takes), so that the message stays readable.
fn available(rows: &[IndexRow]) -> String {
    const LISTED: usize = 12;
    if rows.len() <= LISTED {
        return format!("the traced processes are {}", labels(&rows.iter().collect::<Vec<_>>(), LISTED));
    }
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *by.entry(&r.command).or_default() += 1;
    }
    let mut by: Vec<(&str, usize)> = by.into_iter().collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut parts: Vec<String> = by.iter().take(LISTED).map(|(c, n)| format!("{c} ×{n}")).collect();
    if by.len() > LISTED {
        parts.push(format!("and {} more commands", by.len() - LISTED));
    }
    format!("there are {} traced processes, by command: {} (`mtlab report FILE` lists the busiest with their pids)", rows.len(), parts.join(", "))
}

/// What the profile exports (`--pprof`, `--flamegraph`, `--collapsed`,
/// `--speedscope`, the HTML page's flame graph) are made of: indices into
/// the rows, and the sentence that says so.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportPick {
    pub rows: Vec<usize>,
    pub message: String,
    /// A few words for the HTML page's flame graph: "process 12 (cc1)", "3 processes summed".
    pub caption: String,
}

/// One process unless `merge`: the only one selected; of one pid's several
/// images (exec) the last; else the root when it is selected, else the first
/// selected. With `merge`, every selected one. Selected, not reported in
/// detail: with no `--pid`/`--comm` that is every process, as many as a
/// large tree has.
pub fn export_pick(rows: &[IndexRow], merge: bool) -> ExportPick {
    let selected: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].selected).collect();
    let label = |i: usize| format!("{} ({}, {})", rows[i].pid, rows[i].command, rows[i].file);
    let caption = |i: usize| format!("process {}", rows[i].label());
    if merge && selected.len() > 1 {
        let picked: Vec<&IndexRow> = selected.iter().map(|&i| &rows[i]).collect();
        return ExportPick {
            message: format!("the exports sum the profiles of {} processes: {}", selected.len(), labels(&picked, 10)),
            caption: format!("{} processes summed", selected.len()),
            rows: selected,
        };
    }
    let Some(&first) = selected.first() else {
        return ExportPick { rows: Vec::new(), message: "no process selected: nothing to export".into(), caption: String::new() };
    };
    if selected.len() == 1 {
        return ExportPick { rows: vec![first], message: format!("the exports are of process {}", label(first)), caption: caption(first) };
    }
    let last = selected[selected.len() - 1];
    if selected.iter().all(|&i| rows[i].pid == rows[first].pid) {
        // One process that exec'd: its last image is the program it became.
        return ExportPick {
            rows: vec![last],
            caption: caption(last),
            message: format!(
                "the exports are of process {}, the last of its {} traces (it exec'd); --merge sums them all",
                label(last),
                selected.len()
            ),
        };
    }
    let (one, which) = if first == 0 { (0, "the root") } else { (first, "the first") };
    ExportPick {
        rows: vec![one],
        caption: caption(one),
        message: format!(
            "the exports are of process {}, {which} of {} selected processes; --merge sums them all, --pid PID takes another",
            label(one),
            selected.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::index::Ending;

    fn row(pid: u32, command: &str) -> IndexRow {
        IndexRow {
            pid,
            ppid: 1,
            command: command.into(),
            cmdline: vec![command.into()],
            exe: format!("/usr/bin/{command}"),
            file: format!("t.mtl.{pid}"),
            events: 1,
            peak_live_bytes: None,
            ending: Ending::Exited,
            reported: true,
            selected: true,
        }
    }

    fn tree() -> Vec<IndexRow> {
        vec![row(10, "make"), row(11, "cc1"), row(12, "as"), row(13, "cc1")]
    }

    fn reported(rows: &[IndexRow]) -> Vec<u32> {
        rows.iter().filter(|r| r.reported).map(|r| r.pid).collect()
    }

    #[test]
    fn pids_and_commands_select_their_union() {
        let mut rows = tree();
        Selection { pids: vec![12], comms: vec!["cc1".into()], ..Default::default() }.apply(&mut rows, "t.mtl").unwrap();
        assert_eq!(reported(&rows), [11, 12, 13]);
        Selection::default().apply(&mut rows, "t.mtl").unwrap();
        assert_eq!(reported(&rows), [10, 11, 12, 13]);
    }

    #[test]
    fn what_matches_nothing_is_an_error_naming_what_exists() {
        let mut rows = tree();
        let e = Selection { pids: vec![99, 10], comms: vec!["ld".into()], ..Default::default() }.apply(&mut rows, "t.mtl").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pid 99, --comm ld matches no traced process in t.mtl; the traced processes are 10 (make), 11 (cc1), 12 (as), 13 (cc1)"
        );
        assert_eq!(reported(&rows), [10, 11, 12, 13], "nothing changed");
        let mut big: Vec<IndexRow> = (0..20).map(|i| row(100 + i, if i < 15 { "cc1" } else { "as" })).collect();
        let e = Selection { pids: vec![1], ..Default::default() }.apply(&mut big, "t.mtl").unwrap_err().to_string();
        assert!(e.ends_with("; there are 20 traced processes, by command: cc1 ×15, as ×5 (`mtlab report FILE` lists the busiest with their pids)"), "{e}");
    }

    #[test]
    fn the_busiest_are_the_root_and_the_most_events_in_the_familys_order() {
        let chosen = |events: &[u64], limit| busiest(events.iter().copied(), limit);
        assert_eq!(chosen(&[1, 9, 5, 9, 7], 3), [true, true, false, true, false], "the root however quiet; ties in order");
        assert_eq!(chosen(&[1, 2], 5), [true, true]);
        assert_eq!(chosen(&[], 5), Vec::<bool>::new());
        assert_eq!(chosen(&[4, 5, 6], 1), [true, false, false]);
    }

    /// `n` processes, pid 100 + i with i + 1 events (the root the quietest).
    fn large(n: u32) -> Vec<IndexRow> {
        (0..n)
            .map(|i| IndexRow { events: u64::from(i) + 1, ..row(100 + i, if i % 2 == 0 { "cc1" } else { "as" }) })
            .collect()
    }

    #[test]
    fn a_large_run_reports_the_root_and_the_busiest_and_selects_every_one() {
        let n = DETAILED as u32 + 5;
        let mut rows = large(n);
        Selection::default().apply(&mut rows, "t.mtl").unwrap();
        let mut want = vec![100];
        want.extend((100 + n - (DETAILED as u32 - 1))..(100 + n));
        assert_eq!(reported(&rows), want);
        assert!(rows.iter().all(|r| r.selected), "the exports still choose from every process");
        assert_eq!(export_pick(&rows, true).rows.len(), n as usize);
        let mut all = large(n);
        Selection { all_processes: true, ..Default::default() }.apply(&mut all, "t.mtl").unwrap();
        assert_eq!(reported(&all).len(), n as usize);
        let mut exact = large(DETAILED as u32);
        Selection::default().apply(&mut exact, "t.mtl").unwrap();
        assert_eq!(reported(&exact).len(), DETAILED, "up to the limit, every one");
        // Naming processes reports them, however quiet, and only them.
        let mut named = large(n);
        Selection { pids: vec![101], ..Default::default() }.apply(&mut named, "t.mtl").unwrap();
        assert_eq!(reported(&named), [101]);
        assert_eq!(named.iter().filter(|r| r.selected).count(), 1);
        let mut by_name = large(n);
        Selection { comms: vec!["as".into()], ..Default::default() }.apply(&mut by_name, "t.mtl").unwrap();
        assert_eq!(reported(&by_name).len(), n as usize / 2, "a name reports all its processes, beyond the limit");
    }

    #[test]
    fn exports_take_one_process_and_say_which_unless_merged() {
        let mut rows = tree();
        let p = export_pick(&rows, false);
        assert_eq!(p.rows, [0]);
        assert_eq!(
            p.message,
            "the exports are of process 10 (make, t.mtl.10), the root of 4 selected processes; --merge sums them all, --pid PID takes another"
        );
        assert_eq!(p.caption, "process 10 (make)");
        assert_eq!(export_pick(&rows, true).rows, [0, 1, 2, 3]);
        assert_eq!(export_pick(&rows, true).caption, "4 processes summed");
        Selection { comms: vec!["cc1".into()], ..Default::default() }.apply(&mut rows, "t.mtl").unwrap();
        let p = export_pick(&rows, false);
        assert_eq!(p.rows, [1]);
        assert!(p.message.contains("11 (cc1, t.mtl.11), the first of 2 selected"), "{}", p.message);
        let p = export_pick(&rows, true);
        assert_eq!(p.rows, [1, 3]);
        assert_eq!(p.message, "the exports sum the profiles of 2 processes: 11 (cc1), 13 (cc1)");
        let mut images = tree();
        images[2].pid = 11;
        Selection { pids: vec![11], ..Default::default() }.apply(&mut images, "t.mtl").unwrap();
        let p = export_pick(&images, false);
        assert_eq!(p.rows, [2]);
        assert_eq!(p.message, "the exports are of process 11 (as, t.mtl.12), the last of its 2 traces (it exec'd); --merge sums them all");
        Selection { pids: vec![12], ..Default::default() }.apply(&mut rows, "t.mtl").unwrap();
        assert_eq!(export_pick(&rows, true).message, "the exports are of process 12 (as, t.mtl.12)");
    }
}
