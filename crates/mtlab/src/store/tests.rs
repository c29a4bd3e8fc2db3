use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Barrier};

use super::*;
use crate::study::Environment;

fn run(study: &str, title: &str, started: &str) -> Run {
    let mut settings = BTreeMap::new();
    settings.insert("repetitions".to_string(), "5".to_string());
    settings.insert("workload".to_string(), "--threads 4 «größe»".to_string());
    let mut environment = Environment { host: "lab-1".to_string(), cpus_online: 8, ..Environment::default() };
    environment.software.insert("jemalloc".to_string(), "5.3.0".to_string());
    Run {
        id: None,
        study: study.to_string(),
        title: title.to_string(),
        started: started.to_string(),
        duration_s: 12.345_678_901_234_5,
        mtlab_version: "0.1.0".to_string(),
        command_line: vec!["mtlab".to_string(), "bench".to_string(), "ü 空".to_string()],
        environment,
        settings,
        configurations: vec![
            Configuration::new("glibc").param("allocator", "glibc"),
            Configuration::new("jemalloc").param("allocator", "jemalloc").baseline("glibc"),
            Configuration::new("mímalloc 🚀").param("allocator", "mimalloc").param("threads", 4).baseline("glibc"),
        ],
        measurements: vec![
            Measurement {
                configuration: "glibc".to_string(),
                metric: "cycles_per_op".to_string(),
                unit: "cycles".to_string(),
                lower_is_better: true,
                values: vec![0.1, 1.0 / 3.0, 1e300, 5e-324, -0.0, 123_456_789.123_456_79],
            },
            Measurement {
                configuration: "jemalloc".to_string(),
                metric: "ops_per_s".to_string(),
                unit: "ops/s".to_string(),
                lower_is_better: false,
                values: vec![],
            },
            Measurement {
                configuration: "mímalloc 🚀".to_string(),
                metric: "wall_s".to_string(),
                unit: "s".to_string(),
                lower_is_better: true,
                values: vec![2.5, 2.25, f64::MAX, f64::MIN_POSITIVE],
            },
        ],
        details: serde_json::Value::Null,
        notes: vec!["turbo boost was on".to_string(), "naïve note".to_string()],
    }
}

fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested/dir/runs.sqlite");
    Store::create_default_dir(&path).expect("the default store's directory");
    (dir, path)
}

#[test]
fn store_is_private_and_needs_its_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("missing/runs.sqlite");
    let err = Store::open(&path).expect_err("a missing directory");
    assert!(err.to_string().contains("does not exist; create it first"), "{err}");
    assert!(!dir.path().join("missing").exists(), "no directory made");
    Store::create_default_dir(&path).expect("create");
    assert_eq!(std::fs::metadata(dir.path().join("missing")).unwrap().permissions().mode() & 0o777, 0o700);
    drop(Store::open(&path).expect("open"));
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "a new store is 0600");
}

#[test]
fn store_round_trip_keeps_every_field() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    let plain = run("bench-malloc", "malloc under 4 threads", "2026-11-23T21:30:00Z");
    let mut detailed = run("bench-tracer", "tracer overhead ✓", "2026-11-23T21:31:00Z");
    detailed.details = serde_json::json!({
        "coverage": [{"k": 1, "share": 0.5}, {"k": 2, "share": 0.75}],
        "label": "Ünïcödé",
        "nested": {"empty": [], "none": null, "yes": true}
    });
    detailed.configurations.truncate(1);
    detailed.measurements.truncate(1);

    for original in [plain, detailed] {
        let id = store.insert(&original).expect("insert");
        let back = store.get(id).expect("get");
        assert_eq!(back.id, Some(id));
        let mut expected = original.clone();
        expected.id = Some(id);
        assert_eq!(back, expected);
        // Bit for bit, not only ==: -0.0 == 0.0 would hide a sign loss.
        for (a, b) in back.measurements.iter().zip(&original.measurements) {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.values), bits(&b.values));
        }
    }
}

