//! A process's sites keyed by their symbolized frames, and the change of
//! each between two processes.
//!
//! A site's key is its frames as text, innermost first: `function
//! (file.c:12)` where the debug information gives file and line, `function`
//! where it gives only the name, and `module+0xOFFSET` for a frame with no
//! symbol (the offset in the module's file: stable under ASLR, not across a
//! rebuild of that module). Addresses never enter a key, so two runs of one
//! build, or of a rebuild whose functions kept their lines, match. With
//! `KeyBy::Functions` the lines are left out too: sites in one function
//! merge, and an edit that moved lines still matches. Sites of one process
//! whose keys are equal (two return addresses on one line) are summed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::model::{FrameReport, SiteReport};
use crate::analysis::ProcessReport;
use crate::profile::ProfileData;

/// What of a frame the key keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyBy {
    /// Function, file and line.
    Lines,
    /// Function only (file and line left out).
    Functions,
}

/// The figures of one site (or of the sites sharing a key). Peak and
/// temporaries are None where the source has none (a sampled trace's or a
/// live profile's estimates); estimates are rounded to integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    pub calls: u64,
    pub bytes: u64,
    pub peak_live_objects: Option<u64>,
    pub peak_live_bytes: Option<u64>,
    /// Live at the end (a full trace's leaks; a profile's in-use figures).
    pub leaked_objects: u64,
    pub leaked_bytes: u64,
    pub temporary: Option<u64>,
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.calls += o.calls;
        self.bytes += o.bytes;
        self.peak_live_objects = add_opt(self.peak_live_objects, o.peak_live_objects);
        self.peak_live_bytes = add_opt(self.peak_live_bytes, o.peak_live_bytes);
        self.leaked_objects += o.leaked_objects;
        self.leaked_bytes += o.leaked_bytes;
        self.temporary = add_opt(self.temporary, o.temporary);
    }

    fn of_site(s: &SiteReport) -> Figures {
        Figures {
            calls: s.calls,
            bytes: s.bytes,
            peak_live_objects: s.peak_live_objects,
            peak_live_bytes: s.peak_live_bytes,
            leaked_objects: s.live_objects,
            leaked_bytes: s.live_bytes,
            temporary: Some(s.temporary),
        }
    }
}

/// One frame of a key (see the module's comment): a function with its
/// file's base name and line (by lines), or a module and offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyFrame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Module and offset, for a frame with no function name only.
    pub location: Option<String>,
}

impl KeyFrame {
    pub fn of(f: &FrameReport, by: KeyBy) -> KeyFrame {
        match &f.function {
            Some(name) => {
                let lines = by == KeyBy::Lines && f.line.is_some();
                KeyFrame {
                    function: Some(name.clone()),
                    file: f.file.as_ref().filter(|_| lines).map(|p| p.rsplit('/').next().unwrap_or(p).to_string()),
                    line: f.line.filter(|_| lines && f.file.is_some()),
                    location: None,
                }
            }
            None => KeyFrame { function: None, file: None, line: None, location: Some(format!("{}+{}", f.module, f.offset)) },
        }
    }

    /// `function (file.c:12)`, `function`, or `module+0xOFFSET`.
    pub fn label(&self) -> String {
        match (&self.function, &self.file, self.line) {
            (Some(n), Some(file), Some(line)) => format!("{n} ({file}:{line})"),
            (Some(n), _, _) => n.clone(),
            (None, _, _) => self.location.clone().unwrap_or_default(),
        }
    }
}

/// A site's key: its frames, innermost first.
pub type Key = Vec<KeyFrame>;

fn key_of(frames: &[FrameReport], by: KeyBy) -> Key {
    frames.iter().map(|f| KeyFrame::of(f, by)).collect()
}

/// A process's sites by key. A full trace's come from its analysis's every
/// site (`AnalyzeOptions::sites`); a sampled trace's (or any process with
/// only a profile) from its profile's stacks, symbolized here.
pub struct SiteTable {
    pub sites: BTreeMap<Key, Figures>,
    /// The figures are estimates from samples.
    pub estimated: bool,
    /// Sites whose frames have no function name at all.
    pub unnamed: usize,
}

impl SiteTable {
    pub fn of_process(p: &ProcessReport, by: KeyBy) -> SiteTable {
        match (&p.profile, &p.profile_data) {
            (Some(_), Some(data)) => Self::of_profile(data, by),
            _ => Self::of_sites(&p.all_sites, by),
        }
    }

    pub fn of_sites(sites: &[SiteReport], by: KeyBy) -> SiteTable {
        let mut t = SiteTable { sites: BTreeMap::new(), estimated: false, unnamed: 0 };
        for s in sites {
            t.add(key_of(&s.frames, by), &Figures::of_site(s), s.frames.iter().all(|f| f.function.is_none()));
        }
        t
    }

