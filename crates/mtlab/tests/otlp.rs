//! OTLP exports checked against a real OpenTelemetry Collector (built by
//! `.ci/otelcol/build.sh`, started per test on a free port): what the
//! Collector received and wrote back out equals mtlab's own report — totals,
//! per-stack values, attributes — for a full and a sampled trace, pushed by
//! `report`, by a running `record --sample --push-every`, and a study run as
//! metrics, over OTLP/HTTP and OTLP/gRPC alike; and a Collector that is down
//! gives `report` a clear error and a running `record` a counted failure
//! that does not hold the program up.

mod util;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use util::collector::{free_port, Collector};
use util::*;

/// An OTLP/JSON integer: pdata writes 64-bit ones as strings.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_i64().unwrap(),
        Value::Null => 0,
        _ => panic!("not an integer: {v}"),
    }
}

/// An attribute's value as text (string, or integer as decimal).
fn any(v: &Value) -> String {
    any_in(v, &[])
}

/// `any`, where a string may be an index into `strings` (the Collector
/// moves a profile's strings into its dictionary).
fn any_in(v: &Value, strings: &[&str]) -> String {
    if let Some(s) = v["stringValue"].as_str() {
        s.to_string()
    } else if !v["stringValueStrindex"].is_null() {
        strings[int(&v["stringValueStrindex"]) as usize].to_string()
    } else if !v["intValue"].is_null() {
        int(&v["intValue"]).to_string()
    } else if let Some(a) = v["arrayValue"]["values"].as_array() {
        a.iter().map(|x| any_in(x, strings)).collect::<Vec<_>>().join(" ")
    } else {
        v.to_string()
    }
}

/// A received profiles request, resolved through its dictionary.
#[derive(Debug, PartialEq)]
struct Received {
    resource: BTreeMap<String, String>,
    /// (sample type, leaf function) → summed value.
    values: BTreeMap<(String, String), i64>,
    /// (sample type, leaf function) → the attributes of its samples.
    attrs: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// The whole stack (outermost first) of each leaf function.
    stacks: BTreeMap<String, Vec<String>>,
    period: i64,
}

fn resolve(req: &Value) -> Received {
    let d = &req["dictionary"];
    let strings: Vec<&str> = d["stringTable"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let s = |i: &Value| strings[int(i) as usize].to_string();
    let table = |name: &str| d[name].as_array().cloned().unwrap_or_default();
    let (functions, locations, stacks, attributes) = (table("functionTable"), table("locationTable"), table("stackTable"), table("attributeTable"));
    let rp = &req["resourceProfiles"].as_array().unwrap()[0];
    let key = |a: &Value| a["key"].as_str().map(str::to_string).unwrap_or_else(|| s(&a["keyStrindex"]));
    let resource = rp["resource"]["attributes"].as_array().unwrap().iter().map(|a| (key(a), any_in(&a["value"], &strings))).collect();
    let mut out = Received { resource, values: BTreeMap::new(), attrs: BTreeMap::new(), stacks: BTreeMap::new(), period: 0 };
    for p in rp["scopeProfiles"][0]["profiles"].as_array().unwrap() {
        let kind = s(&p["sampleType"]["typeStrindex"]);
        out.period = int(&p["period"]);
        for sample in p["samples"].as_array().cloned().unwrap_or_default() {
            let stack = &stacks[int(&sample["stackIndex"]) as usize];
            // Each location's outermost line is its function (inlined ones come first).
            let names: Vec<String> = stack["locationIndices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let loc = &locations[int(l) as usize];
                    let line = loc["lines"].as_array().unwrap().last().unwrap();
                    s(&functions[int(&line["functionIndex"]) as usize]["nameStrindex"])
                })
                .collect();
            let leaf = names[0].clone();
            *out.values.entry((kind.clone(), leaf.clone())).or_default() += int(&sample["values"][0]);
            let a = out.attrs.entry((kind.clone(), leaf.clone())).or_default();
            for i in sample["attributeIndices"].as_array().cloned().unwrap_or_default() {
                let kv = &attributes[int(&i) as usize];
                a.insert(s(&kv["keyStrindex"]), any_in(&kv["value"], &strings));
            }
            out.stacks.insert(leaf, names.into_iter().rev().collect());
        }
    }
    out
}

