//! The README's commands, pasted in order on a fresh machine: every `sh`
//! block's lines and every `$ ` line of the `console` blocks run in one
//! shell, in a new directory standing for the checkout, with a new HOME (so
//! a new results store and native cache) and the built `mtlab` on PATH.
//!
//! Stand-ins, said here because they are not what the README runs:
//! `cargo run --release --` is the built binary itself, `cargo install` is
//! the built binary put on PATH, and `cargo test --release` is not run (it is
//! the suite this test is part of). Any other `cargo` line fails the test, so
//! a new one gets a stand-in here or none.
//!
//! Each command must exit with status 0, and where the README shows its
//! output, the output's first word must be the README's (the rest holds
//! pids, times and paths that differ from run to run).

mod util;

use std::path::Path;
use std::process::Command;

use util::{repo_root, skip, MTLAB};

/// One command the README tells a user to run, with the first word of the
/// output it shows (if it shows any).
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    shown: Option<String>,
}

/// The README's commands in order, `cargo` lines turned into their
/// stand-ins (`None` for one not run).
fn steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut block: Option<&str> = None;
    // Whether the open block has had a command (output before one is quoted, not shown).
    let mut commands_in_block = 0;
    for (i, text) in readme.lines().enumerate() {
        let line = i + 1;
        if let Some(lang) = text.strip_prefix("```") {
            block = match block {
                None => {
                    commands_in_block = 0;
                    Some(if lang.is_empty() { "text" } else { lang })
                }
                Some(_) => None,
            };
            continue;
        }
        let command = match block {
            Some("sh") => {
                let command = text.split(" #").next().unwrap_or("").trim();
                if command.is_empty() {
                    continue;
                }
                match stand_in(command) {
                    Some(c) => c,
                    None => continue,
                }
            }
            Some("console") => match text.strip_prefix("$ ") {
                Some(command) => {
                    assert!(!command.trim_start().starts_with("cargo"), "README line {line}: a cargo command in a console block: {command}");
                    command.to_string()
                }
                None => {
                    // Output: the first line after a command is what the test compares.
                    if let Some(last) = steps.last_mut().filter(|s| s.shown.is_none() && commands_in_block > 0) {
                        if let Some(word) = text.split_whitespace().next() {
                            last.shown = Some(word.to_string());
                        }
                    }
                    continue;
                }
            },
            _ => continue,
        };
        commands_in_block += 1;
        steps.push(Step { line, command, shown: None });
    }
    steps
}

fn stand_in(command: &str) -> Option<String> {
    if let Some(args) = command.strip_prefix("cargo run --release -- ") {
        return Some(format!("mtlab {args}"));
    }
    if command == "cargo test --release" || command == "cargo install --locked --path crates/mtlab" {
        return None;
    }
    panic!("a cargo command in the README with no stand-in in tests/readme.rs: {command}");
}

#[test]
fn the_readme_blocks_run_in_order_on_a_fresh_machine() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let steps = steps(&readme);
    assert!(steps.len() >= 8, "the README's commands were found: {steps:?}");
    let needs_go = steps.iter().any(|s| s.command.starts_with("go "));
    let go_dir = ["/usr/local/go/bin", "/usr/lib/go/bin"].into_iter().find(|d| Path::new(d).join("go").exists());
    let path_has_go = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("go").exists()));
    if needs_go && go_dir.is_none() && !path_has_go {
        skip("the README's `go tool pprof` line needs Go (apt-get install golang-go); running the other commands");
    }

    let dir = tempfile::Builder::new().prefix("mtlab-readme-").tempdir().unwrap();
    let checkout = dir.path().join("checkout");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let bin = Path::new(MTLAB).parent().unwrap();

    // One shell, so `cd`, `$!` and the files of one block reach the next;
    // each command's output and status saved by its number.
    let mut script = String::from("cd \"$1\" || exit 99\n");
    for (n, s) in steps.iter().enumerate() {
        if s.command.starts_with("go ") && go_dir.is_none() && !path_has_go {
            script.push_str(&format!("echo 0 > \"$2/{n}.rc\"; echo SKIPPED > \"$2/{n}.out\"\n"));
            continue;
        }
        script.push_str(&format!("{{ {}\n}} > \"$2/{n}.out\" 2>&1; echo $? > \"$2/{n}.rc\"\n", s.command));
    }
    script.push_str("wait\n");
    let results = dir.path().join("results");
    std::fs::create_dir_all(&results).unwrap();
    let mut path = vec![bin.to_path_buf()];
    path.extend(go_dir.map(Into::into));
    path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    let started = std::time::Instant::now();
    let o = Command::new("bash")
        .args(["-c", &script, "readme", checkout.to_str().unwrap(), results.to_str().unwrap()])
        .env("HOME", &home)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env_remove("MTLAB_STORE")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .output()
        .unwrap();
    assert!(o.status.success(), "the README's commands as one script: {}", String::from_utf8_lossy(&o.stderr));

    let mut failures = Vec::new();
    for (n, s) in steps.iter().enumerate() {
        let rc = std::fs::read_to_string(results.join(format!("{n}.rc"))).unwrap_or_else(|_| "not run".into());
        let out = std::fs::read_to_string(results.join(format!("{n}.out"))).unwrap_or_default();
        if rc.trim() != "0" {
            failures.push(format!("README line {}: `{}` exited with {}:\n{out}", s.line, s.command, rc.trim()));
        } else if let Some(word) = s.shown.as_deref().filter(|_| out != "SKIPPED\n") {
            if !out.split_whitespace().any(|w| w == word) {
                failures.push(format!("README line {}: `{}` printed no {word:?} as the README shows:\n{out}", s.line, s.command));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} README commands failed (in {:?}):\n{}", failures.len(), steps.len(), started.elapsed(), failures.join("\n"));
}

#[test]
fn commands_and_their_shown_output_are_read_from_the_blocks() {
    let readme = "text\n```sh\ncargo run --release -- demo   # the tour\ncargo test --release\n```\n\
                  ```console\n$ mtlab record -o a.mtl -- ls\nREADME\nmore\n$ cd x\n```\n```console\nquoted\n```\n";
    let s = steps(readme);
    let got: Vec<(&str, Option<&str>)> = s.iter().map(|s| (s.command.as_str(), s.shown.as_deref())).collect();
    assert_eq!(got, [("mtlab demo", None), ("mtlab record -o a.mtl -- ls", Some("README")), ("cd x", None)]);
}