#[test]
fn store_keeps_non_finite_values() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    let mut r = run("bench-malloc", "t", "2026-11-23T21:30:00Z");
    r.measurements[0].values = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5];
    let id = store.insert(&r).expect("insert");
    let values = &store.get(id).expect("get").measurements[0].values;
    assert!(values[0].is_nan());
    assert_eq!(values[1..], [f64::INFINITY, f64::NEG_INFINITY, 1.5]);
    // The column stays valid JSON for ad-hoc queries.
    let n: i64 = store
        .conn
        .query_row("SELECT json_array_length(\"values\") FROM measurements WHERE run_id = ?1 AND position = 0", [id], |r| {
            r.get(0)
        })
        .expect("json");
    assert_eq!(n, 4);
}

#[test]
fn store_lists_newest_first_and_filters() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    let a = store.insert(&run("bench-malloc", "a", "2026-01-01T00:00:00Z")).expect("a");
    let b = store.insert(&run("bench-tracer", "b", "2026-03-01T00:00:00Z")).expect("b");
    let c = store.insert(&run("bench-malloc", "c", "2026-02-01T00:00:00Z")).expect("c");
    // Same start as c: the later id is listed first.
    let d = store.insert(&run("bench-malloc", "d", "2026-02-01T00:00:00Z")).expect("d");

    let all = store.list(&RunFilter::default()).expect("list");
    assert_eq!(all.iter().map(|s| s.id).collect::<Vec<_>>(), [b, d, c, a]);
    let first = &all[0];
    assert_eq!(
        (first.study.as_str(), first.title.as_str(), first.started.as_str()),
        ("bench-tracer", "b", "2026-03-01T00:00:00Z")
    );
    assert_eq!((first.configurations, first.measurements, first.host.as_str()), (3, 3, "lab-1"));
    assert_eq!(first.duration_s, 12.345_678_901_234_5);

    let malloc = RunFilter { study: Some("bench-malloc".to_string()), limit: None };
    assert_eq!(store.list(&malloc).expect("filter").iter().map(|s| s.id).collect::<Vec<_>>(), [d, c, a]);
    let two = RunFilter { study: Some("bench-malloc".to_string()), limit: Some(2) };
    assert_eq!(store.list(&two).expect("limit").iter().map(|s| s.id).collect::<Vec<_>>(), [d, c]);
    let one = RunFilter { study: None, limit: Some(1) };
    assert_eq!(store.list(&one).expect("limit").iter().map(|s| s.id).collect::<Vec<_>>(), [b]);
    let huge = RunFilter { study: None, limit: Some(usize::MAX) };
    assert_eq!(store.list(&huge).expect("huge limit").len(), 4);
    let none = RunFilter { study: Some("no-such-study".to_string()), limit: None };
    assert!(store.list(&none).expect("none").is_empty());
}

