//! Folded stacks and flame graphs of a [`ProfileData`].
//!
//! A folded stack is `outermost;...;innermost` function names (inlined frames expanded,
//! so a pc inlining `g` into `f` gives `f;g`), followed by a space and a count: the format
//! of Brendan Gregg's `stackcollapse-*` scripts, `flamegraph.pl` and `inferno`. A frame
//! without a function name is written `module+0xoffset` (`0xpc` outside every mapping),
//! like [`Frame::display`]; `;` inside a name becomes `,` and line breaks become spaces,
//! so that names never break the format. Identical stacks are added up.

use std::io::{BufWriter, Write};
use std::path::Path;

use inferno::flamegraph::{self, color::BasicPalette, Options, Palette};

use super::data::{ProfileData, StackSample};
use super::pprof::ExportError;
use crate::export::flame::FlameNode;
use crate::symbolize::{Frame, Symbolizer};

/// Which value of a profile a folded stack or flame graph counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum FlameValue {
    /// Bytes allocated over the whole profile.
    AllocBytes,
    /// Objects (allocations) made over the whole profile.
    AllocObjects,
    /// Bytes still allocated (live) at the end of the profile.
    InuseBytes,
    /// Objects still allocated (live) at the end of the profile.
    InuseObjects,
}

impl FlameValue {
    /// The value of `s` this counts.
    pub fn of(self, s: &StackSample) -> f64 {
        match self {
            FlameValue::AllocBytes => s.alloc_bytes,
            FlameValue::AllocObjects => s.alloc_objects,
            FlameValue::InuseBytes => s.inuse_bytes,
            FlameValue::InuseObjects => s.inuse_objects,
        }
    }

    /// Human-readable description, e.g. "allocated bytes".
    pub fn description(self) -> &'static str {
        match self {
            FlameValue::AllocBytes => "allocated bytes",
            FlameValue::AllocObjects => "allocated objects",
            FlameValue::InuseBytes => "in-use bytes",
            FlameValue::InuseObjects => "in-use objects",
        }
    }

    /// The unit counted: "bytes" or "objects".
    pub fn unit(self) -> &'static str {
        match self {
            FlameValue::AllocBytes | FlameValue::InuseBytes => "bytes",
            FlameValue::AllocObjects | FlameValue::InuseObjects => "objects",
        }
    }

    /// The flame graph's title, e.g. "mtlab: allocated bytes".
    pub fn title(self) -> String {
        format!("mtlab: {}", self.description())
    }
}

/// The stack written for a sample without any pc.
pub const EMPTY_STACK: &str = "[no stack]";

