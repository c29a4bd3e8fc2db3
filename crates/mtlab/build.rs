//! Builds the native parts with the system C compiler and hands their paths
//! to the crate, which embeds them (see src/native.rs). No cc crate: the
//! flags are few and the outputs are a shared library and executables.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `libs` go after the sources: with --as-needed a library named before the
/// objects that use it is dropped.
fn cc(out: &Path, sources: &[PathBuf], extra: &[&str], libs: &[&str]) {
    let compiler = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let version = env::var("CARGO_PKG_VERSION").unwrap();
    let mut cmd = Command::new(&compiler);
    cmd.args(["-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-pthread"])
        .arg(format!("-DMTLAB_VERSION=\"{version}\""))
        .args(extra)
        .arg("-o")
        .arg(out)
        .args(sources)
        .args(libs);
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    assert!(status.success(), "C compiler failed building {}", out.display());
}

fn c_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    v.sort();
    v
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let native = manifest.join("../../native").canonicalize().expect("native/ beside crates/");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", native.display());
    println!("cargo:rerun-if-env-changed=CC");

    let preload = out.join("libmtlab_preload.so");
    cc(
        &preload,
        &c_files(&native.join("preload")),
        // -fexceptions: a C++ operator new that throws unwinds through its
        // shim, whose cleanup records the failed call (shims.c).
        &["-fPIC", "-shared", "-fvisibility=hidden", "-ftls-model=initial-exec", "-fexceptions"],
        &["-ldl", "-lm"],
    );
    // The same library for `record --pid`, dlopen'ed into a running process:
    // its thread-local block must be dynamic TLS (static TLS has no room
    // left after start-up), and it starts only when told (native/preload/attach.c).
    let attach = out.join("libmtlab_attach.so");
    cc(
        &attach,
        &c_files(&native.join("preload")),
        &["-fPIC", "-shared", "-fvisibility=hidden", "-ftls-model=global-dynamic", "-fexceptions", "-DMTLAB_ATTACH"],
        &["-ldl", "-lm"],
    );
    let malloc_test = out.join("mtlab-malloc-test");
    cc(&malloc_test, &[native.join("bench/malloc_test.c")], &[], &[]);
    let latency_pipeline = out.join("mtlab-latency-pipeline");
    cc(&latency_pipeline, &[native.join("bench/latency_pipeline.c")], &[], &[]);
    let service = out.join("mtlab-service");
    cc(&service, &[native.join("bench/service.c")], &[], &[]);
    let heap_workloads = out.join("mtlab-heap-workloads");
    cc(&heap_workloads, &[native.join("heap/workloads.c")], &[], &["-lm"]);
    let heap_replay = out.join("mtlab-heap-replay");
    cc(&heap_replay, &[native.join("heap/replay.c")], &[], &[]);

    for name in ["create", "ctx", "chat"] {
        let exe = out.join(format!("mtlab-threads-{name}"));
        cc(&exe, &[native.join(format!("threads/{name}.c"))], &[], &[]);
        println!("cargo:rustc-env=MTLAB_THREADS_{}={}", name.to_uppercase(), exe.display());
    }

    println!("cargo:rustc-env=MTLAB_PRELOAD_SO={}", preload.display());
    println!("cargo:rustc-env=MTLAB_ATTACH_SO={}", attach.display());
    println!("cargo:rustc-env=MTLAB_MALLOC_TEST={}", malloc_test.display());
    println!("cargo:rustc-env=MTLAB_LATENCY_PIPELINE={}", latency_pipeline.display());
    println!("cargo:rustc-env=MTLAB_SERVICE={}", service.display());
    println!("cargo:rustc-env=MTLAB_HEAP_WORKLOADS={}", heap_workloads.display());
    println!("cargo:rustc-env=MTLAB_HEAP_REPLAY={}", heap_replay.display());
}
