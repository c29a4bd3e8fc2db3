//! The OTLP flags: `report --otlp/--otlp-json/--otlp-endpoint/--service`,
//! `record --sample … --push-every`, the studies' and `runs export`'s
//! `--otlp-endpoint`, and what they print.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;

use super::CliError;
use crate::otlp::{self, push, ProcessInfo, Protocol, Retry, Signal, Target};
use crate::report::RunReport;

#[derive(Args, Debug, Clone, Default)]
pub struct ProfileOtlpArgs {
    /// Write the heap profile as an OpenTelemetry (OTLP) profiles request, protobuf (docs/otlp.md).
    #[arg(long, value_name = "FILE")]
    pub otlp: Option<PathBuf>,
    /// Write the heap profile as an OTLP profiles request in OTLP/JSON.
    #[arg(long, value_name = "FILE")]
    pub otlp_json: Option<PathBuf>,
    /// Push the heap profile over OTLP to URL (a Collector, Pyroscope, …); without URL, to
    /// $OTEL_EXPORTER_OTLP_ENDPOINT (else http://localhost:4318, over gRPC :4317). A push that fails ends mtlab with an error.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    pub otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: grpc, http/protobuf or http/json (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "PROTOCOL", value_parser = parse_protocol, requires = "otlp_endpoint")]
    pub otlp_protocol: Option<Protocol>,
    /// The OTLP resource's service.name (default: $OTEL_SERVICE_NAME, else the program's name).
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
}

impl ProfileOtlpArgs {
    pub fn any(&self) -> bool {
        self.otlp.is_some() || self.otlp_json.is_some() || self.otlp_endpoint.is_some()
    }

    /// The push target, checked before any work.
    pub fn target(&self, signal: Signal) -> Result<Option<Target>, CliError> {
        match &self.otlp_endpoint {
            None => Ok(None),
            Some(flag) => Ok(Some(push::target(flag, self.otlp_protocol, signal, &push::real_env).map_err(otlp::OtlpError::from)?)),
        }
    }

    pub fn outputs(&self) -> [&Option<PathBuf>; 2] {
        [&self.otlp, &self.otlp_json]
    }
}

/// The process a report's export is of (the pick's first), and its heap manager.
fn process_of(run: &RunReport, pick: &crate::report::select::ExportPick) -> (ProcessInfo, Option<String>) {
    let Some(row) = pick.rows.first().and_then(|&i| run.index.get(i)) else { return Default::default() };
    let allocator = run.processes.iter().find(|p| p.file == row.file).map(|p| p.allocator.clone()).filter(|a| !a.is_empty());
    (ProcessInfo { pid: row.pid, exe: row.exe.clone(), args: row.cmdline.clone() }, allocator)
}

/// `report`'s OTLP files of the exported profile, written; the request, for the push.
pub fn report_exports(
    a: &ProfileOtlpArgs,
    run: &RunReport,
    pick: &crate::report::select::ExportPick,
    data: &crate::profile::ProfileData,
) -> Result<ExportProfilesServiceRequest, CliError> {
    let (process, allocator) = process_of(run, pick);
    let mut warnings = Vec::new();
    let resource = otlp::resource::resource(&process, a.service.as_deref(), &push::real_env, &mut warnings);
    for w in warnings {
        say!("mtlab: warning: {w}");
    }
    let mut sym = data.symbolizer();
    let pprof = crate::profile::pprof::to_pprof_profile(data, &mut sym);
    let req = otlp::profiles::request(&pprof, data, resource, allocator.as_deref());
    for (path, json) in [(&a.otlp, false), (&a.otlp_json, true)] {
        if let Some(path) = path {
            otlp::write(&req, path, json)?;
            say!("mtlab: wrote {}", path.display());
        }
    }
    Ok(req)
}

/// `report --otlp-endpoint`: the push, after the report was shown (a
/// receiver that is down loses nothing else).
pub fn report_push(t: &Target, req: &ExportProfilesServiceRequest) -> Result<(), CliError> {
    let accepted = otlp::push_profiles(t, req, Retry::ONCE).map_err(otlp::OtlpError::from)?;
    say!("mtlab: {}", otlp::accepted_message("the profile", t, &accepted));
    Ok(())
}

/// A study run pushed as OTLP metrics, and/or written to files.
pub fn run_exports(run: &crate::study::model::Run, target: Option<&Target>, files: [(&Option<PathBuf>, bool); 2]) -> Result<(), CliError> {
    let mut warnings = Vec::new();
    let req = otlp::metrics::request(run, &push::real_env, &mut warnings);
    for w in warnings {
        say!("mtlab: warning: {w}");
    }
    for (path, json) in files {
        if let Some(path) = path {
            otlp::write(&req, path, json)?;
            say!("mtlab: wrote {}", path.display());
        }
    }
    if let Some(t) = target {
        let accepted = otlp::push_metrics(t, &req, Retry::ONCE).map_err(otlp::OtlpError::from)?;
        say!("mtlab: {}", otlp::accepted_message("the run's metrics", t, &accepted));
    }
    Ok(())
}

/// `--otlp-protocol`: the names OTEL_EXPORTER_OTLP_PROTOCOL takes.
pub fn parse_protocol(s: &str) -> Result<Protocol, String> {
    Protocol::parse(s)
}

/// `--push-every`: a duration as people write it (`60s`, `5m`, `500ms`, `90`
/// for seconds), at least 1 s.
pub fn parse_every(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len()));
    let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 60s, 5m, 500ms)"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("`{s}`: unknown unit `{u}` (use ms, s, m or h)")),
    };
    if !(1.0..=86_400.0).contains(&secs) {
        return Err(format!("`{s}`: give between 1 s and 24 h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_periods() {
        assert_eq!(parse_every("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_every("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_every("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_every("2"), Ok(Duration::from_secs(2)));
        assert!(parse_every("500ms").unwrap_err().contains("between 1 s"));
        assert!(parse_every("5 parsecs").is_err());
    }
}
