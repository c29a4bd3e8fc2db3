//! `mtlab report --diff BASE NEW` on two versions of native/tests/diff_sites.c:
//! exactly the sites that changed, with their exact figures; a rebuild with
//! other addresses matching; the pprof of the changes read by `go tool pprof`;
//! the CSV and HTML outputs; bad input.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use util::*;

/// Builds diff_sites.c as DIR/diff_sites (one name for every version, as a
/// rebuild keeps it) with `defines`.
fn build(lab: &Lab, dir: &str, defines: &[&str]) -> PathBuf {
    std::fs::create_dir_all(lab.path(dir)).unwrap();
    let out = lab.path(&format!("{dir}/diff_sites"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-Wall", "-o"])
        .arg(&out)
        .args(defines)
        .arg(test_source("diff_sites"))
        .output()
        .unwrap();
    assert!(o.status.success(), "compiling diff_sites.c {defines:?}: {}", String::from_utf8_lossy(&o.stderr));
    out
}

fn diff_cmd(lab: &Lab, base: &str, new: &str, extra: &[&str]) -> std::process::Output {
    lab.command(MTLAB).args(["report", "--diff", base, new]).args(extra).output().unwrap()
}

fn diff_json(lab: &Lab, base: &str, new: &str) -> Value {
    lab.mtlab_json(&["report", "--diff", base, new])
}

fn function_of(site: &Value) -> &str {
    site["frames"][0].as_str().unwrap().split(' ').next().unwrap()
}

/// The three versions recorded: v1, v2, v1 rebuilt with padding.
fn recorded(lab: &Lab) {
    for (dir, defs) in [("v1", &["-DV=1"][..]), ("v2", &["-DV=2"]), ("pad", &["-DV=1", "-DPAD"])] {
        let prog = build(lab, dir, defs);
        lab.record_ok(&format!("{dir}.mtl"), &prog, &[]);
    }
}

#[test]
fn exactly_the_changed_sites_with_their_figures() {
    let lab = Lab::new();
    recorded(&lab);
    let d = diff_json(&lab, "v1.mtl", "v2.mtl");
    assert_eq!(d["pairs"].as_array().unwrap().len(), 1);
    let p = &d["pairs"][0];
    assert_eq!((p["base"]["command"].as_str(), p["new"]["command"].as_str()), (Some("diff_sites"), Some("diff_sites")));
    // keep() from two lines of main, grow(), and extra() in v2 only.
    assert_eq!((u(&p["sites_in_both"]), u(&p["sites_unchanged"]), u(&p["sites_only_base"]), u(&p["sites_only_new"])), (3, 2, 0, 1));
    let sites = p["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2, "{sites:#?}");
    let extra_line = source_line("diff_sites", "void *more = extra(333)");
    let (first, second) = (&sites[0], &sites[1]);
    assert_eq!(function_of(first), "extra");
    assert_eq!(first["status"], "new");
    assert!(first["frames"][1].as_str().unwrap().ends_with(&format!("diff_sites.c:{extra_line})")), "{first}");
    let c = &first["change"];
    assert_eq!((c["calls"].as_i64(), c["bytes"].as_i64(), c["leaked_objects"].as_i64(), c["leaked_bytes"].as_i64()), (Some(1), Some(333), Some(1), Some(333)));
    // The leak is allocated last: live at the peak.
    assert_eq!((c["peak_live_bytes"].as_i64(), c["temporary"].as_i64()), (Some(333), Some(0)));
    assert!(first["base"].is_null());
    assert_eq!(function_of(second), "grow");
    assert_eq!(second["status"], "changed");
    let c = &second["change"];
    assert_eq!((c["calls"].as_i64(), c["bytes"].as_i64(), c["temporary"].as_i64()), (Some(3), Some(192), Some(3)));
    assert_eq!((c["leaked_bytes"].as_i64(), c["peak_live_bytes"].as_i64()), (Some(0), Some(0)));
    assert_eq!((u(&second["base"]["calls"]), u(&second["new"]["calls"])), (5, 8));
    let t = &p["totals"];
    let change = |k: &str| t[k]["change"].as_f64().unwrap_or_else(|| panic!("{k}: {t}"));
    assert_eq!(change("allocation_calls"), 4.0);
    assert_eq!(change("allocated_bytes"), 525.0);
    assert_eq!(change("leaked_bytes"), 333.0);
    assert_eq!(change("leaked_objects"), 1.0);
    assert_eq!(change("peak_live_bytes"), 333.0);
    assert_eq!(change("temporary_allocations"), 3.0);
    assert_eq!(t["leaked_bytes"]["base"].as_f64(), Some(1000.0));
    let malloc = p["functions"].as_array().unwrap().iter().find(|f| f["function"] == "malloc").unwrap();
    assert_eq!((u(&malloc["base_calls"]), u(&malloc["new_calls"])), (16, 20));
    // Every key the diff's JSON has is in docs/metrics.md.
    let docs = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    let mut keys = Vec::new();
    collect_keys(&d, &mut keys);
    for k in keys {
        let named = docs.match_indices(k.as_str()).any(|(i, _)| {
            let before = docs[..i].chars().next_back().is_none_or(|c| !c.is_alphanumeric() && c != '_');
            let after = docs[i + k.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '_');
            before && after
        });
        assert!(named, "JSON key {k} of report --diff is not in docs/metrics.md");
    }
    // The other way round: the leak is gone, the changes negative.
    let back = diff_json(&lab, "v2.mtl", "v1.mtl");
    let s = &back["pairs"][0]["sites"][0];
    assert_eq!((s["status"].as_str(), s["change"]["leaked_bytes"].as_i64()), (Some("gone"), Some(-333)));

    // The screen says the same, largest change first.
    let o = diff_cmd(&lab, "v1.mtl", "v2.mtl", &[]);
    assert_success(&o, "report --diff");
    let text = String::from_utf8_lossy(&o.stdout);
    let row = |f: &str| text.lines().find(|l| l.contains(&format!("{f} (diff_sites.c"))).unwrap_or_else(|| panic!("{f}:\n{text}")).to_string();
    assert!(row("extra").contains("+333 B") && row("grow").contains("+192 B"), "{text}");
    assert!(text.find("extra (diff_sites.c").unwrap() < text.find("grow (diff_sites.c").unwrap());
    assert!(text.contains("not interleaved"), "the cycles' caveat:\n{text}");
}

fn collect_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                collect_keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_keys(x, out)),
        _ => {}
    }
}

/// The pcs of the report's sites, for comparing two builds' addresses.
fn site_offsets(lab: &Lab, trace: &str) -> Vec<String> {
    let r = lab.report(trace);
    let p = &processes(&r)[0];
    let mut v: Vec<String> = p["top_sites"]["by_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["frames"].as_array().unwrap().iter())
        // The program's own functions (the linker puts _start first, before them).
        .filter(|f| ["keep", "grow", "extra", "main"].contains(&f["function"].as_str().unwrap_or("")))
        .map(|f| f["offset"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_rebuild_with_other_addresses_matches_every_site() {
    let lab = Lab::new();
    recorded(&lab);
    let (a, b) = (site_offsets(&lab, "v1.mtl"), site_offsets(&lab, "pad.mtl"));
    assert!(!a.is_empty());
    assert!(a.iter().all(|o| !b.contains(o)), "the padded build should move every site's code: {a:?} {b:?}");
    let d = diff_json(&lab, "v1.mtl", "pad.mtl");
    let p = &d["pairs"][0];
    assert_eq!((u(&p["sites_in_both"]), u(&p["sites_unchanged"]), u(&p["sites_only_base"]), u(&p["sites_only_new"])), (3, 3, 0, 0));
    assert!(p["sites"].as_array().unwrap().is_empty());
    assert!(d["warnings"].as_array().unwrap().is_empty(), "{}", d["warnings"]);
    // By function only, keep()'s two lines are one site.
    let o = lab.command(MTLAB).args(["report", "--diff", "v1.mtl", "pad.mtl", "--diff-by", "functions", "--json"]).output().unwrap();
    assert_success(&o, "--diff-by functions");
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(u(&d["pairs"][0]["sites_in_both"]), 2);
}

fn go() -> Option<&'static str> {
    ["/usr/local/go/bin/go", "/usr/bin/go"].into_iter().find(|g| Path::new(g).exists())
}

/// `go tool pprof -top` of `args`: (function, flat bytes) of each line.
fn pprof_top(lab: &Lab, go: &str, args: &[&str]) -> Vec<(String, i64)> {
    let o = lab.command(go).args(["tool", "pprof", "-top", "-unit=B"]).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "go tool pprof {args:?}: {}{text}", String::from_utf8_lossy(&o.stderr));
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let flat = w.first()?.strip_suffix('B')?.parse::<i64>().ok()?;
            (w.len() == 6 && flat != 0).then(|| (w[5].to_string(), flat))
        })
        .collect()
}

#[test]
fn go_tool_pprof_reads_the_changes_as_its_diff_base_does() {
    let lab = Lab::new();
    recorded(&lab);
    let o = diff_cmd(&lab, "v1.mtl", "v2.mtl", &["--pprof", "d.pb.gz"]);
    assert_success(&o, "report --diff --pprof");
    let Some(go) = go() else {
        skip("go tool pprof: no go at /usr/local/go/bin/go or /usr/bin/go");
        return;
    };
    let want = vec![("extra".to_string(), 333), ("grow".to_string(), 192)];
    assert_eq!(pprof_top(&lab, go, &["-sample_index=alloc_space", "d.pb.gz"]), want);
    assert_eq!(pprof_top(&lab, go, &["-sample_index=inuse_space", "d.pb.gz"]), want[..1]);
    // pprof's own diff of the two runs' profiles says the same.
    for v in ["v1", "v2"] {
        let o = lab.command(MTLAB).args(["report", &format!("{v}.mtl"), "--pprof", &format!("{v}.pb.gz")]).output().unwrap();
        assert_success(&o, "report --pprof");
    }
    assert_eq!(pprof_top(&lab, go, &["-sample_index=alloc_space", "-diff_base", "v1.pb.gz", "v2.pb.gz"]), want);
    // Backwards, negative.
    let o = diff_cmd(&lab, "v2.mtl", "v1.mtl", &["--pprof", "r.pb.gz"]);
    assert_success(&o, "report --diff --pprof");
    assert_eq!(pprof_top(&lab, go, &["-sample_index=alloc_space", "r.pb.gz"]), vec![("extra".to_string(), -333), ("grow".to_string(), -192)]);
}

#[test]
fn csv_and_the_page_of_differential_flame_graphs() {
    use base64::Engine;
    let lab = Lab::new();
    recorded(&lab);
    let o = diff_cmd(&lab, "v1.mtl", "v2.mtl", &["--csv", "out", "--html", "d.html"]);
    assert_success(&o, "report --diff --csv --html");
    let csv = std::fs::read_to_string(lab.path("out/diff_sites.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[0].starts_with("status,base_calls,new_calls,base_bytes,new_bytes,bytes_change"), "{csv}");
    assert!(rows[1].starts_with("new,0,1,0,333,333,1,333,333,1,0,extra (diff_sites.c:"), "{csv}");
    assert!(rows[2].starts_with("changed,5,8,320,512,192,3,0,0,0,3,grow (diff_sites.c:"), "{csv}");
    let page = std::fs::read_to_string(lab.path("d.html")).unwrap();
    assert!(!page.contains("http://") || !page.contains("src=\"http"), "self-contained");
    let svgs: Vec<String> = page
        .split("data:image/svg+xml;base64,")
        .skip(1)
        .map(|s| String::from_utf8(base64::engine::general_purpose::STANDARD.decode(&s[..s.find('"').unwrap()]).unwrap()).unwrap())
        .collect();
    assert_eq!(svgs.len(), 2, "sized by NEW and by BASE");
    // grow and extra grew: red; keep did not change: grey (inferno's
    // differential colours: rgb(255,x,x) for growth, rgb(x,x,255) for
    // shrinkage, rgb(250,250,250) for none).
    let fill_of = |svg: &str, f: &str| {
        let at = svg.find(&format!("<title>{f} (")).unwrap_or_else(|| panic!("{f} not drawn"));
        let rest = &svg[at..];
        let fill = rest.find("fill=\"").unwrap();
        rest[fill + 6..fill + 6 + rest[fill + 6..].find('"').unwrap()].to_string()
    };
    for f in ["grow", "extra"] {
        let fill = fill_of(&svgs[0], f);
        assert!(fill.starts_with("rgb(255,") && fill != "rgb(255,255,255)", "{f}: {fill}");
    }
    assert_eq!(fill_of(&svgs[0], "keep"), "rgb(250,250,250)");
    assert!(!svgs[1].contains("<title>extra ("), "sized by BASE, the new site has no width");
}

#[test]
fn bad_input_is_named() {
    let lab = Lab::new();
    let prog = build(&lab, "v1", &["-DV=1"]);
    lab.record_ok("v1.mtl", &prog, &[]);
    let fail = |args: &[&str], want: &[&str]| {
        let o = lab.command(MTLAB).args(args).output().unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        for w in want {
            assert!(err.contains(w), "{args:?}: {w:?} not in:\n{err}");
        }
    };
    fail(&["report", "--diff", "missing.mtl", "v1.mtl"], &["BASE", "missing.mtl does not exist"]);
    fail(&["report", "--diff", "v1.mtl", "missing.mtl"], &["NEW", "missing.mtl does not exist"]);
    fail(&["report", "--diff", "3", "4"], &["run id", "mtlab diff RUN_A RUN_B"]);
    std::fs::write(lab.path("junk"), b"not a trace at all").unwrap();
    fail(&["report", "--diff", "junk", "v1.mtl"], &["BASE", "not an mtlab trace"]);
    // A results store in place of a trace.
    let o = lab.command(MTLAB).args(["bench", "malloc", "--reps", "1", "--threads", "1", "--iterations", "1000"]).output().unwrap();
    if o.status.success() && lab.store().exists() {
        let store = lab.store().display().to_string();
        fail(&["report", "--diff", &store, "v1.mtl"], &["results store", "mtlab diff"]);
    } else {
        skip(&format!("a study run for the results store: {}", stderr(&o)));
    }
    fail(&["report", "--diff", "v1.mtl", "v1.mtl", "--flamegraph", "f.svg"], &["--flamegraph"]);
    fail(&["report", "v1.mtl", "--diff-by", "functions"], &["--diff"]);
    // A different program: a warning, and the figures still.
    let other = lab.compile("n_mallocs");
    lab.record_ok("other.mtl", &other, &["3", "10", "1"]);
    let o = diff_cmd(&lab, "v1.mtl", "other.mtl", &["--json"]);
    assert_success(&o, "report --diff of two programs");
    assert!(stderr(&o).contains("different programs?"), "{}", stderr(&o));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(d["warnings"][0].as_str().unwrap().contains("different programs?"));
}

#[test]
fn sampled_traces_compare_by_their_estimates() {
    // A 1-byte interval samples every allocation: the estimates are the
    // exact figures, and the changes those of the full traces.
    let lab = Lab::new();
    for (dir, v) in [("v1", "-DV=1"), ("v2", "-DV=2")] {
        let prog = build(&lab, dir, &[v]);
        let o = lab.record_cmd(&format!("{dir}.mtl"), &["--sample", "1"], &prog, &[]).output().unwrap();
        assert_success(&o, "record --sample 1");
    }
    let d = diff_json(&lab, "v1.mtl", "v2.mtl");
    let p = &d["pairs"][0];
    assert_eq!((p["base"]["estimated"].as_bool(), p["new"]["estimated"].as_bool()), (Some(true), Some(true)));
    let sites = p["sites"].as_array().unwrap();
    let got: Vec<(&str, &str, i64, i64, i64)> = sites
        .iter()
        .map(|s| {
            let c = &s["change"];
            (function_of(s), s["status"].as_str().unwrap(), c["calls"].as_i64().unwrap(), c["bytes"].as_i64().unwrap(), c["leaked_bytes"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(got, [("extra", "new", 1, 333, 333), ("grow", "changed", 3, 192, 0)]);
    // No peak and no temporaries in a profile: null, not 0.
    assert!(sites[1]["change"]["peak_live_bytes"].is_null() && sites[1]["change"]["temporary"].is_null());
    assert!(p["totals"]["peak_live_bytes"]["change"].is_null());
    assert_eq!(p["totals"]["allocated_bytes"]["change"].as_f64(), Some(525.0));
}

#[test]
fn processes_of_a_tree_pair_by_command_and_order() {
    // sh runs diff_sites twice: each child of NEW pairs with the same child of BASE.
    let lab = Lab::new();
    for (dir, v) in [("v1", "-DV=1"), ("v2", "-DV=2")] {
        build(&lab, dir, &[v]);
        let script = format!("./{dir}/diff_sites; ./{dir}/diff_sites; :");
        lab.record_ok(&format!("{dir}.mtl"), "/bin/sh", &["-c", &script]);
    }
    let d = diff_json(&lab, "v1.mtl", "v2.mtl");
    let pairs = d["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 3, "{d:#}");
    assert!(d["only_base"].as_array().unwrap().is_empty() && d["only_new"].as_array().unwrap().is_empty());
    assert_eq!(pairs[0]["base"]["command"], "sh");
    for p in &pairs[1..] {
        assert_eq!((p["base"]["command"].as_str(), p["new"]["command"].as_str()), (Some("diff_sites"), Some("diff_sites")));
        let got: Vec<(&str, i64)> = p["sites"].as_array().unwrap().iter().map(|s| (function_of(s), s["change"]["bytes"].as_i64().unwrap())).collect();
        assert_eq!(got, [("extra", 333), ("grow", 192)]);
    }
    // The pids differ, in order: the first child with the first.
    let pid = |p: &Value, side: &str| u(&p[side]["pid"]);
    assert!(pid(&pairs[1], "base") < pid(&pairs[2], "base") && pid(&pairs[1], "new") < pid(&pairs[2], "new"));

    // Every pair's changes as pprof, not only the roots': the roots' at the
    // name given, each other pair's beside it named by its pids; and every
    // pair's differential flame graphs (sized by NEW and by BASE) in the page.
    let o = diff_cmd(&lab, "v1.mtl", "v2.mtl", &["--pprof", "d.pb.gz", "--html", "d.html"]);
    assert_success(&o, "report --diff --pprof --html of a tree");
    let mut want = vec!["d.pb.gz".to_string()];
    for p in &pairs[1..] {
        want.push(format!("d.{}-{}.pb.gz", pid(p, "base"), pid(p, "new")));
    }
    let mut files = want.clone();
    files.push("d.html".into());
    files.sort();
    assert_eq!(lab.files_with_prefix("d."), files, "{}", stderr(&o));
    for name in &want {
        assert!(stderr(&o).contains(&format!("mtlab: wrote {}", lab.path(name).display())) || stderr(&o).contains(&format!("mtlab: wrote {name}")), "{}", stderr(&o));
    }
    let page = std::fs::read_to_string(lab.path("d.html")).unwrap();
    for p in &pairs[1..] {
        let title = format!("process {} → {} (diff_sites): ", pid(p, "base"), pid(p, "new"));
        for sized in ["sized by NEW", "sized by BASE"] {
            let drawn = page.match_indices(&title).any(|(i, _)| page[i..].split('<').next().is_some_and(|t| t.ends_with(sized)));
            assert!(drawn, "the flame graph of {title}…, {sized} in the page");
        }
    }
}