    /// The sites of a profile (a sampled trace's estimates, a live
    /// profile): no peak, no temporaries; in use at its end as "leaked".
    pub fn of_profile(data: &ProfileData, by: KeyBy) -> SiteTable {
        let mut sym = data.symbolizer();
        let mut t = SiteTable { sites: BTreeMap::new(), estimated: data.period_bytes > 0, unnamed: 0 };
        let round = |x: f64| x.round().max(0.0) as u64;
        for s in &data.samples {
            let frames: Vec<FrameReport> = s
                .pcs
                .iter()
                .flat_map(|&pc| sym.symbolize(pc))
                .map(FrameReport::of)
                .collect();
            let fig = Figures {
                calls: round(s.alloc_objects),
                bytes: round(s.alloc_bytes),
                leaked_objects: round(s.inuse_objects),
                leaked_bytes: round(s.inuse_bytes),
                ..Figures::default()
            };
            t.add(key_of(&frames, by), &fig, frames.iter().all(|f| f.function.is_none()));
        }
        t
    }

    fn add(&mut self, key: Key, fig: &Figures, unnamed: bool) {
        let e = self.sites.entry(key).or_default();
        if *e == Figures::default() && unnamed {
            self.unnamed += 1;
        }
        e.add(fig);
    }
}

/// One key's figures in both processes (None: no site of that key there).
#[derive(Debug, Clone)]
pub struct SiteChange {
    /// The key: frames innermost first.
    pub frames: Key,
    pub base: Option<Figures>,
    pub new: Option<Figures>,
}

/// NEW minus BASE of one figure (None where either side has no such figure).
fn delta(b: Option<u64>, n: Option<u64>) -> Option<i64> {
    Some(n? as i64 - b? as i64)
}

impl SiteChange {
    fn side(&self, new: bool) -> Figures {
        if new { self.new } else { self.base }.unwrap_or_default()
    }

    /// A figure's change; a site only on one side counts as 0 on the other
    /// (an optional figure needs a value on the side that has the site).
    pub fn change(&self, f: impl Fn(&Figures) -> Option<u64>) -> Option<i64> {
        let (b, n) = (self.base.as_ref().map_or(Some(0), &f), self.new.as_ref().map_or(Some(0), &f));
        delta(b, n)
    }

    pub fn calls(&self) -> i64 {
        self.side(true).calls as i64 - self.side(false).calls as i64
    }
    pub fn bytes(&self) -> i64 {
        self.side(true).bytes as i64 - self.side(false).bytes as i64
    }
    pub fn leaked_objects(&self) -> i64 {
        self.side(true).leaked_objects as i64 - self.side(false).leaked_objects as i64
    }
    pub fn leaked_bytes(&self) -> i64 {
        self.side(true).leaked_bytes as i64 - self.side(false).leaked_bytes as i64
    }
    pub fn peak_bytes(&self) -> Option<i64> {
        self.change(|f| f.peak_live_bytes)
    }
    pub fn temporary(&self) -> Option<i64> {
        self.change(|f| f.temporary)
    }

    /// The frames' labels, innermost first.
    pub fn labels(&self) -> Vec<String> {
        self.frames.iter().map(KeyFrame::label).collect()
    }

    /// "changed", "new" (only in NEW) or "gone" (only in BASE).
    pub fn status(&self) -> &'static str {
        match (&self.base, &self.new) {
            (None, Some(_)) => "new",
            (Some(_), None) => "gone",
            _ => "changed",
        }
    }

    /// The largest change of bytes: allocated, at the peak or leaked.
    pub fn rank(&self) -> u64 {
        [self.bytes(), self.peak_bytes().unwrap_or(0), self.leaked_bytes()].iter().map(|d| d.unsigned_abs()).max().unwrap_or(0)
    }

    pub fn changed(&self) -> bool {
        self.base != self.new
    }
}

/// The sites of two processes matched by key: those whose figures changed
/// first, the largest change of bytes first (then of calls, then by key),
/// then the unchanged (the flame graph draws them too).
pub struct Matched {
    pub sites: Vec<SiteChange>,
    pub unchanged: usize,
    /// Keys in both, only in BASE, only in NEW.
    pub both: usize,
    pub only_base: usize,
    pub only_new: usize,
}

