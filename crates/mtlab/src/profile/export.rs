//! `mtlab report --pprof/--flamegraph/--collapsed/--speedscope`: a profile,
//! estimated (sampled trace) or exact (full trace), written out.

use std::path::PathBuf;

use super::flame::{self, FlameValue};
use super::{pprof, ExportError, ProfileData};
use crate::trace::TraceError;

#[derive(Debug, Default, Clone)]
pub struct ExportRequest {
    pub pprof: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub collapsed: Option<PathBuf>,
    /// speedscope's JSON: allocated and in-use bytes and objects.
    pub speedscope: Option<PathBuf>,
    pub value: Option<FlameValue>,
}

impl ExportRequest {
    pub fn is_empty(&self) -> bool {
        self.pprof.is_none() && self.flamegraph.is_none() && self.collapsed.is_none() && self.speedscope.is_none()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileExportError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Export(#[from] ExportError),
}

/// Writes every requested export of a profile already read.
pub fn export_data(data: &ProfileData, req: &ExportRequest) -> Result<Vec<PathBuf>, ExportError> {
    let mut sym = data.symbolizer();
    let mut written = Vec::new();
    if let Some(out) = &req.pprof {
        pprof::write_pprof(data, &mut sym, out)?;
        written.push(out.clone());
    }
    let value = req.value.unwrap_or(FlameValue::AllocBytes);
    if let Some(out) = &req.collapsed {
        flame::write_collapsed(data, &mut sym, value, out)?;
        written.push(out.clone());
    }
    if let Some(out) = &req.flamegraph {
        flame::write_flamegraph_svg(data, &mut sym, value, out)?;
        written.push(out.clone());
    }
    if let Some(out) = &req.speedscope {
        let name = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "mtlab".into());
        super::speedscope::write_speedscope(data, &mut sym, &name, out)?;
        written.push(out.clone());
    }
    Ok(written)
}