fn mtlab(lab: &Lab, args: &[&str]) -> std::process::Output {
    lab.command(MTLAB).args(args).output().unwrap()
}

/// The exact (full trace) figures of s_estimator.c, per site: (allocated
/// objects, allocated bytes, in-use objects, in-use bytes).
const SITES: [(&str, [i64; 4]); 3] = [
    ("site_a", [20_000, 20_000_000, 0, 0]),
    ("site_b", [2000, 20_000_000, 500, 5_000_000]),
    ("site_c", [100, 10_000_000, 50, 5_000_000]),
];
const TYPES: [&str; 4] = ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"];

/// s_estimator recorded as `full.mtl` and, sampled, as `s.mtl`; a Collector.
fn estimator_traces() -> (Lab, Option<Collector>) {
    let lab = Lab::new();
    let prog = lab.compile("s_estimator");
    lab.record_ok("full.mtl", &prog, &[]);
    let o = lab.record_cmd("s.mtl", &["--sample", "64KiB", "--sample-seed", "11"], &prog, &[]).output().unwrap();
    assert_success(&o, "mtlab record --sample");
    (lab, Collector::start())
}

#[test]
fn the_collector_receives_the_full_and_the_sampled_profile_as_the_report_has_them() {
    let (lab, Some(col)) = estimator_traces() else { return };

    // Full trace: exact figures, pushed as protobuf, and written as both files.
    let o = mtlab(&lab, &["report", "full.mtl", "--otlp-endpoint", &col.endpoint(), "--otlp", "full.otlp", "--otlp-json", "full.otlp.json", "--service", "estimator-test"]);
    assert_success(&o, "report --otlp-endpoint");
    assert!(stderr(&o).contains(&format!("pushed the profile to {}/v1development/profiles", col.endpoint())), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("site_b"), "the report is still shown");
    let got = col.received("profiles", 1);
    assert_eq!(got.len(), 1);
    let r = resolve(&got[0]);
    let report = lab.report("full.mtl");
    let p = &processes(&report)[0];
    for (name, want) in SITES {
        for (kind, v) in TYPES.iter().zip(want) {
            assert_eq!(r.values.get(&(kind.to_string(), name.to_string())).copied().unwrap_or(0), v, "{kind} of {name}");
        }
        // mtlab's own report says the same per stack.
        let s = site(p, name);
        assert_eq!((s.calls as i64, s.bytes as i64, s.live_objects as i64, s.live_bytes as i64), (want[0], want[1], want[2], want[3]), "the JSON report's {name}");
        assert_eq!(r.stacks[name][r.stacks[name].len() - 2..], ["main".to_string(), name.to_string()], "{:?}", r.stacks[name]);
    }
    let total = |kind: &str| r.values.iter().filter(|((k, f), _)| k == kind && f.starts_with("site_")).map(|(_, v)| v).sum::<i64>();
    assert_eq!(total("alloc_space"), 50_000_000);
    assert_eq!(total("inuse_space"), 10_000_000);
    assert_eq!(r.period, 0, "every allocation recorded");
    // Resource and sample attributes.
    assert_eq!(r.resource["service.name"], "estimator-test");
    assert_eq!(r.resource["process.pid"], p["pid"].to_string());
    assert_eq!(r.resource["process.executable.name"], "s_estimator");
    assert!(r.resource["process.command_args"].ends_with("s_estimator"), "{:?}", r.resource);
    assert_eq!(r.resource["host.name"], std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim());
    let allocator = p["allocator"].as_str().unwrap();
    assert!(!allocator.is_empty());
    assert_eq!(r.attrs[&("alloc_space".to_string(), "site_b".to_string())].get("allocator").map(String::as_str), Some(allocator));
    // The file written is what was pushed; its JSON twin decodes to the same (the Collector reads it below).
    assert!(std::fs::metadata(lab.path("full.otlp")).unwrap().len() > 100);

    // Sampled trace, pushed as OTLP/JSON (the exporters' variable): the
    // estimates and their 95 % intervals as the JSON report has them.
    let o = lab
        .command(MTLAB)
        .args(["report", "s.mtl", "--otlp-endpoint", &col.endpoint()])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab,team=heap%20people")
        .output()
        .unwrap();
    assert_success(&o, "report --otlp-endpoint (sampled, http/json)");
    let got = col.received("profiles", 2);
    let r = resolve(&got[1]);
    assert_eq!(r.period, 65536);
    assert_eq!(r.resource["service.name"], "s_estimator", "the program's name by default");
    assert_eq!(r.resource["team"], "heap people");
    assert_eq!(r.resource["deployment.environment"], "lab");
    let report = lab.report("s.mtl");
    let top = processes(&report)[0]["profile"]["top"].as_array().unwrap().clone();
    for (site, _) in SITES {
        let sites: Vec<&Value> = top.iter().filter(|s| s["frames"][0]["function"] == site).collect();
        assert_eq!(sites.len(), 1, "{site}: one stack");
        let est = sites[0];
        let key = ("alloc_space".to_string(), site.to_string());
        assert!((r.values[&key] as f64 - f(&est["alloc_bytes"]["value"])).abs() <= 1.0, "{site}: {} vs {}", r.values[&key], est["alloc_bytes"]);
        let a = &r.attrs[&key];
        for (end, json) in [("low", "low"), ("high", "high")] {
            let got: f64 = a[&format!("alloc_space_{end}")].parse().unwrap();
            assert!((got - f(&est["alloc_bytes"][json])).abs() <= 1.0, "{site} alloc_space_{end}: {got} vs {}", est["alloc_bytes"]);
        }
    }
}

