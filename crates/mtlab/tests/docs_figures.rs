//! Figures that say where they come from: every section of
//! docs/benchmarks.md that gives figures names the command that produced
//! them, the date, the commit of the build measured and the spread (issue
//! 40). A figure that the latest run of its command does not reproduce is
//! updated or removed by hand; this test keeps the provenance from being
//! forgotten when a section is added or rewritten.

mod util;

use util::repo_root;

/// The sections of `text` that have no subsection: (heading, body).
fn leaf_sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(usize, String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(level) = line.strip_prefix('#').map(|_| line.chars().take_while(|c| *c == '#').count()) {
            out.push((level, line.to_string(), String::new()));
        } else if let Some(last) = out.last_mut() {
            last.2.push_str(line);
            last.2.push('\n');
        }
    }
    let leaf = |i: usize| out.get(i + 1).is_none_or(|next| next.0 <= out[i].0);
    (0..out.len()).filter(|&i| leaf(i) && out[i].0 >= 2).map(|i| (out[i].1.clone(), out[i].2.clone())).collect()
}

fn has_command(body: &str) -> bool {
    body.contains("```")
        || body.lines().any(|l| l.starts_with("    ") && (l.contains("mtlab ") || l.contains("cargo ")))
        || ["`mtlab ", "`cargo ", "`bench/"].iter().any(|c| body.contains(c))
}

fn has_date(body: &str) -> bool {
    body.as_bytes().windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit) && w[4] == b'-' && w[5..7].iter().all(u8::is_ascii_digit) && w[7] == b'-'
            && w[8..].iter().all(u8::is_ascii_digit)
    })
}

/// "commit 1a2b3c4", "build of 1a2b3c4", "builds 1a2b3c4 …".
fn has_commit(body: &str) -> bool {
    let words: Vec<&str> = body.split(|c: char| c.is_whitespace() || c == '(' || c == ',').collect();
    words.windows(2).any(|w| {
        let hex = w[1].trim_matches(|c: char| !c.is_ascii_alphanumeric());
        matches!(w[0], "commit" | "of" | "builds" | "build" | "commits")
            && hex.len() >= 7
            && hex.chars().all(|c| c.is_ascii_hexdigit())
            && hex.chars().any(|c| c.is_ascii_digit())
    })
}

/// An interval `[a, b]`, a range `a–b`, `±`, or the spread said in words.
fn has_spread(body: &str) -> bool {
    ["spread", "±", "min–max", "min-max"].iter().any(|s| body.contains(s))
        || body.contains(", ") && body.split('[').skip(1).any(|s| s.split(']').next().is_some_and(|i| i.contains(", ") && i.chars().next().is_some_and(|c| c.is_ascii_digit())))
        || body.split('–').count() > 1
}

#[test]
fn every_benchmark_section_names_its_command_date_commit_and_spread() {
    let text = std::fs::read_to_string(repo_root().join("docs/benchmarks.md")).unwrap();
    let mut missing = Vec::new();
    for (heading, body) in leaf_sections(&text) {
        let lacks: Vec<&str> = [
            (has_command(&body), "the command"),
            (has_date(&body), "the date"),
            (has_commit(&body), "the commit measured"),
            (has_spread(&body), "the spread"),
        ]
        .into_iter()
        .filter(|(ok, _)| !ok)
        .map(|(_, what)| what)
        .collect();
        if !lacks.is_empty() {
            missing.push(format!("  {heading}: no {}", lacks.join(", no ")));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/benchmarks.md sections whose figures do not say where they come from (add a line such as \
         \"Latest: 2026-11-29, build of commit abc1234, `COMMAND`; spread: …\"):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_checks_tell_a_section_with_provenance_from_one_without() {
    let good = "Run of 2026-11-29, build of commit 6e108b3:\n```\nmtlab bench tracer\n```\n1.21× [1.19, 1.28]\n";
    assert!(has_command(good) && has_date(good) && has_commit(good) && has_spread(good));
    let bare = "malloc-test is fast: 3 times faster than before.\n";
    assert!(!has_command(bare) && !has_date(bare) && !has_commit(bare) && !has_spread(bare));
    assert!(!has_commit("the build of the day"), "a word is not a commit");
    let sections = leaf_sections("# T\n## A\n### A1\nx\n## B\ny\n");
    let names: Vec<&str> = sections.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(names, ["### A1", "## B"]);
}

/// The demo's time is stated in `mtlab demo --help` and once in the README;
/// the two must say the same (issue 40: one fact, no two versions of it).
#[test]
fn the_demo_time_in_its_help_is_the_readmes() {
    let help = std::process::Command::new(util::MTLAB).args(["demo", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    // "(12–25 s on 2 cores)": the figure is what stands before " s on 2 cores".
    let at = help.find(" s on 2 cores").unwrap_or_else(|| panic!("demo --help states no time on 2 cores: {help}"));
    let figure = help[..at].rsplit('(').next().unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let said = format!("takes {figure} s on 2 cores");
    assert!(readme.contains(&said), "README does not say the demo {said:?}, as `mtlab demo --help` does");
    assert_eq!(readme.matches(" s on 2 cores").count(), 1, "the README states the demo's time once");
}
