//! The HTML reports (`mtlab report --html`, a study's `--html`) loaded in
//! headless Chromium, as a person opens them from disk: no console message,
//! the page's script ran, every table and plot is there, and a screenshot
//! (kept in target/tmp/html-screenshots/) is not blank. Then driven as a
//! person uses it (tests/browser/cdp.js, the DevTools protocol): read the
//! summary, zoom and search the flame graph, sort a table, hover a plot.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::*;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
    })
}

/// Loads `page` in headless Chromium: (the DOM after its scripts ran, the
/// console lines it logged). Also writes a screenshot to `png`.
fn load(chromium: &Path, page: &Path, png: &Path) -> (String, Vec<String>) {
    let url = format!("file://{}", page.display());
    let common = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2000"];
    let o = Command::new(chromium).args(common).args(["--enable-logging=stderr", "--v=0", "--dump-dom"]).arg(&url).output().unwrap();
    assert!(o.status.success(), "chromium --dump-dom {url}: {}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let console = String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect();
    let o = Command::new(chromium).args(common).arg(format!("--screenshot={}", png.display())).arg(&url).output().unwrap();
    assert!(o.status.success() && png.exists(), "chromium --screenshot {url}: {}", String::from_utf8_lossy(&o.stderr));
    (dom, console)
}

/// A screenshot of an empty page of the same size: what "blank" weighs.
fn blank_png(lab: &Lab, chromium: &Path) -> u64 {
    let page = lab.path("blank.html");
    std::fs::write(&page, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let png = lab.path("blank.png");
    load(chromium, &page, &png);
    std::fs::metadata(&png).unwrap().len()
}

/// Keeps a screenshot where a person can look at it after the run:
/// target/tmp/html-screenshots/.
fn keep(png: &Path) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(png, dir.join(png.file_name().unwrap())).unwrap();
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

#[test]
fn the_report_and_the_demo_tour_open_in_chromium_without_errors() {
    let Some(chromium) = chromium() else {
        return skip("chromium is not installed (Debian: apt-get install chromium)");
    };
    let lab = Lab::new();
    let blank = blank_png(&lab, &chromium);

    // A trace: 2 threads of the built-in malloc-test.
    let wl = lab.command(MTLAB).args(["workload", "--path", "malloc-test"]).output().unwrap();
    let wl = String::from_utf8_lossy(&wl.stdout).trim().to_string();
    lab.record_ok("t.mtl", &wl, &["--threads", "2", "--iterations", "20000"]);
    let page = lab.path("report.html");
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--html", page.to_str().unwrap()]).output().unwrap();
    assert_success(&o, "mtlab report --html");
    let png = lab.path("report.png");
    let (dom, console) = load(&chromium, &page, &png);
    assert!(console.is_empty(), "the report logs nothing to the console: {console:?}");
    assert!(dom.contains("data-ready=\"1\""), "the page's script ran to its end");
    for title in ["per function", "top allocation sites by bytes", "top allocation sites by calls"] {
        assert!(dom.contains(&format!("<h3>{title}")), "table {title:?} in the page");
    }
    assert!(count(&dom, "<table class=\"sortable\"") >= 5, "the report's tables");
    assert!(dom.contains("id=\"plot-memory-"), "the memory-over-time plot");
    assert!(dom.contains("<figure class=\"flame\""), "the flame graph");
    assert!(dom.contains("<section id=\"summary\">"), "the summary");
    let size = std::fs::metadata(&png).unwrap().len();
    assert!(size > 4 * blank, "the screenshot ({size} bytes) is not blank ({blank} bytes for an empty page)");
    keep(&png);

    // `mtlab demo`, the README's main command: the whole tour within its
    // 3 minutes, its runs stored, its page complete.
    let started = std::time::Instant::now();
    let o = lab.command(MTLAB).args(["demo", "--store", "runs.sqlite", "--html", "demo.html"]).output().unwrap();
    let took = started.elapsed();
    assert_success(&o, "mtlab demo");
    assert!(took.as_secs() < 180, "the tour took {took:?}; the README promises under 3 minutes on 2 cores");
    let err = stderr(&o);
    for step in 1..=6 {
        assert!(err.contains(&format!("mtlab demo {step}/6: ")), "progress line of step {step}: {err}");
    }
    let runs = lab.command(MTLAB).args(["runs", "--store", "runs.sqlite", "--json"]).output().unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let studies: Vec<&str> = runs.as_array().unwrap().iter().filter_map(|r| r["study"].as_str()).collect();
    assert_eq!(studies.len(), 4, "bench malloc, threads, heap compare and affinity stored: {studies:?}");
    let page = lab.path("demo.html");
    let png = lab.path("demo.png");
    let (dom, console) = load(&chromium, &page, &png);
    assert!(console.is_empty(), "the tour's page logs nothing to the console: {console:?}");
    assert!(dom.contains("data-ready=\"1\""));
    for section in ["1. The heap tracer", "2. The sampling heap profiler", "3. What the sampling profiler costs", "4. Threads", "5. Heap managers compared", "6. Affinity"] {
        let heading = dom.split("<h2 id=\"").skip(1).any(|h| h.split_once("\">").is_some_and(|(_, rest)| rest.starts_with(section)));
        assert!(heading, "section {section:?} in the tour's page");
    }
    assert!(dom.contains("machine:"), "the environment the numbers were taken in");
    assert!(count(&dom, "<figure class=\"plot") >= 6, "the studies' plots and the memory plots");
    assert!(dom.contains("<nav id=\"contents\">") && dom.contains("<section id=\"summary\">"), "the summary and contents");
    // The flame graph ends section 1 (the full trace's process), before section 2.
    let flame = dom.find("<figure class=\"flame\"").expect("the flame graph");
    let one = dom.find(">1. The heap tracer: malloc-test, 2 threads, whole stacks</h2>").expect("section 1's heading");
    let two = dom.find(">2. The sampling heap profiler on the same workload</h2>").expect("section 2's heading");
    assert!(one < flame && flame < two, "the flame graph sits in section 1");
    assert!(!dom.contains("▁") && !dom.contains("█"), "no character sparkline on the page");
    // The threads study's bars say their values on hover (a title per bar, over the drawing).
    let bars = dom.find("<figure class=\"plot bars\"").expect("a bar plot in the tour's page");
    let figure = &dom[bars..bars + dom[bars..].find("</figure>").unwrap()];
    assert!(figure.contains("<g class=\"bar-hover\"><rect ") && figure.contains("</title></rect>"), "hover values on the bars: {}", &figure[..figure.len().min(400)]);
    let size = std::fs::metadata(&png).unwrap().len();
    assert!(size > 4 * blank, "the screenshot ({size} bytes) is not blank ({blank} bytes)");
    keep(&png);
}

fn node() -> Option<PathBuf> {
    ["node", "nodejs"].iter().find_map(|name| std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file()))
}

/// Runs `steps` on `page` in Chromium through tests/browser/cdp.js (the
/// DevTools protocol over a pipe): each step's result, and what the page
/// logged or threw.
fn drive(node: &Path, chromium: &Path, page: &Path, steps: serde_json::Value) -> (Vec<serde_json::Value>, Vec<String>) {
    use std::io::Write;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/cdp.js");
    let mut child = Command::new(node)
        .arg(&script)
        .arg(chromium)
        .arg(format!("file://{}", page.display()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(steps.to_string().as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "cdp.js: {}", String::from_utf8_lossy(&o.stderr));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut said: Vec<String> = out["console"].as_array().unwrap().iter().map(|v| v.as_str().unwrap_or("").to_string()).collect();
    said.extend(out["exceptions"].as_array().unwrap().iter().map(|v| format!("exception: {v}")));
    (out["results"].as_array().unwrap().clone(), said)
}

/// Marks the first flame graph frame named `name` with id `id` (its nodes
/// have no ids of their own), so that a step can click it.
fn mark_frame(name: &str, id: &str) -> serde_json::Value {
    serde_json::json!({"eval": format!(
        "(function(){{var e=Array.prototype.find.call(document.querySelectorAll('.fg-node'),function(e){{return e.textContent==={name:?}}});if(!e)return false;e.id={id:?};return true}})()"
    )})
}

fn text(v: &serde_json::Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("a string, not {v}"))
}

#[test]
fn a_person_reads_the_summary_zooms_searches_and_sorts_the_report_in_chromium() {
    let Some(chromium) = chromium() else {
        return skip("chromium is not installed (Debian: apt-get install chromium)");
    };
    let Some(node) = node() else {
        return skip("node is not installed (Debian: apt-get install nodejs): it drives Chromium");
    };
    let lab = Lab::new();
    // malloc-test: 2 threads × 20000 iterations, 512-byte blocks, call depth 10.
    let wl = lab.command(MTLAB).args(["workload", "--path", "malloc-test"]).output().unwrap();
    let wl = String::from_utf8_lossy(&wl.stdout).trim().to_string();
    lab.record_ok("t.mtl", &wl, &["--threads", "2", "--size", "512", "--depth", "10", "--iterations", "20000"]);
    let page = lab.path("report.html");
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--html", page.to_str().unwrap()]).output().unwrap();
    assert_success(&o, "mtlab report --html");
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let leaked = json["leaks"]["bytes"].as_u64().unwrap();
    let functions = json["functions"].as_object().unwrap();
    let (most_called, most_calls) = functions.iter().map(|(n, f)| (n.clone(), f["calls"].as_u64().unwrap())).max_by_key(|(_, c)| *c).unwrap();
    let fewest_calls = functions.values().map(|f| f["calls"].as_u64().unwrap()).filter(|&c| c > 0).min().unwrap();

    let png = lab.path("interactions.png");
    let steps = serde_json::json!([
        {"eval": "document.body.getAttribute('data-ready')"},
        {"eval": "document.querySelector('#summary').innerText"},
        {"eval": "document.querySelector('.fg-status').textContent"},
        mark_frame("worker", "worker-frame"),
        {"click": "#worker-frame"},
        {"eval": "document.querySelector('.fg-status').textContent"},
        {"eval": "[document.querySelectorAll('.fg-node.anc').length, Array.prototype.find.call(document.querySelectorAll('.fg-node'),function(e){return e.textContent==='worker'}).style.width]"},
        {"type": [".fg-search", "descend"]},
        {"eval": "[document.querySelector('.fg-status').textContent, document.querySelectorAll('.fg-node.match').length]"},
        {"hover": ".fg-node.match"},
        {"eval": "document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent"},
        {"click": ".fg-reset"},
        {"select": [".fg-value", "2"]},
        {"eval": "document.querySelector('.fg-status').textContent"},
        {"eval": "document.querySelectorAll('.fg-node.anc').length"},
        {"click": "table.sortable th:nth-child(2)"},
        {"eval": "Array.prototype.map.call(document.querySelector('table.sortable').tBodies[0].rows,function(r){return [r.cells[0].textContent, +r.cells[1].getAttribute('data-v')]})"},
        {"click": "table.sortable th:nth-child(2)"},
        {"eval": "Array.prototype.map.call(document.querySelector('table.sortable').tBodies[0].rows,function(r){return [r.cells[0].textContent, +r.cells[1].getAttribute('data-v')]})"},
        {"hover": "figure.plot div.hover svg", "at": [0.5, 0.5]},
        {"eval": "document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent"},
        {"screenshot": png.to_str().unwrap()}
    ]);
    let (r, said) = drive(&node, &chromium, &page, steps);
    assert!(said.is_empty(), "the page logs and throws nothing: {said:?}");
    assert_eq!(text(&r[0]), "1", "the page's script ran to its end");

    // The summary: what a person asks first, the same figures as --json.
    let summary = text(&r[1]);
    let leaked_text = human(leaked);
    for want in ["peak live", "mapped at that peak", &format!("leaked (live at the end)\n{leaked_text} in"), "slowest function", "top site by bytes\ndescend (malloc_test.c", "how it ended\nexit code 0", "no warnings"] {
        assert!(summary.contains(want), "summary shows {want:?}: {summary}");
    }

    // The flame graph: all of the allocated bytes, then zoomed into `worker`.
    let status = text(&r[2]);
    assert!(status.starts_with("allocated bytes: ") && status.ends_with(" in all"), "{status}");
    assert_eq!(r[3], true, "a frame named worker is drawn");
    let zoomed = text(&r[5]);
    assert!(zoomed.contains("; zoomed into worker ("), "a click zooms into the frame: {zoomed}");
    // all → clone3 → start_thread above it, worker across the whole width.
    let anc = &r[6];
    assert!(anc[0].as_u64().unwrap() >= 2, "worker's callers stay drawn above it: {anc}");
    assert_eq!(anc[1], "100%", "the zoomed frame fills the width");

    // Search: every descend frame is marked, and they hold nearly all bytes
    // (worker's other call is a block each 10th iteration, also inside descend).
    let found = &r[8];
    let (searched, marked) = (text(&found[0]), found[1].as_u64().unwrap());
    assert!(marked >= 10, "descend is 10 frames deep at least: {marked} marked; {searched}");
    let pct: f64 = searched.rsplit_once(" (").and_then(|(_, p)| p.strip_suffix(" % of all)")).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{searched}"));
    assert!(pct > 95.0, "descend allocates almost everything: {searched}");
    let tip = text(&r[10]);
    assert!(tip.starts_with("descend\nallocated bytes: ") && tip.contains("allocated objects: ") && tip.contains(" calls"), "hover tells bytes and calls: {tip:?}");

    // In-use bytes at the end, whole graph again: what the leak table counts.
    let inuse = text(&r[13]);
    assert!(inuse.starts_with(&format!("in-use bytes: {leaked_text} in all;")), "in-use bytes at the end are the leaked bytes of --json: {inuse}");
    assert_eq!(r[14], 0, "\"whole graph\" leaves the zoom");

    // Sorting the per-function table by calls, ascending then descending.
    let rows = |v: &serde_json::Value| -> Vec<(String, u64)> { v.as_array().unwrap().iter().map(|r| (text(&r[0]).to_string(), r[1].as_f64().unwrap() as u64)).collect() };
    let up = rows(&r[16]);
    assert_eq!(up.first().map(|r| r.1), Some(fewest_calls), "{up:?}");
    assert!(up.windows(2).all(|w| w[0].1 <= w[1].1), "ascending: {up:?}");
    let down = rows(&r[18]);
    assert_eq!(down.first(), Some(&(most_called.clone(), most_calls)), "{down:?}");
    assert!(down.windows(2).all(|w| w[0].1 >= w[1].1), "descending: {down:?}");

    // The memory plot tells its values under the pointer.
    let tip = text(&r[20]);
    assert!(tip.contains("live: ") && tip.contains("mapped: ") && tip.contains(" MiB"), "hover over the memory plot: {tip:?}");
    keep(&png);
}

