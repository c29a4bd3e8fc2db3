//! Heap managers by name or path: where their library is (the dynamic
//! linker's cache first, as the loader itself would find it), which Debian
//! package ships them, and whether a trace shows the program really used one.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::StudyError;

/// A heap manager to run a program with.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocator {
    /// `glibc`, `jemalloc`, `tcmalloc`, `tcmalloc-minimal`, `mimalloc`, or a path as given.
    pub name: String,
    /// The library to preload; `None` for the system's own (glibc).
    pub library: Option<PathBuf>,
}

/// The shared object a named heap manager is loaded as.
fn soname(name: &str) -> Option<&'static str> {
    Some(match name {
        "jemalloc" => "libjemalloc.so.2",
        "tcmalloc" => "libtcmalloc.so.4",
        "tcmalloc-minimal" => "libtcmalloc_minimal.so.4",
        "mimalloc" => "libmimalloc.so.2",
        _ => return None,
    })
}

/// The Debian package that ships a named heap manager.
pub fn package(name: &str) -> Option<&'static str> {
    match name {
        "jemalloc" => Some("libjemalloc2"),
        "tcmalloc" => Some("libgoogle-perftools4"),
        "tcmalloc-minimal" => Some("libtcmalloc-minimal4"),
        "mimalloc" => Some("libmimalloc2.0"),
        _ => None,
    }
}

pub const KNOWN: &str = "glibc, jemalloc, tcmalloc, tcmalloc-minimal, mimalloc";

/// The dynamic linker's cache as `ldconfig -p` lists it, read once per run
/// (studies look libraries up on every trial).
fn linker_cache() -> &'static str {
    static CACHE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let out = Command::new("ldconfig").arg("-p").output().ok().or_else(|| Command::new("/sbin/ldconfig").arg("-p").output().ok());
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    })
}

/// Where the dynamic linker's cache puts `soname`.
fn in_linker_cache(soname: &str) -> Option<PathBuf> {
    linker_cache()
        .lines()
        .filter(|l| l.trim_start().starts_with(&format!("{soname} ")))
        .filter(|l| l.contains("x86-64") || l.contains("AArch64") || !l.contains('('))
        .find_map(|l| l.rsplit("=> ").next().map(|p| PathBuf::from(p.trim())))
        .filter(|p| p.exists())
}

/// A named heap manager's library: the linker cache, else the usual directories.
pub fn library(name: &str) -> Option<PathBuf> {
    let so = soname(name)?;
    in_linker_cache(so).or_else(|| {
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
            .iter()
            .map(|d| Path::new(d).join(so))
            .find(|p| p.exists())
    })
}

/// Refuses a library path that `LD_PRELOAD` cannot carry: the loader splits
/// its value at spaces and colons, looks for each piece, and runs the
/// program without the allocator — whose failure was then blamed on the
/// program.
pub fn preloadable(lib: &Path) -> Result<(), StudyError> {
    let shown = lib.display().to_string();
    let Some(c) = shown.chars().find(|c| matches!(c, ' ' | ':' | '\t' | '\n')) else { return Ok(()) };
    let what = if c == ':' { "a colon" } else { "a space" };
    let name = lib.file_name().map(|n| n.to_string_lossy().replace([' ', ':', '\t', '\n'], "_")).unwrap_or_else(|| "lib.so".into());
    Err(StudyError::Config(format!(
        "the allocator library path `{shown}` contains {what}, which LD_PRELOAD cannot carry (it splits its list at spaces \
         and colons, and the program would run without the allocator); make a symlink or copy at a path without spaces \
         or colons, e.g. `ln -s {} /usr/local/lib/{name}`, and give that path",
        crate::platform::process::shell_word(lib)
    )))
}

/// Resolves a `--allocators` entry: a known name, or a path to a `.so`.
pub fn resolve(entry: &str) -> Result<Allocator, StudyError> {
    let a = resolve_entry(entry)?;
    if let Some(lib) = &a.library {
        preloadable(lib)?;
    }
    Ok(a)
}