/// (sample type, thread.id, leaf function) → summed value, of a received
/// request; and → the attributes of that thread's sample.
type ByThread<T> = BTreeMap<(String, u32, String), T>;

fn by_thread(req: &Value) -> (ByThread<i64>, ByThread<BTreeMap<String, String>>) {
    let d = &req["dictionary"];
    let strings: Vec<&str> = d["stringTable"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let s = |i: &Value| strings[int(i) as usize].to_string();
    let table = |name: &str| d[name].as_array().cloned().unwrap_or_default();
    let (functions, locations, stacks, attributes) = (table("functionTable"), table("locationTable"), table("stackTable"), table("attributeTable"));
    let (mut out, mut attrs) = (BTreeMap::new(), BTreeMap::new());
    for p in req["resourceProfiles"][0]["scopeProfiles"][0]["profiles"].as_array().unwrap() {
        let kind = s(&p["sampleType"]["typeStrindex"]);
        for sample in p["samples"].as_array().cloned().unwrap_or_default() {
            let kvs: Vec<&Value> = sample["attributeIndices"].as_array().map(|a| a.iter().map(|i| &attributes[int(i) as usize]).collect()).unwrap_or_default();
            let tids: Vec<u32> = kvs.iter().filter(|kv| s(&kv["keyStrindex"]) == "thread.id").map(|kv| int(&kv["value"]["intValue"]) as u32).collect();
            assert_eq!(tids.len(), 1, "one thread.id per sample: {sample}");
            let stack = &stacks[int(&sample["stackIndex"]) as usize];
            let leaf = &locations[int(&stack["locationIndices"][0]) as usize];
            let f = s(&functions[int(&leaf["lines"].as_array().unwrap().last().unwrap()["functionIndex"]) as usize]["nameStrindex"]);
            *out.entry((kind.clone(), tids[0], f.clone())).or_default() += int(&sample["values"][0]);
            attrs.insert((kind.clone(), tids[0], f), kvs.iter().map(|kv| (s(&kv["keyStrindex"]), any_in(&kv["value"], &strings))).collect());
        }
    }
    (out, attrs)
}

/// The "thread K TID" lines thread_shares.c prints: K → TID.
fn printed_threads(o: &std::process::Output) -> BTreeMap<i64, u32> {
    let printed: BTreeMap<i64, u32> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && w[0] == "thread").then(|| (w[1].parse().unwrap(), w[2].parse().unwrap()))
        })
        .collect();
    assert_eq!(printed.len(), 3, "{}", String::from_utf8_lossy(&o.stdout));
    printed
}

