//! End-to-end tests of mtlab's DWARF unwinder (`--unwind dwarf`, the
//! default): its stacks against libgcc's on real programs built without frame
//! pointers, and the exact frames it finds through the awkward places (code
//! without frame pointers, shared libraries, signal handlers, dlopen/dlclose,
//! C++ exceptions, thread start routines, anonymous executable memory).

mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mtlab::symbolize::{parse_all_maps, Mapping};
use mtlab::trace::decode::TraceFile;
use mtlab::trace::event::{EventKind, Item};
use util::*;

/// A frame as addr2line takes it: the module's file and the offset in it.
type Frame = (String, u64);

/// The stacks of the allocations (sampled ones in a sampled trace) of one
/// process's trace, in order, each with the allocation's size (to check that
/// two runs line up).
fn allocation_stacks(trace: &Path) -> Vec<(u64, Vec<Frame>)> {
    let tf = TraceFile::open(trace).unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let maps: Vec<Mapping> = parse_all_maps(&tf.maps);
    let frame = |pc: u64| -> Frame {
        match maps.iter().rev().find(|m| m.contains(pc) && m.is_file()) {
            Some(m) => (m.path.clone(), pc - m.start + m.offset),
            None => ("?".into(), pc),
        }
    };
    let mut stacks: HashMap<u32, Vec<Frame>> = HashMap::new();
    let mut out = Vec::new();
    for item in tf.items().unwrap() {
        match item {
            Item::Stack { id, pcs } => {
                stacks.insert(id, pcs.into_iter().map(frame).collect());
            }
            Item::Event(e) => {
                if let EventKind::Sample { size, .. } | EventKind::Alloc { size, .. } = e.kind {
                    out.push((size, stacks.get(&e.stack).cloned().unwrap_or_default()));
                }
            }
        }
    }
    out
}

fn show(stack: &[Frame]) -> String {
    stack.iter().map(|(m, o)| format!("{}+{o:#x}", Path::new(m).file_name().unwrap().to_string_lossy())).collect::<Vec<_>>().join(" ← ")
}

/// Records `program args` twice, once per unwinder, sampled with the same
/// seed (`interval`) or in full (None), and compares the stacks of the same
/// allocations. Returns (equal, compared).
fn compare_with_libgcc(lab: &Lab, name: &str, program: &Path, args: &[&str], interval: Option<&str>) -> (usize, usize) {
    assert!(
        Command::new("setarch").arg("--version").output().is_ok(),
        "setarch (util-linux) runs the two recordings without address-space randomization: install util-linux"
    );
    let mut runs = Vec::new();
    for unwind in ["dwarf", "libgcc"] {
        let trace = format!("{name}-{unwind}.mtl");
        let mut cmd = lab.command("setarch");
        cmd.args(["-R", MTLAB, "record", "--unwind", unwind, "--depth", "128", "-o"]).arg(lab.path(&trace));
        if let Some(interval) = interval {
            cmd.args(["--sample", interval, "--sample-seed", "7"]);
        }
        cmd
            .arg("--")
            .arg(program)
            .args(args);
        let o = cmd
            .env("PYTHONHASHSEED", "0")
            // Programs copy their environment to the heap: both runs get
            // environments of one length ("dwarf" is a letter shorter than
            // "libgcc"), so they allocate the same sizes and sample alike.
            .env("MTLAB_TEST_PAD", if unwind == "dwarf" { "x" } else { "" })
            .output()
            .unwrap();
        assert_success(&o, &format!("mtlab record --unwind {unwind} -- {}", program.display()));
        runs.push(allocation_stacks(&lab.path(&trace)));
    }
    let (ours, theirs) = (&runs[0], &runs[1]);
    assert!(ours.len() > 100, "{name}: only {} samples", ours.len());
    let pairs = line_up(ours, theirs);
    // Address-space layout is fixed (setarch -R) and the seed is the same, so
    // the runs allocate alike; a program that still varies (a hash table
    // keyed by time) may shift a few samples, which are left out.
    assert!(
        pairs.len() * 10 >= ours.len().max(theirs.len()) * 9,
        "{name}: only {} of {}/{} samples line up between the runs",
        pairs.len(),
        ours.len(),
        theirs.len()
    );
    let mut equal = 0;
    let mut shown = 0;
    for &(i, j) in &pairs {
        let (a, b) = (&ours[i].1, &theirs[j].1);
        if a == b {
            equal += 1;
        } else if shown < 10 {
            shown += 1;
            eprintln!("{name} sample {i} differs:\n  dwarf:  {}\n  libgcc: {}", show(a), show(b));
        }
    }
    eprintln!("{name}: {equal} of {} stacks equal libgcc's ({} samples, {} lined up)", pairs.len(), ours.len(), pairs.len());
    (equal, pairs.len())
}