fn resolve_entry(entry: &str) -> Result<Allocator, StudyError> {
    if entry == "glibc" {
        return Ok(Allocator { name: entry.into(), library: None });
    }
    if entry.contains('/') || entry.ends_with(".so") || entry.contains(".so.") {
        let p = PathBuf::from(entry);
        if !p.is_file() {
            return Err(StudyError::Config(format!("allocator library {entry} does not exist (give the path to its .so)")));
        }
        if !defines_malloc(&p) {
            return Err(StudyError::Config(format!(
                "{entry} is not a heap manager: it is not a shared library that defines malloc"
            )));
        }
        return Ok(Allocator { name: entry.into(), library: Some(p) });
    }
    let Some(so) = soname(entry) else {
        return Err(StudyError::Config(format!("unknown allocator `{entry}`: use one of {KNOWN}, or a path to a .so")));
    };
    match library(entry) {
        Some(lib) => Ok(Allocator { name: entry.into(), library: Some(lib) }),
        None => Err(StudyError::Config(format!(
            "{entry} is not installed: {so} is not in the dynamic linker's cache (ldconfig -p); install it with \
             `apt-get install {}` or give the path to its .so",
            package(entry).unwrap_or("its package")
        ))),
    }
}

/// Whether `path` is an ELF shared object whose dynamic symbols define
/// `malloc` (preloaded, it then takes the program's malloc; libz or a text
/// file ran every configuration and was blamed on the program).
fn defines_malloc(path: &Path) -> bool {
    use object::read::elf::{ElfFile64, FileHeader};
    use object::{Endianness, Object, ObjectSymbol};
    let Ok(data) = std::fs::read(path) else { return false };
    if object::elf::FileHeader64::<Endianness>::parse(&*data).is_err() {
        return false;
    }
    let Ok(elf) = ElfFile64::<Endianness>::parse(&*data) else { return false };
    elf.dynamic_symbols().any(|s| s.is_definition() && s.name() == Ok("malloc"))
}

impl Allocator {
    /// Its package's version, when it is a named one.
    pub fn version(&self) -> Option<String> {
        match self.name.as_str() {
            "glibc" => crate::study::env::package_version("libc6"),
            n => crate::study::env::package_version(package(n)?),
        }
    }

    /// Whether a trace's `allocator`/`allocator_path` (the library that
    /// defines the malloc the program called) is this heap manager.
    pub fn matches(&self, detected: &str, detected_path: &str) -> bool {
        match &self.library {
            None => detected == "glibc",
            Some(lib) => {
                let same_file = std::fs::canonicalize(lib).ok().zip(std::fs::canonicalize(detected_path).ok()).is_some_and(|(a, b)| a == b);
                same_file || (detected != "glibc" && detected != "other" && self.name.starts_with(detected))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_missing_ones() {
        assert_eq!(resolve("glibc").unwrap(), Allocator { name: "glibc".into(), library: None });
        let e = resolve("hoard").unwrap_err().to_string();
        assert!(e.contains("unknown allocator `hoard`") && e.contains("jemalloc"), "{e}");
        let e = resolve("/nonexistent/libx.so").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        // An installed one resolves to an existing file; a missing one says how to install it.
        match resolve("jemalloc") {
            Ok(a) => assert!(a.library.unwrap().is_file()),
            Err(e) => assert!(e.to_string().contains("apt-get install libjemalloc2"), "{e}"),
        }
        let g = Allocator { name: "glibc".into(), library: None };
        assert!(g.matches("glibc", "/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!g.matches("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"));
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("my libs");
        std::fs::create_dir(&spaced).unwrap();
        let lib = spaced.join("libc.so.6");
        std::fs::copy("/lib/x86_64-linux-gnu/libc.so.6", &lib).or_else(|_| std::fs::copy("/lib64/libc.so.6", &lib)).unwrap();
        let e = resolve(lib.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("contains a space, which LD_PRELOAD cannot carry") && e.contains("ln -s"), "{e}");
        let e = preloadable(Path::new("/opt/a:b/libx.so")).unwrap_err().to_string();
        assert!(e.contains("contains a colon"), "{e}");
        let j = Allocator { name: "jemalloc".into(), library: Some("/nonexistent/libjemalloc.so.2".into()) };
        assert!(j.matches("jemalloc", "/elsewhere/libjemalloc.so.2"));
        assert!(!j.matches("glibc", "/lib/x86_64-linux-gnu/libc.so.6"));
    }
}
