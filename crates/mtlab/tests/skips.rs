//! A test part skipped on this machine is seen by a person who runs a plain
//! `cargo test`: the harness captures a passing test's `eprintln!`, so
//! `util::skip` writes past it.

mod util;

use std::process::Command;

#[test]
fn a_skip_is_seen_past_the_harness_capture() {
    if std::env::var_os("MTLAB_SKIP_PROBE").is_some() {
        // The run below: a skip as any test makes one.
        return util::skip("probe: nothing is missing, this test checks how a skip is shown");
    }
    // This test binary again, run as `cargo test` runs it (output captured), with this test alone.
    let o = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_skip_is_seen_past_the_harness_capture", "--test-threads=1"])
        .env("MTLAB_SKIP_PROBE", "1")
        .env_remove("CI")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("SKIPPED probe: nothing is missing"), "the skip shows in a plain run's output: {out}");
    assert!(out.contains("1 passed"), "{out}");
}
