//! A corpus of real programs from Debian packages, each run untraced, under
//! `mtlab record` and under `mtlab record --sample 4KiB`, with the same stdin,
//! working directory (made afresh with the same files before every mode) and
//! environment: stdout, stderr and the exit status must be the same bytes and
//! the same status, and every traced run must leave a trace that `mtlab report
//! --json` reads, with allocation calls in it.
//!
//! The tracer must not change the program it looks at (README: "its output,
//! input, exit code and signals pass through unchanged"); heaptrack once
//! corrupted `tar -czf -` output this way. The inputs are fixed and the
//! environment pins whatever would make an output vary between two untraced
//! runs (time zone, locale, dates of files and commits, hash seeds), so a
//! difference is the tracer's.
//!
//! `cargo test --release --test corpus -- --nocapture` prints a line per
//! program and mode and the summary quoted in docs/benchmarks.md.

mod util;

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;
use util::*;

/// Every fixture file and directory, and every commit, is dated 2020-01-02 03:04:05 UTC.
const FIXED_TIME: u64 = 1_577_934_245;
const FIXED_DATE: &str = "2020-01-02T03:04:05Z";

/// Where Debian's packages put programs, and the only PATH the programs get:
/// the test runs what `.ci/run` installs, not an earlier match in the user's
/// PATH (a pyenv shim for python3, say).
const BIN_DIRS: [&str; 2] = ["/usr/bin", "/bin"];

/// A step that hangs under the tracer fails the test instead of hanging it.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Fixed inputs.

/// `n` lines of words from a fixed pseudo-random sequence (a 64-bit LCG):
/// the same bytes on every run and machine, with repeats (for sort -u, counts).
fn words(n: usize) -> String {
    const SYL: [&str; 16] = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "qu", "ve", "xo", "za", "be", "do", "fi", "gu"];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as usize
    };
    let mut out = String::new();
    for _ in 0..n {
        let words = 1 + next() % 4;
        for w in 0..words {
            if w > 0 {
                out.push(' ');
            }
            for _ in 0..1 + next() % 3 {
                out.push_str(SYL[next() % SYL.len()]);
            }
        }
        out.push_str(&format!(" {}\n", next() % 1000));
    }
    out
}

/// The bytes of `words(n)` lines sorted as `LC_ALL=C sort` sorts them (bytewise).
fn sorted_lines(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A fixture file: path relative to the work directory, contents.
type Files = Vec<(&'static str, Vec<u8>)>;

/// Writes `files` into `dir` and dates every file and directory under `dir`
/// (not `dir` itself) FIXED_TIME, directories last, so that `ls -l`, `tar`
/// and `diff -u` see the same dates in every mode.
fn lay_out(dir: &Path, files: &Files) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
    let mut dirs = Vec::new();
    for (name, bytes) in files {
        let path = dir.join(name);
        let mut parent = path.parent().unwrap();
        std::fs::create_dir_all(parent).unwrap();
        while parent != dir {
            if !dirs.contains(&parent.to_path_buf()) {
                dirs.push(parent.to_path_buf());
            }
            parent = parent.parent().unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        set_mtime(&path);
    }
    // Deepest first: dating a directory after its subdirectories were made.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        set_mtime(&d);
    }
}

fn set_mtime(path: &Path) {
    let t = UNIX_EPOCH + Duration::from_secs(FIXED_TIME);
    let f = std::fs::File::open(path).unwrap();
    f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t)).unwrap();
}

// ---------------------------------------------------------------------------
// The corpus.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Code(i32),
    Signal(i32),
}

