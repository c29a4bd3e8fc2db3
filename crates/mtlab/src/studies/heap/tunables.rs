//! Heap-manager tunables by name, for `mtlab heap sweep`: how each is set
//! (an environment variable), which allocator it belongs to, and whether the
//! allocator took a value — asked where it can say (glibc's loader lists the
//! tunables it parsed; jemalloc prints a complaint for a bad `MALLOC_CONF`).
//! A name the allocator would ignore is refused before anything runs, with
//! the names it knows: otherwise a sweep of a typo measures the default
//! several times and crowns one of them the "best value".

use std::path::Path;
use std::process::Command;

use super::allocators::{self, Allocator};
use super::StudyError;

/// glibc's malloc tunables (GLIBC_TUNABLES `glibc.malloc.NAME`): what each does.
pub const GLIBC: [(&str, &str); 6] = [
    ("top_pad", "extra bytes asked of the system each time the main heap grows (and kept when it shrinks)"),
    ("mmap_threshold", "requests of at least this size get their own mmap (default: dynamic, from 128 KiB)"),
    ("trim_threshold", "free memory at the top of the main heap above this is given back to the system"),
    ("arena_max", "most arenas (default: 8 per CPU); fewer means less memory, more lock contention"),
    ("arena_test", "arenas created before arena_max is checked"),
    ("tcache_count", "blocks kept per size in each thread's cache (0 turns the cache off)"),
];

#[derive(Debug, Clone, PartialEq)]
pub enum Tunable {
    /// `glibc.malloc.NAME` in GLIBC_TUNABLES.
    Glibc(String),
    /// A `MALLOC_CONF` key of jemalloc.
    Jemalloc(String),
    /// An environment variable read by the allocator (tcmalloc's TCMALLOC_*,
    /// mimalloc's MIMALLOC_*) or any other.
    Env(String),
}

/// `NAME` of `--set NAME=…`: a glibc tunable by its short name,
/// `jemalloc.KEY`, `tcmalloc.NAME` (TCMALLOC_NAME), `mimalloc.NAME`
/// (MIMALLOC_NAME) or `env.VAR`. Returns the tunable and the allocator it
/// belongs to (`None`: the one given with --allocator).
pub fn resolve(name: &str) -> Result<(Tunable, Option<&'static str>), StudyError> {
    let upper = |s: &str| s.to_ascii_uppercase();
    let bad = |why: &str| StudyError::Config(format!("--set {name}: {why}"));
    if let Some((_, _)) = GLIBC.iter().find(|(n, _)| *n == name) {
        return Ok((Tunable::Glibc(name.into()), Some("glibc")));
    }
    let Some((family, key)) = name.split_once('.') else {
        let known: Vec<&str> = GLIBC.iter().map(|(n, _)| *n).collect();
        return Err(bad(&format!(
            "unknown tunable: use one of glibc's ({}), jemalloc.KEY (MALLOC_CONF), tcmalloc.NAME, mimalloc.NAME, or env.VAR",
            known.join(", ")
        )));
    };
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("the part after the dot must be a name of letters, digits and _"));
    }
    match family {
        "jemalloc" => Ok((Tunable::Jemalloc(key.into()), Some("jemalloc"))),
        "tcmalloc" => Ok((Tunable::Env(format!("TCMALLOC_{}", upper(key))), Some("tcmalloc"))),
        "mimalloc" => Ok((Tunable::Env(format!("MIMALLOC_{}", upper(key))), Some("mimalloc"))),
        "env" => Ok((Tunable::Env(key.into()), None)),
        "glibc" => Err(bad("glibc's tunables go by their short name (top_pad, not glibc.top_pad)")),
        _ => Err(bad(&format!("unknown family `{family}`: jemalloc, tcmalloc, mimalloc or env"))),
    }
}

impl Tunable {
    /// The environment variable and value that set this tunable to `value`.
    pub fn env(&self, value: &str) -> (String, String) {
        match self {
            Tunable::Glibc(n) => {
                // glibc reads plain numbers: sizes such as 64KiB are turned into one.
                let value = crate::units::parse_size(value).map(|b| b.to_string()).unwrap_or_else(|_| value.to_string());
                let mine = format!("glibc.malloc.{n}={value}");
                let v = match std::env::var("GLIBC_TUNABLES") {
                    Ok(old) if !old.is_empty() => format!("{old}:{mine}"),
                    _ => mine,
                };
                ("GLIBC_TUNABLES".into(), v)
            }
            Tunable::Jemalloc(k) => {
                let mine = format!("{k}:{value}");
                let v = match std::env::var("MALLOC_CONF") {
                    Ok(old) if !old.is_empty() => format!("{old},{mine}"),
                    _ => mine,
                };
                ("MALLOC_CONF".into(), v)
            }
            Tunable::Env(var) => (var.clone(), value.into()),
        }
    }