/// A full trace's samples are split by the allocating thread: the Collector
/// receives each thread's values, equal to `report --threads`' per-thread
/// figures and to what thread_shares.c does in each thread, under the thread
/// ids the program printed itself.
#[test]
fn the_collector_receives_each_threads_share_of_a_full_profile() {
    let lab = Lab::new();
    let prog = lab.compile("thread_shares");
    let o = lab.record_cmd("t.mtl", &[], &prog, &[]).output().unwrap();
    assert_success(&o, "record thread_shares");
    // "thread K TID" from the program: its own gettid().
    let printed = printed_threads(&o);
    let Some(col) = Collector::start() else { return };
    let o = mtlab(&lab, &["report", "t.mtl", "--otlp-endpoint", &col.endpoint()]);
    assert_success(&o, "report --otlp-endpoint");
    let (got, _) = by_thread(&col.received("profiles", 1)[0]);
    let o = mtlab(&lab, &["report", "t.mtl", "--json", "--threads"]);
    assert_success(&o, "report --json --threads");
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let threads = report["threads"].as_array().unwrap();
    // The workers and the main thread (pthread_create's own allocation).
    assert_eq!(threads.len(), 4, "{threads:?}");
    let sum = |kind: &str, tid: u32| got.iter().filter(|((k, t, _), _)| k == kind && *t == tid).map(|(_, v)| v).sum::<i64>();
    for th in threads {
        let tid = th["tid"].as_u64().unwrap() as u32;
        for (kind, key) in [("alloc_objects", "calls"), ("alloc_space", "bytes"), ("inuse_objects", "live_objects"), ("inuse_space", "live_bytes")] {
            assert_eq!(sum(kind, tid), th[key].as_i64().unwrap(), "{kind} of thread {tid}");
        }
    }
    for (k, tid) in printed {
        let at = |kind: &str| got.get(&(kind.to_string(), tid, "worker".to_string())).copied().unwrap_or(0);
        assert_eq!([at("alloc_objects"), at("alloc_space"), at("inuse_objects"), at("inuse_space")], [k * 1000, k * k * 64_000, k * 10, k * k * 640], "thread {k} ({tid})");
    }
    let total = |key: &str| threads.iter().map(|t| t[key].as_i64().unwrap()).sum::<i64>();
    assert_eq!((total("live_objects"), total("live_bytes")), (report["end"]["live_objects"].as_i64().unwrap(), report["end"]["live_bytes"].as_i64().unwrap()));
}