#[test]
fn store_missing_id_says_how_to_list() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    let err = store.get(42).expect_err("no run 42");
    assert!(matches!(err, StoreError::NoSuchRun { id: 42, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("mtlab runs") && msg.contains(&path.display().to_string()), "{msg}");

    let id = store.insert(&run("s", "t", "2026-01-01T00:00:00Z")).expect("insert");
    store.delete(id).expect("delete");
    assert!(matches!(store.get(id), Err(StoreError::NoSuchRun { .. })));
    assert!(matches!(store.delete(id), Err(StoreError::NoSuchRun { .. })));
    // The rows of a deleted run go with it, and its id is not reused.
    let orphans: i64 = store
        .conn
        .query_row("SELECT (SELECT count(*) FROM configurations) + (SELECT count(*) FROM measurements)", [], |r| r.get(0))
        .expect("count");
    assert_eq!(orphans, 0);
    assert!(store.insert(&run("s", "t", "2026-01-01T00:00:00Z")).expect("insert") > id);
}

#[test]
fn store_refuses_a_newer_schema() {
    let (_dir, path) = temp_store();
    let mut store = Store::open(&path).expect("open");
    store.insert(&run("s", "t", "2026-01-01T00:00:00Z")).expect("insert");
    store.conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("set version");
    drop(store);

    let err = Store::open(&path).expect_err("newer schema");
    assert!(matches!(err, StoreError::TooNew { found, .. } if found == SCHEMA_VERSION + 1), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("upgrade mtlab") && msg.contains("--store") && msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn store_refuses_a_file_that_is_not_sqlite() {
    let (dir, _) = temp_store();
    // Longer and shorter than SQLite's 100-byte header.
    for (name, text) in [("notes.txt", "these are my notes, not a database\n".repeat(100)), ("short.txt", "hello\n".into())] {
        let path = dir.path().join(name);
        std::fs::write(&path, &text).expect("write");
        let err = Store::open(&path).expect_err("not sqlite");
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), text, "the file must be left alone");
    }
}

#[test]
fn store_refuses_another_programs_database() {
    let (dir, _) = temp_store();
    let path = dir.path().join("other.sqlite");
    let other = Connection::open(&path).expect("create");
    other.execute_batch("CREATE TABLE contacts (name TEXT)").expect("table");
    drop(other);
    let err = Store::open(&path).expect_err("foreign database");
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[test]
fn store_reopens_a_version_1_store_and_keeps_its_rows() {
    let (_dir, path) = temp_store();
    let original = run("bench-malloc", "kept", "2026-01-01T00:00:00Z");
    let id = {
        let mut store = Store::open(&path).expect("create");
        store.insert(&original).expect("insert")
    };
    let store = Store::open(&path).expect("reopen");
    let version = schema::user_version(&store.conn).expect("version");
    assert_eq!(version, 1);
    assert_eq!(store.get(id).expect("get").title, "kept");
    assert_eq!(store.list(&RunFilter::default()).expect("list").len(), 1);
    let mode: String = store.conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).expect("mode");
    assert_eq!(mode, "wal");
}

#[test]
fn store_survives_concurrent_writers() {
    const THREADS: usize = 4;
    const RUNS_EACH: usize = 25;
    let (_dir, path) = temp_store();
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (path, start) = (path.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                // All open the fresh file at once: schema creation races too.
                start.wait();
                let mut store = Store::open(&path).expect("open");
                (0..RUNS_EACH)
                    .map(|i| {
                        let r = run(&format!("study-{t}"), &format!("{t}/{i}"), "2026-01-01T00:00:00Z");
                        store.insert(&r).expect("insert")
                    })
                    .collect::<Vec<i64>>()
            })
        })
        .collect();
    let ids: Vec<i64> = threads.into_iter().flat_map(|h| h.join().expect("thread")).collect();

    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), THREADS * RUNS_EACH);
    let store = Store::open(&path).expect("open");
    let listed = store.list(&RunFilter::default()).expect("list");
    assert_eq!(listed.len(), THREADS * RUNS_EACH);
    assert_eq!(listed.iter().map(|s| s.id).collect::<HashSet<_>>(), distinct);
    for id in &ids {
        let r = store.get(*id).expect("readable");
        assert_eq!((r.configurations.len(), r.measurements.len()), (3, 3));
    }
    let check: String = store.conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("check");
    assert_eq!(check, "ok");
}

#[test]
fn store_default_path_follows_the_environment() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
    };
    assert_eq!(default_path_from(env(&[("MTLAB_STORE", "/tmp/x.sqlite"), ("HOME", "/home/u")])), Path::new("/tmp/x.sqlite"));
    assert_eq!(default_path_from(env(&[("XDG_DATA_HOME", "/data"), ("HOME", "/home/u")])), Path::new("/data/mtlab/runs.sqlite"));
    assert_eq!(
        default_path_from(env(&[("MTLAB_STORE", ""), ("XDG_DATA_HOME", "rel"), ("HOME", "/home/u")])),
        Path::new("/home/u/.local/share/mtlab/runs.sqlite")
    );
    assert_eq!(default_path_from(env(&[])), Path::new("mtlab-runs.sqlite"));
}

#[test]
fn store_values_encoding_is_valid_json() {
    let values = [0.1, -2.5e-10, 1e22, 3.0, f64::MAX];
    let text = values_to_json(&values);
    let parsed: Vec<f64> = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(parsed.len(), values.len());
    assert_eq!(values_from_json(&text).expect("parse"), values);
    assert_eq!(values_to_json(&[]), "[]");
    assert!(values_from_json("[]").expect("empty").is_empty());
    assert!(values_from_json("{}").is_err());
    assert!(values_from_json("[1, x]").is_err());
}
