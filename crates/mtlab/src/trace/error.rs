//! The trace module's error: what a caller is told when a trace cannot be
//! read or rewritten at all (damage inside a readable trace is a warning).

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not an mtlab trace: give a file written by `mtlab record`", path.display())]
    NotATrace { path: PathBuf },
    #[error(
        "{} was written by a newer mtlab (format v{found}), this mtlab reads up to v{supported}: upgrade mtlab",
        path.display()
    )]
    NewerVersion { path: PathBuf, found: u32, supported: u32 },
    #[error("{} has a damaged header: {reason}", path.display())]
    BadHeader { path: PathBuf, reason: String },
}

impl TraceError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(io::Error) -> TraceError + '_ {
        move |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