impl Status {
    fn of(s: ExitStatus) -> Status {
        match (s.code(), s.signal()) {
            (Some(c), _) => Status::Code(c),
            (None, Some(sig)) => Status::Signal(sig),
            _ => panic!("neither exit code nor signal: {s:?}"),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Status::Code(c) => write!(f, "exit {c}"),
            Status::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// What the untraced run of a step must print: a check of the corpus itself,
/// so that a step that silently stopped exercising the program fails too.
enum Expect {
    /// Exactly these stdout bytes.
    Stdout(Vec<u8>),
    /// Stdout contains this text.
    Contains(&'static str),
    /// At least this many stdout bytes (binary output).
    AtLeast(usize),
    /// Only the status is checked.
    Any,
}

struct Step {
    argv: Vec<String>,
    stdin: Vec<u8>,
    status: Status,
    expect: Expect,
}

fn step(argv: &[&str], stdin: &[u8], status: Status, expect: Expect) -> Step {
    Step { argv: argv.iter().map(|s| s.to_string()).collect(), stdin: stdin.to_vec(), status, expect }
}

struct Case {
    /// The program, as printed; also the name of its work directory.
    name: &'static str,
    /// The programs the steps run, each found in BIN_DIRS, with the Debian package that has it.
    needs: &'static [(&'static str, &'static str)],
    files: Files,
    steps: Vec<Step>,
}

const PY_SCRIPT: &str = r#"import json, sys
words = sys.stdin.read().split()
by_len = sorted(words, key=lambda w: (len(w), w))
doc = {"count": len(words), "distinct": len(set(words)), "shortest": by_len[:3], "longest": by_len[-3:],
       "nested": [{"i": i, "s": str(i) * (i % 7)} for i in range(3000)]}
text = json.dumps(doc, sort_keys=True)
back = json.loads(text)
assert back == doc
print(len(text), back["count"], back["distinct"], " ".join(back["shortest"]), " ".join(back["longest"]))
sys.stdout.flush()
sys.stdout.buffer.write(bytes(range(256)) * 4)
sys.stdout.buffer.flush()
print("python: done", file=sys.stderr)
sys.exit(3)
"#;

const HELLO_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    static char *v[100000];
    char line[512];
    int n = 0, unused; /* the -Wall warning on gcc's stderr */
    while (n < 100000 && fgets(line, sizeof line, stdin)) v[n++] = strdup(line);
    qsort(v, n, sizeof *v, cmp);
    for (int i = 0; i < n; i++) {
        fputs(v[i], stdout);
        free(v[i]);
    }
    fprintf(stderr, "hello: sorted %d lines\n", n);
    return 3;
}
"#;

const BROKEN_C: &str = "int main(void) { return undeclared; }\n";

const HELLO_CPP: &str = r#"#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

int main() {
    std::map<std::string, int> counts;
    std::vector<std::string> words;
    char buf[256];
    while (std::scanf("%255s", buf) == 1) {
        words.emplace_back(buf);
        counts[buf]++;
    }
    std::sort(words.begin(), words.end());
    std::vector<std::pair<int, std::string>> top;
    for (const auto &kv : counts) top.emplace_back(-kv.second, kv.first);
    std::sort(top.begin(), top.end());
    std::printf("%zu words, %zu distinct, first %s, last %s\n", words.size(), counts.size(), words.front().c_str(), words.back().c_str());
    for (size_t i = 0; i < 3 && i < top.size(); i++) std::printf("%s %d\n", top[i].second.c_str(), -top[i].first);
    try {
        throw std::runtime_error("thrown and caught");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "hellopp: %s\n", e.what());
    }
    return 0;
}
"#;

const MAKEFILE: &str = "# a tiny build: a pattern rule, an order-only directory, a failing target
all: out/total.txt

out:
\tmkdir -p out

out/%.txt: %.in | out
\tsort $< > $@

out/total.txt: out/a.txt out/b.txt
\tcat $^ | wc -l > $@
\t@echo \"total: $$(cat $@)\"

fail:
\t@echo 'about to fail' >&2
\tfalse

.PHONY: all fail
";

const PERL_SCRIPT: &str = r#"use strict; use warnings;
my %n; my @w = split /\s+/, do { local $/; <STDIN> };
$n{$_}++ for @w;
my @top = (sort { $n{$b} <=> $n{$a} or $a cmp $b } keys %n)[0..4];
printf "%s %d\n", $_, $n{$_} for @top;
my $s = join ",", map { sprintf "%x", $_ * 7919 } 1..2000;
printf "%d %s\n", length $s, substr($s, -20);
print pack("N*", 1..64);
warn "perl: done\n";
exit 4;
"#;

/// Allocates ~40 MB (so that full buffers reach the trace in both modes before
/// the signal: a trace is flushed at exit, and a signal skips that) and kills itself.
const PERL_KILL: &str = r#"$| = 1; my @keep = map { "x" x 1000 } 1..40000; print scalar(@keep), "\n"; kill "TERM", $$; sleep 10;"#;

const SQL: &str = "create table t(id integer primary key, name text, v real);
with recursive c(i) as (select 1 union all select i + 1 from c where i < 3000)
  insert into t(name, v) select printf('name%05d', (i * 7919) % 3000), i * 0.25 from c;
create index t_name on t(name);
select count(*), sum(v), min(name), max(name) from t;
select name, v from t where name like 'name000%' order by name limit 5;
.mode csv
select id, name from t order by v desc limit 3;
select * from no_such_table;
select 'after the error';
";

const BASH_SCRIPT: &str = r#"set -u
words() { printf '%s\n' zeta alpha mu beta alpha mu alpha; }
words | sort | uniq -c | sort -k1,1nr -k2
( cd d/sub && echo "in a subshell: $(ls | wc -l) file(s)" )
x=$( (echo a; echo b; echo c) | tr a-z A-Z | paste -sd, - )
echo "$x"
declare -A m=([k1]=v1 [k2]=v2 [k3]=v3)
for k in $(printf '%s\n' "${!m[@]}" | sort); do echo "$k=${m[$k]}"; done
read -r line
echo "stdin said: $line"
echo "bash: to stderr" >&2
exec sh -c 'echo "exec replaced the shell"; exit 7'
"#;

const NODE_SCRIPT: &str = r#"const fs = require('fs');
const words = fs.readFileSync(0, 'utf8').split(/\s+/).filter(Boolean);
const sorted = [...words].sort();
const doc = { n: words.length, first: sorted.slice(0, 3), last: sorted.slice(-3),
  m: Object.fromEntries(sorted.slice(0, 500).map((w, i) => [w + i, i])) };
const back = JSON.parse(JSON.stringify(doc));
console.log(JSON.stringify(back).length, back.n, back.first.join(','), back.last.join(','));
process.stdout.write(Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
console.error('node: done');
process.exitCode = 5;
"#;

const AWK_SCRIPT: &str = "{ n[$NF % 10]++; total += $NF } END { for (i = 0; i < 10; i++) printf \"%d %d\\n\", i, n[i]; print NR, total; exit 6 }";

fn corpus() -> Vec<Case> {
    use Status::*;
    let text = words(20_000);
    let text_b = text.as_bytes();
    let sorted = sorted_lines(&text);
    let small = words(300);
    let tree = || -> Files {
        vec![
            ("d/a.txt", b"alpha\n".to_vec()),
            ("d/sub/b.txt", b"beta beta\n".to_vec()),
            ("d/sub/c.bin", (0..=255u8).collect()),
            ("d/empty", Vec::new()),
        ]
    };
    let mut tar_files = tree();
    tar_files.push(("data.txt", small.as_bytes().to_vec()));
    vec![
        // The heavy ones first: two workers take the cases in this order.
        Case {
            name: "g++",
            needs: &[("g++", "g++")],
            files: vec![("hellopp.cpp", HELLO_CPP.as_bytes().to_vec())],
            steps: vec![
                step(&["g++", "-O1", "-Wall", "-o", "hellopp", "hellopp.cpp"], b"", Code(0), Expect::Any),
                step(&["./hellopp"], text_b, Code(0), Expect::Contains("words, ")),
            ],
        },
        Case {
            name: "gcc",
            needs: &[("gcc", "gcc")],
            files: vec![("hello.c", HELLO_C.as_bytes().to_vec()), ("broken.c", BROKEN_C.as_bytes().to_vec())],
            steps: vec![
                step(&["gcc", "-O2", "-Wall", "-o", "hello", "hello.c"], b"", Code(0), Expect::Any),
                step(&["./hello"], text_b, Code(3), Expect::Stdout(sorted.clone().into_bytes())),
                step(&["gcc", "-c", "broken.c"], b"", Code(1), Expect::Any),
            ],
        },
        Case {
            name: "node",
            needs: &[("node", "nodejs")],
            files: vec![],
            steps: vec![step(&["node", "-e", NODE_SCRIPT], text_b, Code(5), Expect::AtLeast(256))],
        },
        Case {
            name: "python3",
            needs: &[("python3", "python3")],
            files: vec![],
            steps: vec![step(&["python3", "-c", PY_SCRIPT], text_b, Code(3), Expect::AtLeast(1024))],
        },
        Case {
            name: "git",
            needs: &[("git", "git")],
            files: vec![("f.txt", b"hello\n".to_vec()), ("d/g.txt", small.as_bytes().to_vec())],
            steps: vec![
                step(&["git", "init"], b"", Code(0), Expect::Contains("Initialized empty Git repository")),
                step(&["git", "add", "f.txt", "d"], b"", Code(0), Expect::Any),
                step(&["git", "commit", "-q", "-m", "first"], b"", Code(0), Expect::Any),
                step(&["git", "log", "--stat"], b"", Code(0), Expect::Contains("Date:   Thu Jan 2 03:04:05 2020 +0000")),
                step(&["git", "cat-file", "-p", "HEAD"], b"", Code(0), Expect::Contains("author A U Thor <author@example.invalid> 1577934245 +0000")),
                step(&["git", "cat-file", "-p", "HEAD:d/g.txt"], b"", Code(0), Expect::Stdout(small.as_bytes().to_vec())),
                step(&["git", "hash-object", "--stdin"], b"hello\n", Code(0), Expect::Stdout(b"ce013625030ba8dba906f756967f9e9ca394464a\n".to_vec())),
                step(&["git", "cat-file", "-t", "no-such-object"], b"", Code(128), Expect::Any),
            ],
        },
        Case {
            name: "sort",
            needs: &[("sort", "coreutils")],
            files: vec![("unsorted.txt", b"b\na\n".to_vec())],
            steps: vec![
                step(&["sort"], text_b, Code(0), Expect::Stdout(sorted.clone().into_bytes())),
                step(&["sort", "-k2,2nr", "-k1,1", "-u"], text_b, Code(0), Expect::AtLeast(1000)),
                step(&["sort", "-c", "unsorted.txt"], b"", Code(1), Expect::Stdout(Vec::new())),
            ],
        },
        Case {
            name: "xz",
            needs: &[("xz", "xz-utils")],
            files: vec![("data.txt", text_b.to_vec()), ("garbage.xz", b"not xz at all\n".to_vec())],
            steps: vec![
                step(&["xz", "-c", "-6"], text_b, Code(0), Expect::AtLeast(1000)),
                step(&["xz", "-k", "-6", "data.txt"], b"", Code(0), Expect::Stdout(Vec::new())),
                step(&["xz", "-dc", "data.txt.xz"], b"", Code(0), Expect::Stdout(text_b.to_vec())),
                step(&["xz", "-t", "garbage.xz"], b"", Code(1), Expect::Any),
            ],
        },
        Case {
            name: "zstd",
            needs: &[("zstd", "zstd")],
            files: vec![("data.txt", text_b.to_vec()), ("garbage.zst", b"not zstd at all\n".to_vec())],
            steps: vec![
                step(&["zstd", "-c", "-q", "-19"], text_b, Code(0), Expect::AtLeast(1000)),
                step(&["zstd", "-q", "data.txt", "-o", "data.txt.zst"], b"", Code(0), Expect::Stdout(Vec::new())),
                step(&["zstd", "-dc", "-q", "data.txt.zst"], b"", Code(0), Expect::Stdout(text_b.to_vec())),
                step(&["zstd", "-t", "-q", "garbage.zst"], b"", Code(1), Expect::Any),
            ],
        },
        Case {
            name: "tar",
            needs: &[("tar", "tar"), ("gzip", "gzip")],
            files: tar_files,
            steps: vec![
                // gzip (a child of tar) stores no name and no date for its stdin.
                step(&["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-czf", "-", "d", "data.txt"], b"", Code(0), Expect::AtLeast(100)),
                step(&["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-cf", "d.tar", "d"], b"", Code(0), Expect::Stdout(Vec::new())),
                step(&["tar", "-tvf", "d.tar"], b"", Code(0), Expect::Contains("0/0              10 2020-01-02 03:04 d/sub/b.txt")),
                step(&["tar", "-xOf", "d.tar", "d/sub/c.bin"], b"", Code(0), Expect::Stdout((0..=255u8).collect())),
                step(&["tar", "-tf", "no-such.tar"], b"", Code(2), Expect::Stdout(Vec::new())),
            ],
        },
        Case {
            name: "perl",
            needs: &[("perl", "perl")],
            files: vec![],
            steps: vec![
                step(&["perl", "-e", PERL_SCRIPT], text_b, Code(4), Expect::AtLeast(256)),
                step(&["perl", "-e", PERL_KILL], b"", Signal(libc::SIGTERM), Expect::Stdout(b"40000\n".to_vec())),
            ],
        },
        Case {
            name: "sqlite3",
            needs: &[("sqlite3", "sqlite3")],
            files: vec![],
            steps: vec![
                // Reading SQL from stdin, sqlite3 goes on after an error and exits 1 at the end.
                step(&["sqlite3", "-init", "/dev/null", "db.sqlite"], SQL.as_bytes(), Code(1), Expect::Contains("after the error")),
                step(&["sqlite3", "-init", "/dev/null", "db.sqlite", "select count(distinct name) from t"], b"", Code(0), Expect::Stdout(b"3000\n".to_vec())),
            ],
        },
        Case {
            name: "make",
            needs: &[("make", "make"), ("sort", "coreutils")],
            files: vec![("Makefile", MAKEFILE.as_bytes().to_vec()), ("a.in", b"3\n1\n2\n".to_vec()), ("b.in", small.as_bytes().to_vec())],
            steps: vec![
                step(&["make"], b"", Code(0), Expect::Contains("total: 303")),
                step(&["make"], b"", Code(0), Expect::Stdout(b"make: Nothing to be done for 'all'.\n".to_vec())),
                step(&["make", "fail"], b"", Code(2), Expect::Stdout(b"false\n".to_vec())),
            ],
        },
        Case {
            name: "bash",
            needs: &[("bash", "bash")],
            files: {
                let mut f = tree();
                f.push(("script.sh", BASH_SCRIPT.as_bytes().to_vec()));
                f
            },
            steps: vec![step(&["bash", "script.sh"], b"a line on stdin\nand another\n", Code(7), Expect::Contains("exec replaced the shell"))],
        },
        Case {
            name: "ls",
            needs: &[("ls", "coreutils")],
            files: tree(),
            steps: vec![
                step(&["ls", "-l", "--time-style=long-iso", "d"], b"", Code(0), Expect::Contains(" 6 2020-01-02 03:04 a.txt\n")),
                step(&["ls", "-lR", "--time-style=full-iso", "d"], b"", Code(0), Expect::Contains("d/sub:")),
                step(&["ls", "-l", "d/no-such-file"], b"", Code(2), Expect::Stdout(Vec::new())),
            ],
        },
        Case {
            name: "grep",
            needs: &[("grep", "grep")],
            files: vec![("words.txt", text_b.to_vec())],
            steps: vec![
                step(&["grep", "-n", "-E", "Q|X"], text_b, Code(1), Expect::Stdout(Vec::new())),
                step(&["grep", "-c", "no such words", "words.txt"], b"", Code(1), Expect::Stdout(b"0\n".to_vec())),
                step(&["grep", "-n", "-E", "^(ka)+ lo"], text_b, Code(0), Expect::AtLeast(10)),
                step(&["grep", "x", "no-such-file"], b"", Code(2), Expect::Stdout(Vec::new())),
            ],
        },
        Case {
            name: "diff",
            needs: &[("diff", "diffutils")],
            files: vec![("a.txt", small.as_bytes().to_vec()), ("b.txt", small.replace("ka", "KA").into_bytes())],
            steps: vec![
                step(&["diff", "-u", "a.txt", "b.txt"], b"", Code(1), Expect::Contains("--- a.txt\t2020-01-02 03:04:05.000000000 +0000")),
                step(&["diff", "a.txt", "a.txt"], b"", Code(0), Expect::Stdout(Vec::new())),
            ],
        },
        Case {
            name: "awk",
            needs: &[("awk", "mawk")],
            files: vec![],
            steps: vec![step(&["awk", AWK_SCRIPT], text_b, Code(6), Expect::Contains("20000 "))],
        },
    ]
}

// ---------------------------------------------------------------------------
// Running.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Untraced,
    Record,
    Sample,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Record => "record",
            Mode::Sample => "record --sample 4KiB",
        }
    }
}