/// A frame's name in a folded stack.
fn frame_name(f: &Frame) -> String {
    let name = f.name_or_location();
    name.chars()
        .map(|c| match c {
            ';' => ',',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// The folded stacks of `profile` counting `value`: `("outermost;...;innermost", count)`,
/// identical stacks added up, the sum rounded to the nearest integer, stacks whose count
/// rounds to 0 (or is negative or NaN) left out, sorted by stack.
pub fn folded(
    profile: &ProfileData,
    symbolizer: &mut Symbolizer,
    value: FlameValue,
) -> Vec<(String, u64)> {
    let mut totals: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    let mut names = NameCache::default();
    for s in &profile.samples {
        let v = value.of(s);
        // Skips zero, negative and NaN values.
        if v.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        let parts = names.stack(s, symbolizer);
        let stack = if parts.is_empty() {
            EMPTY_STACK.to_string()
        } else {
            parts.join(";")
        };
        *totals.entry(stack).or_insert(0.0) += v;
    }
    let mut out: Vec<(String, u64)> = totals
        .into_iter()
        .map(|(k, v)| (k, v.round() as u64))
        .filter(|(_, v)| *v > 0)
        .collect();
    out.sort();
    out
}

/// Each pc's frame names (innermost first, as the symbolizer gives them),
/// symbolized once.
#[derive(Default)]
struct NameCache(std::collections::HashMap<u64, Vec<String>>);

impl NameCache {
    /// The frame names of `s`'s stack, outermost first (inlined frames expanded).
    fn stack<'a>(&'a mut self, s: &StackSample, symbolizer: &mut Symbolizer) -> Vec<&'a str> {
        for &pc in &s.pcs {
            self.0.entry(pc).or_insert_with(|| symbolizer.symbolize(pc).iter().map(frame_name).collect());
        }
        let names = &self.0;
        s.pcs.iter().rev().flat_map(|pc| names[pc].iter().rev().map(String::as_str)).collect()
    }
}

/// A node of the tree while it is built: children by name.
#[derive(Default)]
struct Building {
    values: [f64; 4],
    children: std::collections::HashMap<String, Building>,
}

/// The call tree of `profile` for a page's interactive flame graph (root
/// "all", callers above callees), with at most about `max_nodes` nodes: the
/// frames below a share of every one of the four totals are left out (the
/// share doubles from 0.1 % until the tree fits) and counted in
/// `FlameGraph::left_out`; their values stay in their callers.
pub fn tree(profile: &ProfileData, symbolizer: &mut Symbolizer, max_nodes: usize) -> (FlameNode, usize) {
    let mut root = Building::default();
    let mut names = NameCache::default();
    for s in &profile.samples {
        let v = [s.alloc_bytes, s.alloc_objects, s.inuse_bytes, s.inuse_objects].map(|x| if x.is_finite() && x > 0.0 { x } else { 0.0 });
        if v.iter().all(|&x| x == 0.0) {
            continue;
        }
        let mut node = &mut root;
        add(&mut node.values, &v);
        let parts = names.stack(s, symbolizer);
        let parts = if parts.is_empty() { vec![EMPTY_STACK] } else { parts };
        for name in parts {
            node = node.children.entry(name.to_string()).or_default();
            add(&mut node.values, &v);
        }
    }
    let totals = root.values;
    let all = count(&root);
    let mut share = 0.001;
    loop {
        let min = totals.map(|t| t * share);
        let kept = finish("all".to_string(), &root, &min);
        let n = kept.count();
        if n <= max_nodes.max(1) || share >= 1.0 {
            return (kept, all - n);
        }
        share *= 2.0;
    }
}

fn add(to: &mut [f64; 4], v: &[f64; 4]) {
    for (t, x) in to.iter_mut().zip(v) {
        *t += x;
    }
}

fn count(b: &Building) -> usize {
    1 + b.children.values().map(count).sum::<usize>()
}

/// The node of `b` and its children at or above `min` in some value, the
/// largest allocated bytes first; values rounded to whole bytes and objects.
fn finish(name: String, b: &Building, min: &[f64; 4]) -> FlameNode {
    let mut children: Vec<FlameNode> = b
        .children
        .iter()
        .filter(|(_, c)| c.values.iter().zip(min).any(|(v, m)| *v > 0.0 && v >= m))
        .map(|(n, c)| finish(n.clone(), c, min))
        .collect();
    children.sort_by(|a, b| b.values[0].total_cmp(&a.values[0]).then_with(|| a.name.cmp(&b.name)));
    FlameNode { name, values: b.values.map(f64::round), children }
}

/// The lines of `folded` in collapsed format: `stack count\n` each.
pub fn collapsed_text(folded: &[(String, u64)]) -> String {
    let mut s = String::new();
    for (stack, count) in folded {
        s.push_str(stack);
        s.push(' ');
        s.push_str(&count.to_string());
        s.push('\n');
    }
    s
}

fn write_file(out: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    // Written beside and renamed: a link left at the name is not followed.
    let file = crate::platform::safe_fs::replace(out, 0o666).map_err(|e| ExportError::create(out, e))?;
    let mut w = BufWriter::new(file);
    w.write_all(bytes).map_err(|e| ExportError::write(out, e))?;
    let file = w
        .into_inner()
        .map_err(|e| ExportError::write(out, e.into_error()))?;
    file.file().sync_all().map_err(|e| ExportError::write(out, e))?;
    file.commit().map_err(|e| ExportError::write(out, e))
}

/// Writes the folded stacks of `profile` counting `value` to `out`, one `stack count` per
/// line (the input of `flamegraph.pl`, `inferno-flamegraph`, speedscope, …).
pub fn write_collapsed(
    profile: &ProfileData,
    symbolizer: &mut Symbolizer,
    value: FlameValue,
    out: &Path,
) -> Result<(), ExportError> {
    let lines = folded(profile, symbolizer, value);
    write_file(out, collapsed_text(&lines).as_bytes())
}

/// Renders folded stacks as an interactive SVG flame graph (click to zoom, search,
/// tooltips with counts), titled after `value`. `Err` with an `InvalidData` error when
/// there is nothing to draw.
pub fn flamegraph_svg(folded: &[(String, u64)], value: FlameValue) -> std::io::Result<Vec<u8>> {
    let mut opt = Options::default();
    opt.title = value.title();
    opt.count_name = value.unit().to_string();
    opt.name_type = "Function:".to_string();
    opt.colors = Palette::Basic(BasicPalette::Mem);
    // Colors from the names' hashes: the same input gives the same SVG.
    opt.hash = true;
    let lines: Vec<String> = folded.iter().map(|(s, c)| format!("{s} {c}")).collect();
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut svg)?;
    Ok(svg)
}