/// A sampled trace's estimates split by thread: `report --threads` gives
/// each thread's estimates with their intervals, and the Collector receives
/// each thread's part of a stack under its thread.id with that part's own
/// interval. thread_shares.c's blocks, made 256 KiB and more, are all
/// sampled at 4 KiB (p = 1 - exp(-64) rounds to 1), each weighing exactly
/// its size, so every estimate is the program's figure.
#[test]
fn the_collector_receives_each_threads_estimate_of_a_sampled_profile() {
    const MIB: i64 = 1 << 20;
    let lab = Lab::new();
    let prog = lab.compile("thread_shares");
    // thread k: k*4 blocks of k*256 KiB, k of them kept.
    let o = lab.record_cmd("s.mtl", &["--sample", "4KiB", "--sample-seed", "3"], &prog, &["4", "262144", "1"]).output().unwrap();
    assert_success(&o, "record --sample thread_shares 4 262144 1");
    let printed = printed_threads(&o);
    // thread k: k*4 objects of k*256 KiB; k of them live at the end.
    let want = |k: i64| [k * 4, k * k * MIB, k, k * k * MIB / 4];
    let o = mtlab(&lab, &["report", "s.mtl", "--json", "--threads"]);
    assert_success(&o, "report --json --threads (sampled)");
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let threads = processes(&report)[0]["profile"]["threads"].as_array().unwrap_or_else(|| panic!("no profile.threads: {report}")).clone();
    for (&k, &tid) in &printed {
        let th = threads.iter().find(|t| t["tid"] == tid).unwrap_or_else(|| panic!("thread {tid} not in {threads:?}"));
        assert_eq!(th["samples"], k * 4, "every block of thread {k} sampled");
        for (key, v) in ["alloc_objects", "alloc_bytes", "inuse_objects", "inuse_bytes"].iter().zip(want(k)) {
            let e = &th[key];
            assert_eq!(f(&e["value"]), v as f64, "{key} of thread {k}");
            assert!(f(&e["low"]) <= v as f64 && v as f64 <= f(&e["high"]), "{key} of thread {k}: {e}");
        }
    }
    // Without --threads the JSON has no split.
    assert!(processes(&lab.report("s.mtl"))[0]["profile"]["threads"].is_null());
    let o = mtlab(&lab, &["report", "s.mtl", "--threads"]);
    assert_success(&o, "report --threads (sampled)");
    assert!(String::from_utf8_lossy(&o.stdout).contains("by allocating thread, estimated"), "{}", String::from_utf8_lossy(&o.stdout));

    let Some(col) = Collector::start() else { return };
    let o = mtlab(&lab, &["report", "s.mtl", "--otlp-endpoint", &col.endpoint()]);
    assert_success(&o, "report --otlp-endpoint (sampled, threads)");
    let (got, attrs) = by_thread(&col.received("profiles", 1)[0]);
    for (&k, &tid) in &printed {
        for (kind, v) in TYPES.iter().zip(want(k)) {
            let key = (kind.to_string(), tid, "worker".to_string());
            assert_eq!(got.get(&key).copied(), Some(v), "{kind} of thread {k} ({tid})");
            let a = &attrs[&key];
            let (low, high): (i64, i64) = (a[&format!("{kind}_low")].parse().unwrap(), a[&format!("{kind}_high")].parse().unwrap());
            assert!(low <= v && v <= high, "{kind} of thread {k}: [{low}, {high}]");
        }
    }
    // The threads' parts of worker's stack add up to the stack's estimate in the JSON report.
    let top = processes(&lab.report("s.mtl"))[0]["profile"]["top"].as_array().unwrap().clone();
    let worker = top.iter().find(|s| s["frames"][0]["function"] == "worker").unwrap();
    let parts: i64 = got.iter().filter(|((k, _, f), _)| k == "alloc_space" && f == "worker").map(|(_, v)| v).sum();
    assert_eq!(parts as f64, f(&worker["alloc_bytes"]["value"]));
    assert_eq!(parts, 14 * MIB);
}

#[test]
fn a_collector_that_is_down_fails_report_clearly_after_showing_it() {
    let lab = Lab::new();
    let prog = lab.compile("s_estimator");
    lab.record_ok("t.mtl", &prog, &[]);
    let port = free_port();
    let o = mtlab(&lab, &["report", "t.mtl", "--otlp-endpoint", &format!("http://127.0.0.1:{port}")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("cannot push the profile to http://127.0.0.1:{port}/v1development/profiles")), "{err}");
    assert!(err.contains("3 tries") && err.contains("listening there"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("site_b"), "the report was shown before the push");
    // The same over gRPC (the exporters' variables): tried 3 times, then said.
    let o = lab
        .command(MTLAB)
        .args(["report", "t.mtl", "--otlp-endpoint"])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("cannot push the profile to http://127.0.0.1:{port}: ")) && err.contains("3 tries") && err.contains("gRPC port 4317"), "{err}");
    // An HTTP URL given for gRPC is refused before any work, with what to do.
    let o = mtlab(&lab, &["report", "t.mtl", "--otlp-protocol", "grpc", "--otlp-endpoint", &format!("http://127.0.0.1:{port}/v1development/profiles")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("a gRPC endpoint has no path") && o.stdout.is_empty(), "{}", stderr(&o));
}

