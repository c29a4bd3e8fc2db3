//! `mtlab topo` through the real binary, on recorded sysfs trees and on
//! this machine; and `threads ctx --place`, which pins by its classes.

mod util;

use serde_json::Value;
use util::*;

fn fixture(name: &str) -> String {
    repo_root().join("crates/mtlab/tests/fixtures/sysfs").join(name).display().to_string()
}

fn class(v: &Value, a: u64, b: u64) -> String {
    v["pairs"].as_array().unwrap().iter().find(|p| p["a"] == a && p["b"] == b).unwrap()["class"].as_str().unwrap().to_string()
}

#[test]
fn recorded_machines_get_their_classes() {
    let lab = Lab::new();
    let v = lab.mtlab_json(&["topo", "--sysfs", &fixture("2s-6c")]);
    assert_eq!(v["cpus"].as_array().unwrap().len(), 12);
    assert_eq!(v["pairs"].as_array().unwrap().len(), 66, "every pair of 12 CPUs");
    assert_eq!(class(&v, 0, 1), "llc");
    assert_eq!(class(&v, 0, 6), "remote");
    assert_eq!(v["example_pairs"]["remote"], serde_json::json!([0, 6]));
    assert!(v["example_pairs"]["smt"].is_null());
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2);
    let v = lab.mtlab_json(&["topo", "--sysfs", &fixture("1s-4c-smt")]);
    assert_eq!(class(&v, 1, 5), "smt");
    let v = lab.mtlab_json(&["topo", "--sysfs", &fixture("amd-2ccx")]);
    assert_eq!(class(&v, 3, 4), "package");
    // Sizes as everywhere else in mtlab (sysfs says "32K").
    let text = lab.command(MTLAB).args(["topo", "--sysfs", &fixture("2s-6c")]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("KiB") && !text.contains("K ("), "{text}");
    let v = lab.mtlab_json(&["topo", "--sysfs", &fixture("1cpu")]);
    assert_eq!(v["cpus"].as_array().unwrap().len(), 1);
    assert!(v["caches"].as_array().unwrap().is_empty());
}

#[test]
fn this_machine_and_bad_paths() {
    let lab = Lab::new();
    let v = lab.mtlab_json(&["topo"]);
    let allowed = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = allowed.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
    let ids: Vec<String> = v["cpus"].as_array().unwrap().iter().map(|c| c["id"].to_string()).collect();
    assert!(!ids.is_empty());
    assert!(list.starts_with(&ids[0]), "{list} vs {ids:?}");
    let text = lab.command(MTLAB).arg("topo").output().unwrap();
    assert_success(&text, "mtlab topo");
    assert!(String::from_utf8_lossy(&text.stdout).contains("placement class of each CPU pair"));
    let o = lab.command(MTLAB).args(["topo", "--sysfs", "/nonexistent"]).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cpu/ and node/"), "{}", stderr(&o));
}

#[test]
fn the_ring_is_pinned_by_placement_class() {
    let lab = Lab::new();
    let topo = lab.mtlab_json(&["topo"]);
    let run = lab.mtlab_json(&[
        "threads", "ctx", "--libc", "glibc", "--cpus", "one", "--threads", "2", "--ws", "0", "--place", "same,smt,llc", "--reps", "1", "--ms",
        "10", "--no-perf", "-q",
    ]);
    let configs = run["configurations"].as_array().unwrap();
    for class in ["same", "smt", "llc"] {
        let placed = configs.iter().find(|c| c["params"]["place"] == class);
        match &topo["example_pairs"][class] {
            Value::Null => {
                assert!(placed.is_none());
                assert!(run["notes"].to_string().contains(&format!("--place {class} skipped")), "{}", run["notes"]);
            }
            pair => {
                let c = placed.unwrap_or_else(|| panic!("no {class} configuration"));
                let want = format!("{},{}", pair[0], pair[1]);
                assert_eq!(c["params"]["pin"], want.as_str());
            }
        }
    }
    let o = lab.command(MTLAB).args(["threads", "ctx", "--place", "numa", "--no-store"]).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("numa"), "{}", stderr(&o));
}