/// Writes an interactive SVG flame graph of `profile` counting `value` to `out`.
/// A profile with no nonzero `value` is an [`ExportError::Empty`] and writes nothing.
pub fn write_flamegraph_svg(
    profile: &ProfileData,
    symbolizer: &mut Symbolizer,
    value: FlameValue,
    out: &Path,
) -> Result<(), ExportError> {
    let lines = folded(profile, symbolizer, value);
    if lines.is_empty() {
        return Err(ExportError::Empty {
            path: out.to_path_buf(),
            what: value.description().to_string(),
        });
    }
    let svg = flamegraph_svg(&lines, value).map_err(|source| ExportError::Render {
        path: out.to_path_buf(),
        source,
    })?;
    write_file(out, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::pprof::tests::{self_maps, test_pcs};
    use crate::symbolize::parse_maps;

    fn name_of(sym: &mut Symbolizer, pc: u64) -> Vec<String> {
        let mut v: Vec<String> = sym.symbolize(pc).iter().map(frame_name).collect();
        v.reverse();
        v
    }

    /// Two stacks over the test binary's functions, plus a duplicate of the first.
    fn two_stack_profile() -> ProfileData {
        let (leaf, root) = test_pcs();
        let sample = |pcs: Vec<u64>, bytes: f64, objs: f64, inuse: f64| StackSample {
            pcs,
            alloc_objects: objs,
            alloc_bytes: bytes,
            inuse_objects: if inuse > 0.0 { 1.0 } else { 0.0 },
            inuse_bytes: inuse,
            bounds: None,
            threads: Vec::new(),
        };
        ProfileData {
            samples: vec![
                sample(vec![leaf, root], 1000.25, 2.0, 64.0),
                sample(vec![root], 500.0, 1.0, 0.0),
                sample(vec![leaf, root], 24.5, 1.0, 0.0),
            ],
            maps: self_maps(),
            period_bytes: 0,
            start_ns: 0,
            duration_ns: 0,
        }
    }

    #[test]
    fn the_tree_adds_each_stack_into_its_callers_and_leaves_out_the_smallest() {
        let profile = two_stack_profile();
        let mut sym = Symbolizer::new(&profile.maps);
        let (tree, left_out) = super::tree(&profile, &mut sym, 100);
        assert_eq!(left_out, 0);
        assert_eq!(tree.name, "all");
        // 1000.25 + 500 + 24.5 bytes, 4 objects; 64 bytes in one object in use.
        assert_eq!(tree.values, [1525.0, 4.0, 64.0, 1.0]);
        assert_eq!(tree.children.len(), 1, "one outermost function");
        let root = &tree.children[0];
        assert!(root.name.ends_with("mtlab_test_root_beta"), "{}", root.name);
        assert_eq!(root.values, tree.values);
        assert_eq!(root.children.len(), 1);
        let leaf = &root.children[0];
        assert!(leaf.name.ends_with("mtlab_test_leaf_alpha"), "{}", leaf.name);
        assert_eq!(leaf.values, [1025.0, 3.0, 64.0, 1.0]);
        // Two nodes allowed: frames go (the leaf holds all in-use bytes, so
        // both go at once), their values stay in the root.
        let (small, left_out) = super::tree(&profile, &mut sym, 2);
        assert!(small.count() <= 2, "{small:?}");
        assert_eq!(small.count() + left_out, 3);
        assert_eq!(small.values, tree.values);
    }

    #[test]
    fn profile_flame_folded_exact() {
        let profile = two_stack_profile();
        let (leaf, root) = test_pcs();
        let mut sym = Symbolizer::new(&profile.maps);
        let leaf_names = name_of(&mut sym, leaf);
        let root_names = name_of(&mut sym, root);
        assert_eq!(leaf_names.len(), 1, "{leaf_names:?}");
        assert_eq!(root_names.len(), 1, "{root_names:?}");
        let (l, r) = (&leaf_names[0], &root_names[0]);
        assert!(l.ends_with("mtlab_test_leaf_alpha"), "{l}");
        assert!(r.ends_with("mtlab_test_root_beta"), "{r}");
        assert_eq!(
            l, "mtlab::profile::pprof::tests::mtlab_test_leaf_alpha",
            "demangled path expected"
        );

        let got = folded(&profile, &mut sym, FlameValue::AllocBytes);
        let mut want = vec![(format!("{r};{l}"), 1025), (r.to_string(), 500)];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(folded(&profile, &mut sym, FlameValue::AllocObjects), {
            let mut w = vec![(format!("{r};{l}"), 3), (r.to_string(), 1)];
            w.sort();
            w
        });
        assert_eq!(
            folded(&profile, &mut sym, FlameValue::InuseBytes),
            vec![(format!("{r};{l}"), 64)]
        );
        assert_eq!(
            folded(&profile, &mut sym, FlameValue::InuseObjects),
            vec![(format!("{r};{l}"), 1)]
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alloc.folded");
        write_collapsed(&profile, &mut sym, FlameValue::AllocBytes, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut want_lines = [format!("{r};{l} 1025"), format!("{r} 500")];
        want_lines.sort();
        assert_eq!(text, format!("{}\n{}\n", want_lines[0], want_lines[1]));
    }

    #[test]
    fn profile_flame_unknown_frames_and_names() {
        let maps = parse_maps(
            "10000-20000 r-xp 00000000 08:01 5 /nonexistent/lib.so\n\
             30000-31000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        let profile = ProfileData {
            samples: vec![
                StackSample {
                    pcs: vec![0x10010, 0x30020, 0x5],
                    alloc_bytes: 7.0,
                    ..Default::default()
                },
                StackSample {
                    pcs: vec![],
                    alloc_bytes: 2.0,
                    ..Default::default()
                },
                StackSample {
                    pcs: vec![0x10010],
                    alloc_bytes: 0.4,
                    ..Default::default()
                },
            ],
            maps: maps.clone(),
            ..Default::default()
        };
        let mut sym = Symbolizer::new(&maps);
        assert_eq!(
            folded(&profile, &mut sym, FlameValue::AllocBytes),
            vec![
                ("0x5;[vdso]+0x20;lib.so+0x10".to_string(), 7),
                (EMPTY_STACK.to_string(), 2),
            ]
        );
        assert!(folded(&profile, &mut sym, FlameValue::InuseBytes).is_empty());
        let f = Frame {
            pc: 1,
            function: Some("<[u8; 4] as Foo>::bar\nx".into()),
            file: None,
            line: None,
            module: "m".into(),
            inlined: false,
            offset: 1,
        };
        assert_eq!(frame_name(&f), "<[u8, 4] as Foo>::bar x");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.svg");
        let err =
            write_flamegraph_svg(&profile, &mut sym, FlameValue::InuseBytes, &path).unwrap_err();
        assert!(matches!(err, ExportError::Empty { .. }), "{err}");
        assert!(err.to_string().contains("empty.svg"), "{err}");
        assert!(err.to_string().contains("in-use bytes"), "{err}");
        assert!(!path.exists());
        let err = write_collapsed(
            &profile,
            &mut sym,
            FlameValue::AllocBytes,
            Path::new("/nonexistent/dir/a.folded"),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot create /nonexistent/dir/a.folded"),
            "{err}"
        );
    }

    /// Checks that `svg` is well-formed XML with an `<svg>` root; returns all text content.
    fn check_xml(svg: &str) -> String {
        use quick_xml::events::Event;
        let mut reader = quick_xml::Reader::from_str(svg);
        reader.config_mut().check_end_names = true;
        let mut depth = 0usize;
        let mut root: Option<String> = None;
        let mut roots = 0;
        let mut text = String::new();
        loop {
            match reader
                .read_event()
                .unwrap_or_else(|e| panic!("bad XML at {}: {e}", reader.buffer_position()))
            {
                Event::Start(e) => {
                    if depth == 0 {
                        roots += 1;
                        root = Some(String::from_utf8_lossy(e.local_name().as_ref()).into());
                    }
                    depth += 1;
                }
                Event::Empty(e) if depth == 0 => {
                    roots += 1;
                    root = Some(String::from_utf8_lossy(e.local_name().as_ref()).into());
                }
                Event::End(_) => depth -= 1,
                Event::Text(t) => {
                    text.push_str(&t.decode().unwrap());
                    text.push('\n');
                }
                Event::GeneralRef(r) => {
                    // Entity references (&lt; …) between text pieces.
                    let name = r.decode().unwrap();
                    text.push_str(match &*name {
                        "lt" => "<",
                        "gt" => ">",
                        "amp" => "&",
                        "quot" => "\"",
                        "apos" => "'",
                        _ => "?",
                    });
                }
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0, "unclosed elements");
        assert_eq!(roots, 1, "one root element");
        assert_eq!(root.as_deref(), Some("svg"));
        text
    }

    #[test]
    fn profile_flame_svg() {
        let profile = two_stack_profile();
        let mut sym = Symbolizer::new(&profile.maps);
        let dir = tempfile::tempdir().unwrap();
        for (value, title) in [
            (FlameValue::AllocBytes, "mtlab: allocated bytes"),
            (FlameValue::InuseObjects, "mtlab: in-use objects"),
        ] {
            let path = dir.path().join("flame.svg");
            write_flamegraph_svg(&profile, &mut sym, value, &path).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.contains("<svg"), "no <svg root");
            let text = check_xml(&svg);
            assert!(text.contains(title), "title {title} missing");
            assert!(svg.contains("mtlab_test_root_beta"));
            assert!(svg.contains("mtlab_test_leaf_alpha"));
            if value == FlameValue::AllocBytes {
                // Tooltips carry the counts.
                assert!(svg.contains("1,525 bytes"), "total missing");
                assert!(svg.contains("1,025 bytes"), "leaf count missing");
            }
            // Interactive: the zoom/search script is embedded.
            assert!(svg.contains("<script"));
        }
        // Deterministic colors: the same input renders the same SVG.
        let lines = folded(&profile, &mut sym, FlameValue::AllocBytes);
        assert_eq!(
            flamegraph_svg(&lines, FlameValue::AllocBytes).unwrap(),
            flamegraph_svg(&lines, FlameValue::AllocBytes).unwrap()
        );
    }
}