/// Pairs of indices of the same allocation in two runs: equal sizes in the
/// same order, skipping past a few samples where the runs drift apart.
fn line_up(a: &[(u64, Vec<Frame>)], b: &[(u64, Vec<Frame>)]) -> Vec<(usize, usize)> {
    const AHEAD: usize = 64;
    const RUN: usize = 4;
    let agree = |i: usize, j: usize| (0..RUN).all(|k| match (a.get(i + k), b.get(j + k)) {
        (Some(x), Some(y)) => x.0 == y.0,
        (None, None) => true,
        _ => k > 0,
    });
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i].0 == b[j].0 {
            out.push((i, j));
            i += 1;
            j += 1;
            continue;
        }
        let resync = (1..=2 * AHEAD).flat_map(|k| (0..=k).map(move |x| (x, k - x))).find(|&(x, y)| agree(i + x, j + y));
        match resync {
            Some((x, y)) => {
                i += x;
                j += y;
            }
            None => break,
        }
    }
    out
}

/// A C file of `n` functions with loops, switches, structs and calls: work
/// for every pass of the compiler.
fn generated_c(n: usize) -> String {
    let mut s = String::from("void *memcpy(void *, const void *, unsigned long);\nstatic volatile int sink;\n");
    for i in 0..n {
        s.push_str(&format!(
            "struct s{i} {{ int a; double b; char c[16]; struct s{i} *next; }};\n\
             int f{i}(struct s{i} *p, int n) {{\n\
               int acc = {i};\n\
               for (int k = 0; k < n; k++) {{\n\
                 switch ((k + acc) % 5) {{\n\
                 case 0: acc += p->a * k; break;\n\
                 case 1: acc ^= (int)(p->b * k); break;\n\
                 case 2: memcpy(p->c, &acc, sizeof acc); acc += p->c[k % 16]; break;\n\
                 case 3: if (p->next) acc += p->next->a; break;\n\
                 default: acc = acc * 31 + k;\n\
                 }}\n\
               }}\n\
               sink = acc;\n\
               return acc{call};\n\
             }}\n",
            call = if i > 0 { format!(" + f{}((struct s{} *)p, n / 2)", i - 1, i - 1) } else { String::new() }
        ));
    }
    s
}

fn cc1() -> Option<PathBuf> {
    let o = Command::new("gcc").arg("-print-prog-name=cc1").output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    p.is_file().then_some(p)
}

#[test]
fn dwarf_stacks_equal_libgcc_on_cc1() {
    let lab = Lab::new();
    let Some(cc1) = cc1() else { return skip("gcc's cc1 is not installed") };
    std::fs::write(lab.path("unit.c"), generated_c(400)).unwrap();
    let (equal, total) = compare_with_libgcc(&lab, "cc1", &cc1, &["-quiet", "-O2", "unit.c", "-o", "/dev/null"], Some("16KiB"));
    assert!(equal * 100 >= total * 99, "cc1: {equal} of {total} stacks equal libgcc's (< 99 %)");
}