pub fn match_sites(base: &SiteTable, new: &SiteTable) -> Matched {
    let mut changes = Vec::new();
    let mut m = Matched { sites: Vec::new(), unchanged: 0, both: 0, only_base: 0, only_new: 0 };
    for (key, b) in &base.sites {
        let n = new.sites.get(key).copied();
        if n.is_some() {
            m.both += 1;
        } else {
            m.only_base += 1;
        }
        changes.push(SiteChange { frames: key.clone(), base: Some(*b), new: n });
    }
    for (key, n) in &new.sites {
        if !base.sites.contains_key(key) {
            m.only_new += 1;
            changes.push(SiteChange { frames: key.clone(), base: None, new: Some(*n) });
        }
    }
    m.unchanged = changes.iter().filter(|c| !c.changed()).count();
    // Stable on the key order the tables gave: equal changes keep it.
    changes.sort_by(|a, b| {
        (b.changed().cmp(&a.changed()))
            .then(b.rank().cmp(&a.rank()))
            .then(b.calls().unsigned_abs().cmp(&a.calls().unsigned_abs()))
    });
    m.sites = changes;
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: Option<&str>, file: Option<&str>, line: Option<u32>, pc: &str, offset: &str) -> FrameReport {
        FrameReport {
            pc: pc.into(),
            function: function.map(str::to_string),
            file: file.map(str::to_string),
            line,
            module: "prog".into(),
            offset: offset.into(),
        }
    }

    fn site(frames: Vec<FrameReport>, calls: u64, bytes: u64, live: u64) -> SiteReport {
        SiteReport {
            stack_id: 0,
            calls,
            bytes,
            live_objects: u64::from(live > 0),
            live_bytes: live,
            peak_live_objects: Some(1),
            peak_live_bytes: Some(bytes.min(100)),
            temporary: 0,
            frames,
        }
    }

    #[test]
    fn sites_match_by_names_and_lines_not_addresses() {
        let a = frame(Some("make"), Some("/b1/p.c"), Some(7), "0x401000", "0x1000");
        let a2 = frame(Some("make"), Some("/b2/p.c"), Some(7), "0x5555f000", "0x1200"); // rebuilt elsewhere
        let moved = frame(Some("make"), Some("/b2/p.c"), Some(9), "0x5555f000", "0x1200");
        let anon = frame(None, None, None, "0x401100", "0x1100");
        let base = SiteTable::of_sites(&[site(vec![a.clone()], 2, 20, 0), site(vec![anon.clone()], 1, 5, 5)], KeyBy::Lines);
        let new = SiteTable::of_sites(&[site(vec![a2.clone()], 3, 30, 10), site(vec![anon], 1, 5, 5)], KeyBy::Lines);
        let m = match_sites(&base, &new);
        assert_eq!((m.both, m.only_base, m.only_new, m.unchanged), (2, 0, 0, 1));
        assert_eq!(m.sites.iter().filter(|c| c.changed()).count(), 1);
        let c = &m.sites[0];
        assert_eq!(c.labels(), ["make (p.c:7)"]);
        assert_eq!((c.calls(), c.bytes(), c.leaked_bytes(), c.leaked_objects(), c.status()), (1, 10, 10, 1, "changed"));
        assert_eq!(base.unnamed, 1);
        // A moved line is another site by lines, the same one by functions.
        let moved_new = SiteTable::of_sites(&[site(vec![moved.clone()], 3, 30, 0)], KeyBy::Lines);
        let m = match_sites(&base, &moved_new);
        assert_eq!((m.both, m.only_base, m.only_new), (0, 2, 1));
        let by_fn = |s: &[SiteReport]| SiteTable::of_sites(s, KeyBy::Functions);
        let m = match_sites(&by_fn(&[site(vec![a], 2, 20, 0)]), &by_fn(&[site(vec![moved], 3, 30, 0)]));
        assert_eq!((m.both, m.sites[0].bytes()), (1, 10));
    }

    #[test]
    fn equal_keys_sum_and_changes_rank_by_the_largest_byte_change() {
        let f = |name: &str, line| frame(Some(name), Some("p.c"), Some(line), "0x1", "0x1");
        // Two return addresses on one line: one key, summed.
        let base = SiteTable::of_sites(
            &[site(vec![f("a", 1)], 1, 10, 0), site(vec![f("a", 1)], 1, 10, 0), site(vec![f("b", 2)], 5, 500, 0)],
            KeyBy::Lines,
        );
        assert_eq!(base.sites.values().next().map(|f| f.calls), Some(2));
        let new = SiteTable::of_sites(
            &[site(vec![f("a", 1)], 4, 40, 0), site(vec![f("c", 3)], 1, 1000, 1000)],
            KeyBy::Lines,
        );
        let m = match_sites(&base, &new);
        let order: Vec<(String, &str, i64)> = m.sites.iter().map(|c| (c.frames[0].label(), c.status(), c.bytes())).collect();
        let want = [("c (p.c:3)", "new", 1000), ("b (p.c:2)", "gone", -500), ("a (p.c:1)", "changed", 20)];
        assert_eq!(order, want.map(|(l, s, b)| (l.to_string(), s, b)));
        assert_eq!(m.sites[1].peak_bytes(), Some(-100));
        // A sampled side has no temporaries: no change of them either.
        let mut est = new.sites.clone();
        est.values_mut().for_each(|v| v.temporary = None);
        let m = match_sites(&base, &SiteTable { sites: est, estimated: true, unnamed: 0 });
        assert!(m.sites.iter().all(|c| c.status() != "changed" || c.temporary().is_none()));
    }
}
