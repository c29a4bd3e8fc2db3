//! Heap-manager tunables by name, for `mtlab heap sweep`: how each is set
//! (an environment variable), which allocator it belongs to, and whether the
//! allocator took a value — asked where it can say (glibc's loader lists the
//! tunables it parsed; jemalloc prints a complaint for a bad `MALLOC_CONF`).

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