/// Every allocation of a full trace, checked inside the traced process: with
/// MTLAB_UNWIND_CHECK=1 the preload takes each stack with both unwinders and
/// counts where they differ (consecutive walks share their outer frames, which
/// the unwinder takes from the walk before: this checks that too).
fn checked_in_run(lab: &Lab, name: &str, program: &Path, args: &[&str]) -> (u64, u64) {
    let trace = format!("{name}-check.mtl");
    let o = lab.record_cmd(&trace, &["--unwind", "dwarf", "--depth", "128"], program, args).env("MTLAB_UNWIND_CHECK", "1").output().unwrap();
    assert_success(&o, &format!("mtlab record -- {}", program.display()));
    let tf = TraceFile::open(lab.path(&trace)).unwrap();
    let stat = |k: &str| -> u64 {
        tf.stats.iter().find(|(key, _)| key == k).unwrap_or_else(|| panic!("{name}: no {k} in STATS")).1.parse().unwrap()
    };
    let (checked, mismatched) = (stat("unwind_checked"), stat("unwind_mismatched"));
    eprintln!("{name}: {mismatched} of {checked} walked stacks differ from libgcc's");
    (checked, mismatched)
}

#[test]
fn every_walked_stack_of_cc1_equals_libgcc_in_the_same_run() {
    let lab = Lab::new();
    let Some(cc1) = cc1() else { return skip("gcc's cc1 is not installed") };
    std::fs::write(lab.path("unit.c"), generated_c(150)).unwrap();
    let (checked, mismatched) = checked_in_run(&lab, "cc1", &cc1, &["-quiet", "-O2", "unit.c", "-o", "/dev/null"]);
    assert!(checked > 100_000, "cc1: only {checked} stacks walked");
    assert!(mismatched * 100 <= checked, "cc1: {mismatched} of {checked} stacks differ from libgcc's (> 1 %)");
}

#[test]
fn every_walked_stack_of_python3_equals_libgcc_in_the_same_run() {
    let lab = Lab::new();
    let python = PathBuf::from("/usr/bin/python3");
    if !python.is_file() {
        return skip("/usr/bin/python3 is not installed");
    }
    std::fs::write(lab.path("work.py"), PY_WORK).unwrap();
    let (checked, mismatched) = checked_in_run(&lab, "python3", &python, &["work.py"]);
    assert!(checked > 10_000, "python3: only {checked} stacks walked");
    assert!(mismatched * 100 <= checked, "python3: {mismatched} of {checked} stacks differ from libgcc's (> 1 %)");
}

/// In code with frame pointers a repeat of the last DWARF walk is proven by
/// the frame-pointer memo's check: under MTLAB_UNWIND_CHECK those repeats are
/// compared with libgcc too, on a program whose stacks differ only in the
/// third frame from malloc (the memo must not take one for the other).
#[test]
fn repeats_proven_by_the_memo_equal_libgcc() {
    let lab = Lab::new();
    let prog = lab.compile("same_frames");
    let n = 20_000u64;
    let (checked, mismatched) = checked_in_run(&lab, "same_frames", &prog, &[&n.to_string()]);
    assert_eq!(mismatched, 0, "same_frames: {mismatched} of {checked} stacks differ from libgcc's");
    // Every one of the 2n mallocs is checked (frees carry no stack).
    assert!(checked >= 2 * n, "same_frames: only {checked} of at least {} stacks checked", 2 * n);
}

const PY_WORK: &str = "import json, re\n\
d = {str(i): [i, str(i) * 3, {'k': i}] for i in range(40000)}\n\
s = json.dumps(d)\n\
back = json.loads(s)\n\
words = re.findall(r'[0-9]+', s)\n\
print(len(back), len(words))\n";

#[test]
fn dwarf_stacks_equal_libgcc_on_python3() {
    let lab = Lab::new();
    let python = PathBuf::from("/usr/bin/python3");
    if !python.is_file() {
        return skip("/usr/bin/python3 is not installed");
    }
    std::fs::write(lab.path("work.py"), PY_WORK).unwrap();
    let (equal, total) = compare_with_libgcc(&lab, "python3", &python, &["work.py"], Some("16KiB"));
    assert!(equal * 100 >= total * 99, "python3: {equal} of {total} stacks equal libgcc's (< 99 %)");
}

