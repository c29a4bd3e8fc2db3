//! The thread libraries a threads study compares: glibc (NPTL, the workloads
//! carried in the binary) and any other libc whose compiler wrapper is
//! installed (`musl` finds `musl-gcc`) or given by path. Wrapper builds are
//! made from the embedded sources and cached (`native::build_with`).

use std::path::{Path, PathBuf};

use crate::native::{self, Part};
use crate::studies::StudyError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Libc {
    /// The system's glibc; workloads built with mtlab.
    Glibc,
    /// Built at run time with this compiler wrapper.
    Wrapper { name: String, compiler: PathBuf },
}

impl Libc {
    /// `glibc`, `musl` (musl-gcc in PATH), or a path to a compiler wrapper.
    pub fn resolve(spec: &str) -> Result<Libc, StudyError> {
        match spec {
            "glibc" | "nptl" => Ok(Libc::Glibc),
            "musl" => crate::platform::process::find_in_path("musl-gcc")
                .map(|compiler| Libc::Wrapper { name: "musl".into(), compiler })
                .ok_or_else(|| {
                    StudyError::Config(
                        "--libc musl: musl-gcc is not installed (Debian: apt-get install musl-tools), or give its wrapper by path".into(),
                    )
                }),
            path if path.contains('/') => {
                let p = Path::new(path);
                if !is_executable(p) {
                    return Err(StudyError::Config(format!("--libc {path}: no executable compiler wrapper there")));
                }
                let stem = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| path.to_string());
                // musl-gcc → musl, x86_64-linux-musl-gcc → x86_64-linux-musl
                let name = stem.strip_suffix("-gcc").or_else(|| stem.strip_suffix("-cc")).unwrap_or(&stem).to_string();
                Ok(Libc::Wrapper { name, compiler: p.to_path_buf() })
            }
            other => Err(StudyError::Config(format!(
                "--libc {other}: expected glibc, musl, or the path of a libc's compiler wrapper (e.g. /usr/local/musl/bin/musl-gcc)"
            ))),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Libc::Glibc => "glibc",
            Libc::Wrapper { name, .. } => name,
        }
    }

    /// The workload's executable for this libc, building it if needed.
    pub fn workload(&self, part: Part) -> Result<PathBuf, StudyError> {
        match self {
            Libc::Glibc => Ok(native::path(part)?),
            Libc::Wrapper { compiler, .. } => native::build_with(compiler, part).map_err(|e| StudyError::Config(e.to_string())),
        }
    }

    /// What the run records of this libc's version (glibc's is in every run's environment).
    pub fn version(&self) -> Option<String> {
        match self {
            Libc::Glibc => None,
            Libc::Wrapper { name, .. } if name == "musl" => crate::study::env::package_version("musl"),
            Libc::Wrapper { compiler, .. } => Some(compiler.display().to_string()),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_resolve() {
        assert_eq!(Libc::resolve("glibc").unwrap(), Libc::Glibc);
        assert!(matches!(Libc::resolve("uclibc"), Err(StudyError::Config(m)) if m.contains("expected glibc, musl")));
        assert!(matches!(Libc::resolve("/nonexistent/musl-gcc"), Err(StudyError::Config(m)) if m.contains("no executable")));
        if let Some(cc) = crate::platform::process::find_in_path("cc") {
            let l = Libc::resolve(cc.to_str().unwrap()).unwrap();
            assert!(matches!(l, Libc::Wrapper { .. }));
        }
    }
}