struct Run {
    status: Status,
    stdout: Vec<u8>,
    /// The program's stderr; mtlab's own lines taken off.
    stderr: Vec<u8>,
    /// Traced runs: where mtlab's line naming the pid was (see [`program_stderr_bytes`]).
    pid_line: PidLine,
    trace: Option<PathBuf>,
}

/// The environment of every run, untraced or traced: the test's own, with
/// what would make two untraced runs differ pinned (locale, time zone, Python's
/// string hashes, git's identity, dates and configuration), and what the
/// test's caller may have set for git or make (a hook's GIT_DIR, a jobserver's
/// MAKEFLAGS) taken away.
fn environment(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if k.starts_with("GIT_") || k.starts_with("MAKE") || k == "MFLAGS" || k.starts_with("PYTHON") || k.starts_with("NODE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("PATH", BIN_DIRS.join(":"))
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .env("PYTHONHASHSEED", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.invalid")
        .env("GIT_AUTHOR_DATE", FIXED_DATE)
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.invalid")
        .env("GIT_COMMITTER_DATE", FIXED_DATE)
        // git init's branch name without its hint on stderr.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "init.defaultBranch")
        .env("GIT_CONFIG_VALUE_0", "main");
}

/// Runs `cmd` with `stdin` fed to it, stdout and stderr collected, within STEP_TIMEOUT.
fn run_cmd(mut cmd: Command, stdin: &[u8], what: &str) -> (ExitStatus, Vec<u8>, Vec<u8>) {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    // A program that does not read all of its stdin ends the pipe: not an error here.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            v
        })
    };
    let out = reader(Box::new(child.stdout.take().unwrap()));
    let err = reader(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > STEP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {STEP_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    writer.join().unwrap();
    (status, out.join().unwrap(), err.join().unwrap())
}

/// Runs the steps of `case` in a fresh `work` directory, in `mode`.
fn run_case(lab: &Lab, case: &Case, mode: Mode) -> Vec<Run> {
    let work = lab.path(&format!("{}.work", case.name));
    lay_out(&work, &case.files);
    let traces = lab.path("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let mut runs = Vec::new();
    for (i, s) in case.steps.iter().enumerate() {
        let what = format!("{} ({}) {:?}", case.name, mode.label(), s.argv);
        let trace = traces.join(format!("{}-{}-{i}.mtl", case.name, mode.label().replace([' ', '-'], "")));
        let mut cmd = match mode {
            Mode::Untraced => Command::new(&s.argv[0]),
            _ => {
                let mut c = Command::new(MTLAB);
                c.arg("record");
                if mode == Mode::Sample {
                    // A fixed seed: the same samples on every run of the test.
                    c.args(["--sample", "4KiB", "--sample-seed", "1"]);
                }
                c.arg("-o").arg(&trace).arg("--").arg(&s.argv[0]);
                c
            }
        };
        cmd.args(&s.argv[1..]).current_dir(&work);
        environment(&mut cmd);
        let (status, stdout, stderr) = run_cmd(cmd, &s.stdin, &what);
        let (stderr, pid_line) = if mode == Mode::Untraced { (stderr, PidLine::None) } else { program_stderr_bytes(&stderr) };
        runs.push(Run { status: Status::of(status), stdout, stderr, pid_line, trace: (mode != Mode::Untraced).then_some(trace) });
    }
    runs
}

/// The program's own stderr from `mtlab record`'s, and where mtlab's pid
/// line was. mtlab adds whole lines starting with "mtlab:" after the program
/// ended (util::program_stderr, here on bytes: the programs may write any
/// bytes), and under `--sample` one line naming the program's pid for `mtlab
/// ctl` before the program starts. That line is taken off wherever it is
/// whole; [`compare`] counts it anywhere but first as a change (it was written
/// while the program ran, and once landed inside a line of sort's).
fn program_stderr_bytes(stderr: &[u8]) -> (Vec<u8>, PidLine) {
    let mut out = Vec::with_capacity(stderr.len());
    let mut pid_line = PidLine::None;
    for line in stderr.split_inclusive(|&b| b == b'\n') {
        if pid_line == PidLine::None && is_pid_line(line) {
            pid_line = if out.is_empty() { PidLine::First } else { PidLine::Late };
            continue;
        }
        out.extend_from_slice(line);
    }
    // mtlab's closing lines.
    let mut end = out.len();
    loop {
        let body = &out[..end];
        let trimmed = body.strip_suffix(b"\n").unwrap_or(body);
        let start = trimmed.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        if end > 0 && body.ends_with(b"\n") && body[start..].starts_with(b"mtlab:") {
            end = start;
        } else {
            out.truncate(end);
            return (out, pid_line);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PidLine {
    /// Not there, or not whole anywhere (cut by the program's output).
    None,
    /// Before any of the program's stderr.
    First,
    /// After some of it.
    Late,
}

/// "mtlab: sampling process PID: `mtlab ctl PID status|start|stop|dump` controls it\n"
fn is_pid_line(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else { return false };
    let Some(rest) = line.strip_prefix("mtlab: sampling process ") else { return false };
    let Some((pid, rest)) = rest.split_once(": `mtlab ctl ") else { return false };
    !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && rest == format!("{pid} status|start|stop|dump` controls it\n")
}

/// What one traced mode's trace says, summed over its processes.
struct TraceFigures {
    processes: usize,
    /// Full trace: malloc calls; sampled: samples.
    count: u64,
}

/// `mtlab report --json` on a traced step's trace (with util's invariants on
/// every process), and the figure that shows it holds the program's allocations.
fn read_trace(lab: &Lab, trace: &Path, mode: Mode, status: Status) -> TraceFigures {
    assert!(trace.exists(), "no trace {} was written", trace.display());
    let r = lab.report_path(trace);
    let procs = processes(&r);
    // The root pid's recorded end is the status the program ended with, on
    // its last image (the root trace's own, unless the root exec'd).
    let last = r["processes_index"].as_array().unwrap().iter().rfind(|x| x["pid"] == r["pid"]).unwrap();
    let (exit, ended) = match status {
        Status::Code(c) => (format!("exit code {c}"), last["end"] == "exit_code" && last["exit_code"] == c),
        Status::Signal(s) => (format!("killed by signal {s}"), last["end"] == "signal" && last["signal"] == s),
    };
    assert!(ended, "{}: the trace's end: {last}", trace.display());
    let exits: Vec<&str> = procs.iter().filter_map(|p| p["exit"].as_str()).collect();
    assert!(exits.iter().all(|e| *e == exit), "{}: {exits:?}", trace.display());
    let count = match mode {
        Mode::Record => procs.iter().map(|p| calls(p, "malloc")).sum(),
        Mode::Sample => procs.iter().map(|p| sampled(p)).sum(),
        Mode::Untraced => unreachable!(),
    };
    TraceFigures { processes: procs.len(), count }
}

/// Samples in a sampled trace's process report.
fn sampled(p: &Value) -> u64 {
    u(&p["profile"]["samples"])
}

/// Result of comparing one traced mode of a case with the untraced runs.
#[derive(Default)]
struct Compared {
    line: String,
    output_changes: Vec<String>,
    status_changes: Vec<String>,
}

fn compare(lab: &Lab, case: &Case, mode: Mode, base: &[Run], traced: &[Run], secs: f64) -> Compared {
    let mut c = Compared::default();
    let (mut out_bytes, mut err_bytes, mut procs, mut total) = (0, 0, 0, 0);
    let (mut statuses, mut counts) = (Vec::new(), Vec::new());
    for ((s, a), b) in case.steps.iter().zip(base).zip(traced) {
        let what = format!("{} {:?} under {}", case.name, short(&s.argv), mode.label());
        if a.stdout != b.stdout {
            c.output_changes.push(format!("{what}: stdout {}", first_difference(&a.stdout, &b.stdout)));
        }
        if a.stderr != b.stderr {
            c.output_changes.push(format!("{what}: stderr {}", first_difference(&a.stderr, &b.stderr)));
        }
        if a.status != b.status {
            c.status_changes.push(format!("{what}: {} untraced, {} traced", a.status, b.status));
        }
        let pid_line_wanted = if mode == Mode::Sample { PidLine::First } else { PidLine::None };
        if b.pid_line != pid_line_wanted {
            c.output_changes.push(format!("{what}: mtlab's pid line: {:?}, wanted {pid_line_wanted:?}", b.pid_line));
        }
        out_bytes += a.stdout.len();
        err_bytes += a.stderr.len();
        statuses.push(a.status.to_string());
        let t = read_trace(lab, b.trace.as_ref().unwrap(), mode, b.status);
        if mode == Mode::Record {
            // Every one of these programs calls malloc (at least libc's stdio
            // buffers, the locale, the loader's TLS): a trace without a call lost them.
            assert!(t.count > 0, "{what}: no malloc call in its trace");
        }
        counts.push(t.count.to_string());
        total += t.count;
        procs += t.processes;
    }
    // A step may allocate too little to be sampled at 4 KiB (`diff a.txt a.txt`
    // had no sample), a whole case does not: with seed 1 the fewest samples of a
    // case were awk's 3 (its own allocator takes large blocks from malloc).
    assert!(mode != Mode::Sample || total > 0, "{}: no sample in any of its traces", case.name);
    let unit = if mode == Mode::Sample { "samples" } else { "malloc calls" };
    c.line = format!(
        "corpus: {:<8} {:<20} vs untraced: {} step(s), {out_bytes} stdout + {err_bytes} stderr bytes: {}; {}; traces of {procs} process(es), {unit} per step: {}; {secs:.1} s",
        case.name,
        mode.label(),
        case.steps.len(),
        if c.output_changes.is_empty() && c.status_changes.is_empty() { "same" } else { "CHANGED" },
        statuses.join(", "),
        counts.join(", "),
    );
    c
}

fn short(argv: &[String]) -> Vec<String> {
    argv.iter().map(|a| if a.len() > 40 { format!("{}…", &a[..a.char_indices().nth(30).unwrap().0]) } else { a.clone() }).collect()
}

/// Where two outputs first differ, with a little of each around it.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let i = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let around = |v: &[u8]| String::from_utf8_lossy(&v[i.saturating_sub(40)..(i + 40).min(v.len())]).into_owned();
    format!("differs at byte {i} ({} untraced bytes, {} traced): untraced {:?}, traced {:?}", a.len(), b.len(), around(a), around(b))
}

/// Checks what the untraced runs of a case printed (the corpus exercises what it says it does).
fn check_untraced(case: &Case, base: &[Run]) {
    for (s, r) in case.steps.iter().zip(base) {
        let what = format!("{} {:?} untraced", case.name, short(&s.argv));
        assert_eq!(r.status, s.status, "{what}: status; stderr: {}", String::from_utf8_lossy(&r.stderr));
        match &s.expect {
            Expect::Stdout(v) => assert!(r.stdout == *v, "{what}: stdout {}", first_difference(v, &r.stdout)),
            Expect::Contains(t) => assert!(
                String::from_utf8_lossy(&r.stdout).contains(t),
                "{what}: stdout lacks {t:?}:\n{}",
                String::from_utf8_lossy(&r.stdout)
            ),
            Expect::AtLeast(n) => assert!(r.stdout.len() >= *n, "{what}: {} stdout bytes, expected at least {n}", r.stdout.len()),
            Expect::Any => {}
        }
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    BIN_DIRS.iter().map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

#[test]
fn real_programs_run_unchanged_under_record_and_sample() {
    let started = Instant::now();
    let lab = Lab::new();
    let cases = corpus();
    let mut runnable = Vec::new();
    let mut skipped = Vec::new();
    for case in &cases {
        let missing: Vec<String> =
            case.needs.iter().filter(|(p, _)| find_program(p).is_none()).map(|(p, pkg)| format!("{p} (Debian package {pkg})")).collect();
        if missing.is_empty() {
            runnable.push(case);
        } else {
            skip(&format!("corpus: {}: not installed in {}: {}", case.name, BIN_DIRS.join(" or "), missing.join(", ")));
            skipped.push(case.name);
        }
    }

    // Two workers (the machine has 2 cores), cases in order, results kept per case.
    let next = AtomicUsize::new(0);
    // Per case: its two comparisons and the seconds its three modes took.
    type Done = (Vec<Compared>, f64);
    let results: Mutex<Vec<Option<Done>>> = Mutex::new((0..runnable.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = runnable.get(i) else { break };
                let t = Instant::now();
                let base = run_case(&lab, case, Mode::Untraced);
                check_untraced(case, &base);
                let mut compared = Vec::new();
                for mode in [Mode::Record, Mode::Sample] {
                    let t = Instant::now();
                    let traced = run_case(&lab, case, mode);
                    compared.push(compare(&lab, case, mode, &base, &traced, t.elapsed().as_secs_f64()));
                }
                results.lock().unwrap()[i] = Some((compared, t.elapsed().as_secs_f64()));
            });
        }
    });

    let results = results.into_inner().unwrap();
    let (mut output_changes, mut status_changes) = (Vec::new(), Vec::new());
    for (case, r) in runnable.iter().zip(&results) {
        let (compared, secs) = r.as_ref().unwrap_or_else(|| panic!("{}: no result", case.name));
        for c in compared {
            println!("{}", c.line);
            output_changes.extend(c.output_changes.iter().cloned());
            status_changes.extend(c.status_changes.iter().cloned());
        }
        println!("corpus: {:<8} {secs:.1} s for the three modes", case.name);
    }
    for d in output_changes.iter().chain(&status_changes) {
        println!("corpus: CHANGED {d}");
    }
    let summary = format!(
        "corpus: {} programs x 2 modes: {} output changes, {} exit-code changes{} ({:.1} s)",
        runnable.len(),
        output_changes.len(),
        status_changes.len(),
        if skipped.is_empty() { String::new() } else { format!(", {} skipped ({})", skipped.len(), skipped.join(", ")) },
        started.elapsed().as_secs_f64(),
    );
    println!("{summary}");
    assert!(output_changes.is_empty() && status_changes.is_empty(), "{summary}");
}
