//! The HTML reports (`mtlab report --html`, a study's `--html`) loaded in
//! headless Chromium, as a person opens them from disk: no console message,
//! the page's script ran, every table and plot is there, and a screenshot
//! (kept in target/tmp/html-screenshots/) is not blank.

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
    assert!(dom.contains("allocated bytes</figcaption><img"), "the flame graph");
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
        assert!(dom.contains(&format!("<h2>{section}")), "section {section:?} in the tour's page");
    }
    assert!(dom.contains("machine:"), "the environment the numbers were taken in");
    assert!(count(&dom, "<figure class=\"plot\"") >= 6, "the studies' plots and the memory plots");
    assert!(dom.contains("allocated bytes</figcaption><img"), "the flame graph");
    let size = std::fs::metadata(&png).unwrap().len();
    assert!(size > 4 * blank, "the screenshot ({size} bytes) is not blank ({blank} bytes)");
    keep(&png);
}
