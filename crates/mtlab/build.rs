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
    cc_with(&compiler, out, sources, extra, libs);
}

fn cc_with(compiler: &str, out: &Path, sources: &[PathBuf], extra: &[&str], libs: &[&str]) {
    let version = env::var("CARGO_PKG_VERSION").unwrap();
    let mut cmd = Command::new(compiler);
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

/// The musl compiler wrapper: `$MTLAB_MUSL_CC`, else `musl-gcc` in PATH.
fn musl_compiler() -> Option<String> {
    if let Ok(cc) = env::var("MTLAB_MUSL_CC") {
        return Some(cc).filter(|c| !c.is_empty());
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path).map(|d| d.join("musl-gcc")).find(|p| p.is_file()).map(|p| p.display().to_string())
}

/// The preload and attach libraries built again against musl, for programs
/// whose interpreter is musl's loader. Without musl-gcc the files are empty
/// and mtlab says, for a musl program, that this build cannot trace it.
/// musl-gcc has no kernel headers of its own: the system's `linux/`, `asm/`
/// and `asm-generic/` are offered last (`-idirafter`), after musl's.
fn musl_libraries(native: &Path, out: &Path) {
    println!("cargo:rerun-if-env-changed=MTLAB_MUSL_CC");
    let preload = out.join("libmtlab_preload_musl.so");
    let attach = out.join("libmtlab_attach_musl.so");
    match musl_compiler() {
        Some(compiler) => {
            let headers = out.join("musl-kernel-headers");
            std::fs::create_dir_all(&headers).unwrap();
            let arch_asm = ["/usr/include/x86_64-linux-gnu/asm", "/usr/include/asm"]
                .into_iter()
                .find(|p| Path::new(p).join("unistd.h").is_file())
                .unwrap_or("/usr/include/asm");
            for (name, target) in [("linux", "/usr/include/linux"), ("asm", arch_asm), ("asm-generic", "/usr/include/asm-generic")] {
                let link = headers.join(name);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(target, &link).unwrap();
            }
            let inc = headers.display().to_string();
            let common = ["-fPIC", "-shared", "-fvisibility=hidden", "-fexceptions", "-DMTLAB_MUSL", "-idirafter", &inc];
            let sources = c_files(&native.join("preload"));
            cc_with(&compiler, &preload, &sources, &[&common[..], &["-ftls-model=initial-exec"]].concat(), &[]);
            cc_with(&compiler, &attach, &sources, &[&common[..], &["-ftls-model=global-dynamic", "-DMTLAB_ATTACH"]].concat(), &[]);
        }
        None => {
            println!("cargo:warning=musl-gcc not found: this mtlab cannot trace musl-linked programs (Debian: apt-get install musl-tools)");
            std::fs::write(&preload, b"").unwrap();
            std::fs::write(&attach, b"").unwrap();
        }
    }
    println!("cargo:rustc-env=MTLAB_PRELOAD_MUSL_SO={}", preload.display());
    println!("cargo:rustc-env=MTLAB_ATTACH_MUSL_SO={}", attach.display());
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
    musl_libraries(&native, &out);
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