    /// Whether the allocator takes `value`: `Ok(None)` when it does (or
    /// cannot be asked), `Ok(Some(why))` when it rejects or changes it.
    pub fn check(&self, value: &str, allocator: &Allocator) -> Result<Option<String>, StudyError> {
        match self {
            Tunable::Glibc(n) => glibc_check(n, value, &self.env(value)),
            Tunable::Jemalloc(_) => {
                let Some(lib) = &allocator.library else { return Ok(None) };
                let (var, v) = self.env(value);
                let o = Command::new("true")
                    .env("LD_PRELOAD", lib)
                    .env(var, v)
                    .output()
                    .map_err(|source| StudyError::Spawn { what: "true (checking MALLOC_CONF)".into(), source })?;
                let err = String::from_utf8_lossy(&o.stderr);
                Ok(err.lines().find(|l| l.contains("<jemalloc>")).map(|l| format!("jemalloc says: {}", l.trim())))
            }
            Tunable::Env(_) => Ok(None),
        }
    }
}

impl Tunable {
    /// Refuses a name the allocator would silently ignore, naming those it
    /// knows, where the allocator can tell: mimalloc lists its options under
    /// MIMALLOC_VERBOSE=1, jemalloc complains of an unknown MALLOC_CONF key
    /// (and lists its options with stats_print), and tcmalloc reads only the
    /// TCMALLOC_ variables whose names its library holds. `env.VAR`, and an
    /// allocator that cannot be asked, pass.
    pub fn check_name(&self, allocator: &Allocator) -> Result<(), StudyError> {
        let Some(lib) = &allocator.library else { return Ok(()) };
        let unknown = |given: &str, known: &[String], how: &str| {
            StudyError::Config(format!(
                "{} does not know the tunable `{given}` ({how}): it would run with its defaults. Known: {}",
                allocator.name,
                if known.is_empty() { "(it did not list them)".to_string() } else { known.join(", ") }
            ))
        };
        match self {
            Tunable::Glibc(_) => Ok(()),
            Tunable::Jemalloc(k) => {
                let said = probe(lib, &[("MALLOC_CONF", &format!("{k}:0"))])?;
                if !said.contains("Invalid conf pair") {
                    return Ok(());
                }
                let listed = probe(lib, &[("MALLOC_CONF", "stats_print:true")])?;
                let known = names_after(&listed, "opt.", |c| c.is_ascii_alphanumeric() || c == '_');
                Err(unknown(&format!("jemalloc.{k}"), &known, "jemalloc says: Invalid conf pair"))
            }
            Tunable::Env(var) => {
                if let Some(key) = var.strip_prefix("MIMALLOC_").filter(|_| allocator.name == "mimalloc") {
                    let listed = probe(lib, &[("MIMALLOC_VERBOSE", "1")])?;
                    let known = names_after(&listed, "option '", |c| c != '\'');
                    let key = key.to_ascii_lowercase();
                    if known.is_empty() || known.contains(&key) {
                        return Ok(());
                    }
                    return Err(unknown(&format!("mimalloc.{key}"), &known, "not among the options MIMALLOC_VERBOSE=1 lists"));
                }
                if var.starts_with("TCMALLOC_") && allocator.name.starts_with("tcmalloc") {
                    let bytes = std::fs::read(lib).map_err(|source| StudyError::Spawn { what: format!("reading {}", lib.display()), source })?;
                    let known = names_after(&String::from_utf8_lossy(&bytes), "TCMALLOC_", |c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                    if known.is_empty() || known.iter().any(|k| var[9..] == **k) {
                        return Ok(());
                    }
                    let known: Vec<String> = known.iter().map(|k| k.to_ascii_lowercase()).collect();
                    return Err(unknown(&format!("tcmalloc.{}", var[9..].to_ascii_lowercase()), &known, "its library reads no such TCMALLOC_ variable"));
                }
                Ok(())
            }
        }
    }
}

/// What a small program prints on stderr with `lib` preloaded and `env` set.
/// bash, because it allocates and exits through `exit` with stderr open
/// (coreutils close it first, and jemalloc's statistics are printed at exit).
fn probe(lib: &Path, env: &[(&str, &str)]) -> Result<String, StudyError> {
    let mut c = Command::new("bash");
    c.args(["-c", ":"]).env("LD_PRELOAD", lib).env_remove("MALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().map_err(|source| StudyError::Spawn { what: "bash (asking the allocator its tunables)".into(), source })?;
    Ok(String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The distinct names that follow `tag` in `text`, as far as `part` holds, sorted.
fn names_after(text: &str, tag: &str, part: impl Fn(char) -> bool) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(tag)
        .skip(1)
        .map(|rest| rest.chars().take_while(|&c| part(c)).collect::<String>())
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The dynamic loader, which lists glibc's tunables as it parsed them.
fn loader() -> Option<&'static Path> {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux.so.2"].into_iter().map(Path::new).find(|p| p.exists())
}

/// A number as glibc's tunables parse it: decimal, or hex with 0x.
fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn glibc_check(name: &str, value: &str, env: &(String, String)) -> Result<Option<String>, StudyError> {
    let Some(wanted) = crate::units::parse_size(value).ok().or_else(|| parse_number(value)) else {
        return Ok(Some(format!("`{value}` is not a number glibc reads")));
    };
    let Some(ld) = loader() else { return Ok(None) };
    let o = Command::new(ld)
        .arg("--list-tunables")
        .env(&env.0, &env.1)
        .output()
        .map_err(|source| StudyError::Spawn { what: format!("{} --list-tunables", ld.display()), source })?;
    let text = String::from_utf8_lossy(&o.stdout);
    let key = format!("glibc.malloc.{name}:");
    let Some(line) = text.lines().find(|l| l.trim_start().starts_with(&key)) else { return Ok(None) };
    let got = line.trim_start()[key.len()..].split_whitespace().next().and_then(parse_number);
    // `glibc.malloc.arena_max: 0x0 (min: 0x1, max: 0xffffffffffffffff)`: an
    // unset tunable lists 0 too, so 0 given for a minimum of 1 looked taken.
    // Read from the parenthesis on: the name `arena_max` ends in "max" too.
    let range = line.split_once('(').map_or("", |(_, r)| r);
    let bound = |tag: &str| range.split(tag).nth(1).and_then(|r| r.split([',', ')']).next()).and_then(parse_number);
    if let (Some(min), Some(max)) = (bound("min: "), bound("max: ")) {
        if wanted < min || wanted > max {
            return Ok(Some(format!("glibc takes {name} from {min} to {max}, not {wanted}")));
        }
    }
    Ok(match got {
        Some(g) if g == wanted => None,
        Some(g) => Some(format!("glibc took {name} as {g}, not {wanted} (out of its range, or not read)")),
        None => None,
    })
}

/// The allocator a sweep runs under: the tunable's own, or the one given.
pub fn allocator_for(tunable_owner: Option<&str>, given: Option<&str>) -> Result<Allocator, StudyError> {
    match (tunable_owner, given) {
        (Some(owner), Some(g)) if g != owner => {
            Err(StudyError::Config(format!("this tunable belongs to {owner}; --allocator {g} cannot take it")))
        }
        (Some(owner), _) => allocators::resolve(owner),
        (None, g) => allocators::resolve(g.unwrap_or("glibc")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_the_right_variables() {
        let (t, a) = resolve("top_pad").unwrap();
        assert_eq!((t.clone(), a), (Tunable::Glibc("top_pad".into()), Some("glibc")));
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            assert_eq!(t.env("64KiB").1, "glibc.malloc.top_pad=65536");
        }
        let (t, _) = resolve("jemalloc.dirty_decay_ms").unwrap();
        if std::env::var_os("MALLOC_CONF").is_none() {
            assert_eq!(t.env("0"), ("MALLOC_CONF".into(), "dirty_decay_ms:0".into()));
        }
        assert_eq!(resolve("tcmalloc.release_rate").unwrap().0, Tunable::Env("TCMALLOC_RELEASE_RATE".into()));
        assert_eq!(resolve("mimalloc.purge_delay").unwrap().0, Tunable::Env("MIMALLOC_PURGE_DELAY".into()));
        assert_eq!(resolve("env.FOO").unwrap(), (Tunable::Env("FOO".into()), None));
        for bad in ["topPad", "glibc.top_pad", "hoard.x", "env.", "env.A-B"] {
            assert!(resolve(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_read_as_far_as_they_go() {
        let text = "mimalloc: option 'show_errors': 0\nmimalloc: option 'verbose': 1\nmimalloc: option 'verbose': 1";
        assert_eq!(names_after(text, "option '", |c| c != '\''), ["show_errors", "verbose"]);
        assert_eq!(names_after("xTCMALLOC_RELEASE_RATE\0TCMALLOC_\0", "TCMALLOC_", |c| c.is_ascii_uppercase() || c == '_'), ["RELEASE_RATE"]);
    }

    #[test]
    fn glibc_reports_values_it_does_not_take() {
        if loader().is_none() {
            return;
        }
        let t = Tunable::Glibc("top_pad".into());
        assert_eq!(t.check("65536", &Allocator { name: "glibc".into(), library: None }).unwrap(), None);
        assert!(t.check("lots", &Allocator { name: "glibc".into(), library: None }).unwrap().is_some());
    }

    #[test]
    fn a_glibc_value_below_the_tunables_minimum_is_refused() {
        if loader().is_none() {
            return;
        }
        let t = Tunable::Glibc("arena_max".into());
        let why = glibc_check("arena_max", "0", &t.env("0")).unwrap();
        assert!(why.as_deref().is_some_and(|w| w.contains("from 1")), "{why:?}");
        assert_eq!(glibc_check("arena_max", "2", &t.env("2")).unwrap(), None);
    }
}