// ---------------------------------------------------------------------------
// The awkward places, with exact frames (native/tests/u_places.c, u_throw.cpp).

/// Compiles `sources` (in native/tests/) into the lab as `out` with `flags`.
fn build(lab: &Lab, compiler: &str, sources: &[&str], out: &str, flags: &[&str]) -> PathBuf {
    let path = lab.path(out);
    let mut c = Command::new(compiler);
    c.args(flags).arg("-o").arg(&path);
    for s in sources {
        c.arg(repo_root().join("native/tests").join(s));
    }
    let o = c.output().unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(o.status.success(), "building {out} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    path
}

/// u_places and the plugin it loads, both without frame pointers.
fn build_places(lab: &Lab) -> (PathBuf, PathBuf) {
    let flags = ["-O2", "-g", "-fomit-frame-pointer", "-pthread"];
    let plugin = build(lab, "cc", &["u_plugin.c"], "u_plugin.so", &[&flags[..], &["-fPIC", "-shared"]].concat());
    let prog = build(lab, "cc", &["u_places.c"], "u_places", &[&flags[..], &["-ldl"]].concat());
    (prog, plugin)
}

/// Function names (innermost first) of the one site that allocated exactly
/// `bytes` bytes in one call, in the report of process `p`.
fn frames_of(p: &serde_json::Value, bytes: u64) -> Vec<String> {
    let sites = p["top_sites"]["by_calls"].as_array().unwrap();
    let site = sites
        .iter()
        .find(|s| u(&s["bytes"]) == bytes && u(&s["calls"]) == 1)
        .unwrap_or_else(|| panic!("no site of one {bytes}-byte allocation"));
    site["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().map(str::to_string).unwrap_or_else(|| format!("?{}", f["module"].as_str().unwrap_or(""))))
        .collect()
}

/// `frames` starts with `head` and, later, has `tail` in this order.
fn assert_frames(what: &str, frames: &[String], head: &[&str], tail: &[&str]) {
    assert!(frames.len() >= head.len() && frames.iter().zip(head).all(|(f, h)| f == h), "{what}: {frames:?} does not start with {head:?}");
    let mut at = head.len();
    for t in tail {
        match frames[at..].iter().position(|f| f == t) {
            Some(i) => at += i + 1,
            None => panic!("{what}: {frames:?} lacks {t:?} after position {at}"),
        }
    }
}

#[test]
fn dwarf_walks_exact_frames_through_the_awkward_places() {
    let lab = Lab::new();
    let (prog, plugin) = build_places(&lab);
    let o = lab.record_cmd("places.mtl", &["--unwind", "dwarf"], &prog, &[plugin.to_str().unwrap()]).output().unwrap();
    assert_success(&o, "mtlab record -- u_places");
    let v = lab.report("places.mtl");
    let p = &processes(&v)[0];
    // No frame pointers anywhere in the program: whole stacks all the same.
    assert_frames("no frame pointers", &frames_of(p, 1001), &["nofp_c", "nofp_b", "nofp_a", "main"], &[]);
    // A dlopen'd library, unloaded after use; then loaded again.
    let first = frames_of(p, 1002);
    let second = frames_of(p, 1003);
    assert_frames("reloaded plugin", &second, &["plugin_inner", "plugin_outer", "call_plugin", "main"], &[]);
    // The dlclose shim wrote the maps before the plugin went: named too.
    assert_eq!(first, second, "dlclose'd plugin against the copy loaded again");
    // A signal handler: through the kernel's frame to the interrupted code.
    assert_frames("signal handler", &frames_of(p, 1004), &["on_signal"], &["sig_outer", "main"]);
    // A thread's start routine, down to the thread's first frame.
    let thread = frames_of(p, 1005);
    assert_frames("thread", &thread, &["worker", "worker_start", "start_thread"], &[]);
    assert!(thread.len() <= 4, "thread: frames past the thread's start: {thread:?}");
    // Anonymous executable code: the walk stops there, nothing invented.
    assert_eq!(frames_of(p, 1006), vec!["jit_target".to_string()], "JIT-like code");
}

#[test]
fn dwarf_walks_exact_frames_around_a_cpp_exception() {
    let lab = Lab::new();
    if Command::new("g++").arg("--version").output().is_err() {
        return skip("g++ is not installed (apt-get install g++)");
    }
    let prog = build(&lab, "g++", &["u_throw.cpp"], "u_throw", &["-O2", "-g", "-fomit-frame-pointer"]);
    let o = lab.record_cmd("throw.mtl", &["--unwind", "dwarf"], &prog, &[]).output().unwrap();
    assert_success(&o, "mtlab record -- u_throw");
    let v = lab.report("throw.mtl");
    let p = &processes(&v)[0];
    // The destructor runs in thrower's cleanup code, where the unwinder
    // resumed it: the stack is thrower's, not the unwinder's.
    assert_frames("destructor during unwinding", &frames_of(p, 2001), &["Guard::~Guard()", "thrower()", "main"], &[]);
    assert_frames("after the catch", &frames_of(p, 2002), &["after_catch()", "main"], &[]);
}

#[test]
fn simulate_withholds_its_recommendation_when_stacks_are_truncated() {
    let lab = Lab::new();
    let (prog, plugin) = build_places(&lab);
    for unwind in ["fp", "dwarf"] {
        let trace = format!("{unwind}.mtl");
        let o = lab.record_cmd(&trace, &["--unwind", unwind], &prog, &[plugin.to_str().unwrap()]).output().unwrap();
        assert_success(&o, "mtlab record -- u_places");
        let v = lab.mtlab_json(&["profile", "simulate", &trace, "--intervals", "16,64"]);
        let note = v["stacks"]["note"].as_str();
        if unwind == "fp" {
            // No frame pointers in the program or libc: one-frame stacks.
            assert!(note.is_some_and(|n| n.contains("truncated")), "fp: {}", v["stacks"]);
            assert!(v["recommended_interval"].is_null(), "fp: recommended {}", v["recommended_interval"]);
            let w = lab.mtlab_json(&["profile", "simulate", &trace, "--intervals", "16,64", "--allow-truncated"]);
            assert_eq!(w["recommended_interval"], 64, "fp with --allow-truncated");
        } else {
            assert!(note.is_none(), "dwarf: {}", v["stacks"]);
            assert_eq!(v["recommended_interval"], 64, "dwarf");
        }
    }
}

/// A library loaded, used and unloaded 200 times: its range is given to
/// anonymous memory between loads, and later maps snapshots say so. Every
/// one of its 20 000 allocations is still named (the default unwinder once
/// left 99 % of them `[anon]+0x129`), with each unwinder.
#[test]
fn a_library_reloaded_many_times_keeps_its_names() {
    let lab = Lab::new();
    let flags = ["-O2", "-g", "-fomit-frame-pointer"];
    let plugin = build(&lab, "cc", &["u_plugin.c"], "u_plugin.so", &[&flags[..], &["-fPIC", "-shared"]].concat());
    let prog = build(&lab, "cc", &["u_reload.c"], "u_reload", &["-O0", "-g", "-ldl"]);
    for unwind in ["dwarf", "fp", "libgcc"] {
        let trace = format!("reload-{unwind}.mtl");
        let o = lab.record_cmd(&trace, &["--unwind", unwind], &prog, &[plugin.to_str().unwrap(), "200"]).output().unwrap();
        assert_success(&o, "mtlab record -- u_reload");
        let v = lab.report(&trace);
        let p = &processes(&v)[0];
        let named: u64 = p["top_sites"]["by_calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["frames"][0]["function"].as_str() == Some("plugin_inner"))
            .map(|s| u(&s["calls"]))
            .sum();
        assert_eq!(named, 20_000, "--unwind {unwind}: allocations named plugin_inner");
    }
}
