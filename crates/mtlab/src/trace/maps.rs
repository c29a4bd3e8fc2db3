//! The MAPS texts of a trace as a report needs them. The writer records
//! /proc/self/maps at start, before every dlclose, at each `ctl dump` and at
//! exit: a program that loads and unloads plugins in a loop writes thousands
//! of snapshots that differ in a line or two, and a crafted trace can repeat
//! one snapshot without end. Keeping every text made memory grow with their
//! number; what reports do with them is `symbolize::parse_all_maps` — every
//! mapping, the later snapshot winning where two overlap — and a mapping met
//! again later paints over the same range as its earlier copy, so only its
//! last copy matters.
//!
//! Kept: the first snapshot whole (pprof names the program by its first
//! file), then, if any later snapshot differs from it, the distinct lines of
//! every later snapshot, each where it last appeared. Reading the result
//! gives the mappings the whole sequence gives, in an order where the later
//! still wins.

use std::collections::HashMap;

#[derive(Debug, Default, Clone)]
pub struct MapsKept {
    first: Option<String>,
    /// Every later snapshot so far was the first one again.
    only_first: bool,
    /// Distinct lines of later snapshots, with when each was last seen.
    later: HashMap<Box<str>, u64>,
    seen: u64,
}

impl MapsKept {
    pub fn add(&mut self, text: &[u8]) {
        let Some(first) = &self.first else {
            self.first = Some(String::from_utf8_lossy(text).into_owned());
            self.only_first = true;
            return;
        };
        if self.only_first && first.as_bytes() == text {
            return;
        }
        self.only_first = false;
        for line in String::from_utf8_lossy(text).lines().filter(|l| !l.is_empty()) {
            self.seen += 1;
            match self.later.get_mut(line) {
                Some(when) => *when = self.seen,
                None => {
                    self.later.insert(line.into(), self.seen);
                }
            }
        }
    }

    /// The texts to parse in order: the first snapshot, then (when there
    /// is more) the later lines, oldest last sighting first.
    pub fn into_texts(self) -> Vec<String> {
        let mut out: Vec<String> = self.first.into_iter().collect();
        if !self.later.is_empty() {
            let mut lines: Vec<(u64, Box<str>)> = self.later.into_iter().map(|(l, when)| (when, l)).collect();
            lines.sort_unstable_by_key(|(when, _)| *when);
            let mut text = String::with_capacity(lines.iter().map(|(_, l)| l.len() + 1).sum());
            for (_, l) in lines {
                text.push_str(&l);
                text.push('\n');
            }
            out.push(text);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{parse_all_maps, Symbolizer};

    fn kept(texts: &[&str]) -> Vec<String> {
        let mut k = MapsKept::default();
        for t in texts {
            k.add(t.as_bytes());
        }
        k.into_texts()
    }

    #[test]
    fn identical_snapshots_are_kept_once() {
        let snap = "00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n7f0000000000-7f0000001000 r-xp 00000000 08:01 2 /lib/libc.so.6\n";
        let texts: Vec<&str> = std::iter::repeat_n(snap, 5000).collect();
        assert_eq!(kept(&texts), vec![snap.to_string()]);
    }

    #[test]
    fn a_library_reloaded_elsewhere_keeps_every_distinct_mapping_and_the_newest_wins() {
        let prog = "00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n";
        let plug_a = "7f0000000000-7f0000001000 r-xp 00000000 08:01 7 /tmp/plugin-a.so\n";
        let plug_b = "7f0000000000-7f0000001000 r-xp 00000000 08:01 8 /tmp/plugin-b.so\n";
        // Start, a loaded, b loaded where a was, a again, then many repeats.
        let snaps = [
            prog.to_string(),
            format!("{prog}{plug_a}"),
            format!("{prog}{plug_b}"),
            format!("{prog}{plug_a}"),
            format!("{prog}{plug_a}"),
            format!("{prog}{plug_a}"),
        ];
        let refs: Vec<&str> = snaps.iter().map(String::as_str).collect();
        let texts = kept(&refs);
        let all = parse_all_maps(&snaps);
        let few = parse_all_maps(&texts);
        assert!(few.len() <= 4, "{texts:?}");
        for m in &all {
            assert!(few.contains(m), "{m:?} dropped: {texts:?}");
        }
        let (a, b) = (Symbolizer::new(&all), Symbolizer::new(&few));
        assert_eq!(a.module_of(0x7f0000000010), b.module_of(0x7f0000000010));
        assert_eq!(b.module_of(0x7f0000000010).unwrap().path, "/tmp/plugin-a.so");
        assert!(texts[0] == prog, "the first snapshot stays first: {texts:?}");
    }
}