/// The same traces pushed over OTLP/gRPC and OTLP/HTTP: the Collector
/// receives the same exact figures, stacks and attributes, whether gRPC is
/// asked for by the flag or by the exporters' variables.
#[test]
fn the_collector_receives_the_same_profile_over_grpc_as_over_http() {
    let (lab, Some(col)) = estimator_traces() else { return };
    let mut n = 0;
    for trace in ["full.mtl", "s.mtl"] {
        let o = mtlab(&lab, &["report", trace, "--otlp-endpoint", &col.endpoint(), "--service", "x"]);
        assert_success(&o, "report --otlp-endpoint (HTTP)");
        let o = mtlab(&lab, &["report", trace, "--otlp-endpoint", &col.grpc_endpoint(), "--otlp-protocol", "grpc", "--service", "x"]);
        assert_success(&o, "report --otlp-protocol grpc");
        assert!(stderr(&o).contains(&format!("pushed the profile to {}", col.grpc_endpoint())), "{}", stderr(&o));
        let o = lab
            .command(MTLAB)
            .args(["report", trace, "--otlp-endpoint", "--service", "x"])
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", col.grpc_endpoint())
            .output()
            .unwrap();
        assert_success(&o, "report with OTEL_EXPORTER_OTLP_PROTOCOL=grpc");
        n += 3;
        let got = col.received("profiles", n);
        let (http, grpc, by_env) = (resolve(&got[n - 3]), resolve(&got[n - 2]), resolve(&got[n - 1]));
        assert_eq!(grpc, http, "{trace}: gRPC and HTTP");
        assert_eq!(by_env, http, "{trace}: gRPC by the variables and HTTP");
        if trace == "full.mtl" {
            for (name, want) in SITES {
                for (kind, v) in TYPES.iter().zip(want) {
                    assert_eq!(grpc.values.get(&(kind.to_string(), name.to_string())).copied().unwrap_or(0), v, "{kind} of {name} over gRPC");
                }
            }
        } else {
            assert_eq!(grpc.period, 65536);
            assert!(grpc.attrs[&("alloc_space".to_string(), "site_b".to_string())].contains_key("alloc_space_low"));
        }
    }
}

/// `record FLAGS -o OUT -- s_hold 1000 4096`, told to stop after 3.5 s:
/// its output, and how long the end took from the stop.
fn hold_for_3_5_s(lab: &Lab, prog: &std::path::Path, out: &str, flags: &[&str]) -> (std::process::Output, Duration) {
    let mut child = lab.record_cmd(out, flags, prog, &["1000", "4096"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    let started = Instant::now();
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let o = child.wait_with_output().unwrap();
    (o, started.elapsed())
}

/// `record --sample --push-every 1s` on a program that runs about 3.5 s:
/// several windows reach the Collector while it runs, their allocations add
/// up to the whole run's, and the program's output and exit are its own.
#[test]
fn a_running_record_pushes_each_window_and_a_down_collector_is_counted() {
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    let Some(col) = Collector::start() else { return };
    let run = |endpoint: &str, trace: &str, protocol: &str| {
        hold_for_3_5_s(&lab, &prog, trace, &["--sample", "64KiB", "--sample-seed", "5", "--push-every", "1s", "--otlp-endpoint", endpoint, "--otlp-protocol", protocol])
    };
    let mut received = 0;
    for (endpoint, protocol, trace) in [(col.endpoint(), "http/protobuf", "s.mtl"), (col.grpc_endpoint(), "grpc", "g.mtl")] {
        let (o, _) = run(&endpoint, trace, protocol);
        assert!(String::from_utf8_lossy(&o.stdout).contains("held"), "the program's own output");
        received += windows_reach_the_collector(&lab, &col, o, trace, received);
    }

    // Nothing listening: every window dropped and counted, the program untouched.
    for protocol in ["http/protobuf", "grpc"] {
        let (o, took) = run(&format!("http://127.0.0.1:{}", free_port()), "d.mtl", protocol);
        assert_success(&o, "record --push-every to a closed port");
        assert!(String::from_utf8_lossy(&o.stdout).contains("held"));
        let err = stderr(&o);
        assert!(err.contains("pushed 0 window profiles") && err.contains("failed and were dropped"), "{protocol}: {err}");
        assert!(took < Duration::from_secs(10), "{protocol}: the end was not held up by the pushes: {took:?}");
    }
}

/// `record --sample --push-every` ended as `o` after writing `trace`: its
/// windows (the Collector's requests after the first `before`) reached the
/// Collector and add up to the run's profile; how many there were.
fn windows_reach_the_collector(lab: &Lab, col: &Collector, o: std::process::Output, trace: &str, before: usize) -> usize {
    assert_success(&o, "record --push-every");
    let err = stderr(&o);
    let pushed: u64 = err.split("pushed ").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{err}"));
    // About three windows in 3.5 s and the last; a loaded machine may make fewer.
    assert!(pushed >= 2, "a window while it ran and the last: {err}");
    assert!(!err.contains("dropped"), "{err}");
    let got = col.received("profiles", before + pushed as usize);
    let windows: Vec<Received> = got[before..].iter().map(resolve).collect();
    let alloc: i64 = windows.iter().flat_map(|w| w.values.iter().filter(|((k, _), _)| k == "alloc_space").map(|(_, v)| v)).sum();
    let report = lab.report(trace);
    let prof = &processes(&report)[0]["profile"];
    let whole = f(&prof["alloc_bytes"]["value"]);
    // Each window's stacks are rounded on their own: at most 1 B per stack and window.
    let stacks: usize = windows.iter().map(|w| w.values.len()).sum();
    assert!((alloc as f64 - whole).abs() <= stacks as f64, "windows sum to {alloc}, the report says {whole}");
    let last = windows.last().unwrap();
    let inuse: i64 = last.values.iter().filter(|((k, _), _)| k == "inuse_space").map(|(_, v)| v).sum();
    assert!((inuse as f64 - f(&prof["inuse_bytes"]["value"])).abs() <= last.values.len() as f64, "the last window's in-use is the end's: {inuse} vs {}", prof["inuse_bytes"]);
    assert_eq!(last.resource["process.executable.name"], "s_hold");
    pushed as usize
}

/// `record --pid PID --sample --push-every 1s` (over gRPC): while attached to
/// a running s_hold, each window reaches the Collector; they add up to the
/// attached trace's profile; the process runs on and ends as it would.
#[test]
fn an_attached_recording_pushes_each_window() {
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    let Some(col) = Collector::start() else { return };
    let mut target = lab.command(&prog).args(["1000", "4096"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = std::io::BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("held") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "s_hold ended early");
    }
    let pid = target.id().to_string();
    let o = mtlab(
        &lab,
        &["record", "--pid", &pid, "-o", "a.mtl", "--sample", "64KiB", "--sample-seed", "5", "--duration", "3.5", "--push-every", "1s", "--otlp-protocol", "grpc", "--otlp-endpoint", &col.grpc_endpoint()],
    );
    assert!(stderr(&o).contains(&format!("detached from process {pid}")), "{}", stderr(&o));
    windows_reach_the_collector(&lab, &col, o, "a.mtl", 0);
    // The process runs on, and ends as it would have.
    target.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let status = target.wait().unwrap();
    assert!(status.success(), "{status}");

    // --full has no sampled windows to push: refused with what to do.
    let o = mtlab(&lab, &["record", "--pid", &pid, "--full", "--push-every", "1s"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("leave out --full"), "{}", stderr(&o));
}

/// `record --live --push-every`: each window's exact profile (the live
/// analysis's) reaches the Collector while the program runs; the windows'
/// allocations add up to the run's, the last window's in-use is the end's;
/// a Collector that is down costs the program nothing and is counted.
#[test]
fn a_live_recording_pushes_each_window_of_the_full_trace() {
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    let Some(col) = Collector::start() else { return };
    let run = |endpoint: &str, profile: &str| hold_for_3_5_s(&lab, &prog, profile, &["--live", "--push-every", "1s", "--otlp-endpoint", endpoint]);
    let (o, _) = run(&col.endpoint(), "t.live");
    assert_success(&o, "record --live --push-every");
    assert!(String::from_utf8_lossy(&o.stdout).contains("held"), "the program's own output");
    let err = stderr(&o);
    let pushed: u64 = err.split("pushed ").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{err}"));
    assert!(pushed >= 2, "a window while it ran and the last: {err}");
    assert!(!err.contains("dropped"), "{err}");
    // A window in which no event reached the trace (the program's buffers
    // are written when full, 64 KiB a thread) is pushed empty, and the
    // Collector writes no empty request: the ones it wrote, once it has.
    std::thread::sleep(Duration::from_millis(500));
    let windows: Vec<Received> = col.received("profiles", 1).iter().map(resolve).collect();
    assert!(windows.len() as u64 <= pushed);
    let sum = |w: &Received, kind: &str| w.values.iter().filter(|((k, _), _)| k == kind).map(|(_, v)| v).sum::<i64>();
    let report = lab.report("t.live");
    let p = &processes(&report)[0];
    // Exact figures: the windows' allocations are the run's allocation calls, to the one.
    let calls: i64 = windows.iter().map(|w| sum(w, "alloc_objects")).sum();
    assert_eq!(calls, p["temporary"]["of_calls"].as_i64().unwrap(), "windows sum to the run's allocations");
    let last = windows.last().unwrap();
    assert_eq!(sum(last, "inuse_space"), p["end"]["live_bytes"].as_i64().unwrap(), "the last window's in-use is the end's");
    assert_eq!(last.period, 0, "a full trace");
    assert_eq!(last.resource["process.executable.name"], "s_hold");

    let (o, took) = run(&format!("http://127.0.0.1:{}", free_port()), "d.live");
    assert_success(&o, "record --live --push-every to a closed port");
    assert!(String::from_utf8_lossy(&o.stdout).contains("held"));
    let err = stderr(&o);
    assert!(err.contains("pushed 0 window profiles") && err.contains("failed and were dropped"), "{err}");
    assert!(took < Duration::from_secs(10), "the end was not held up by the pushes: {took:?}");
}

/// A study run pushed by the study (HTTP) and by `runs export` (HTTP and
/// gRPC): every repetition arrives as the store has it.
#[test]
fn a_study_run_reaches_the_collector_as_metrics() {
    let lab = Lab::new();
    let Some(col) = Collector::start() else { return };
    let store = lab.store();
    let store = store.to_str().unwrap();
    let o = mtlab(&lab, &["bench", "program", "--reps", "2", "--no-heaptrack", "-q", "--store", store, "--otlp-endpoint", &col.endpoint(), "--", "true"]);
    assert_success(&o, "bench program --otlp-endpoint");
    assert!(stderr(&o).contains("pushed the run's metrics"), "{}", stderr(&o));
    let id: i64 = stderr(&o).split("stored as run ").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    let o = mtlab(&lab, &["runs", "export", &id.to_string(), "--store", store, "--otlp-endpoint", &col.endpoint(), "--json"]);
    assert_success(&o, "runs export --otlp-endpoint");
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    // And over gRPC.
    let o = mtlab(&lab, &["runs", "export", &id.to_string(), "--store", store, "--otlp-endpoint", &col.grpc_endpoint(), "--otlp-protocol", "grpc"]);
    assert_success(&o, "runs export --otlp-protocol grpc");
    assert!(stderr(&o).contains(&format!("pushed the run's metrics to {}", col.grpc_endpoint())), "{}", stderr(&o));
    let got = col.received("metrics", 3);
    for req in &got {
        let rm = &req["resourceMetrics"][0];
        let res: BTreeMap<String, String> = rm["resource"]["attributes"].as_array().unwrap().iter().map(|a| (a["key"].as_str().unwrap().to_string(), any(&a["value"]))).collect();
        assert_eq!(res["service.name"], "mtlab");
        assert_eq!(res["host.name"], run["run"]["environment"]["host"].as_str().unwrap_or_else(|| run["environment"]["host"].as_str().unwrap()));
        // Every repetition of every measurement, as the stored run has it.
        let measurements = run["run"]["measurements"].as_array().or(run["measurements"].as_array()).unwrap();
        let mut want = 0;
        for m in measurements {
            let name = format!("mtlab.bench-program.{}", m["metric"].as_str().unwrap());
            let metric = rm["scopeMetrics"][0]["metrics"].as_array().unwrap().iter().find(|x| x["name"] == name.as_str()).unwrap_or_else(|| panic!("{name} not received"));
            let points: Vec<&Value> = metric["gauge"]["dataPoints"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["attributes"].as_array().unwrap().iter().any(|a| a["key"] == "configuration" && any(&a["value"]) == m["configuration"].as_str().unwrap()))
                .collect();
            let values: Vec<f64> = points.iter().map(|p| p["asDouble"].as_f64().unwrap()).collect();
            let stored: Vec<f64> = m["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert_eq!(values, stored, "{name} of {}", m["configuration"]);
            want += stored.len();
        }
        assert!(want >= 2, "two repetitions at least");
    }
}
