//! OpenTelemetry (OTLP) exports: heap profiles as the `profiles/v1development`
//! signal, study results as metrics; written to a file or pushed over
//! OTLP/HTTP or OTLP/gRPC to a Collector or a backend that speaks OTLP
//! (Pyroscope, Parca, …). The messages are `opentelemetry-proto`'s (proto v1.10.0, what the
//! OpenTelemetry Collector v0.161.0 decodes).
//!
//! - `profiles.rs`: a pprof profile (`profile::pprof`) as an OTLP request.
//! - `resource.rs`: the process as OTLP resource attributes, with
//!   `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`.
//! - `metrics.rs`: a study run (`study::model::Run`) as OTLP metrics.
//! - `push.rs`: the endpoint, protocol, headers and time-out from the flags
//!   and the exporters' variables; the HTTP request and the retries.
//! - `grpc.rs`: the gRPC request (tonic, on a runtime made for the push).
//! - `periodic.rs`: the pushes of a running `record --sample --push-every`:
//!   each window's profile, on a thread of their own, retried, then dropped
//!   and counted; the program is never waited on.

mod grpc;
pub mod metrics;
pub mod periodic;
pub mod profiles;
pub mod push;
pub mod resource;

use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::profiles::v1development::{ExportProfilesServiceRequest, ExportProfilesServiceResponse};
use prost::Message;

pub use push::{Accepted, Protocol, PushError, Retry, Signal, Target};
pub use resource::ProcessInfo;

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Push(#[from] PushError),
}

/// A request as the chosen encoding: protobuf, or OTLP/JSON.
pub fn encode<M: Message + serde::Serialize>(req: &M, encoding: push::Encoding) -> Vec<u8> {
    match encoding {
        push::Encoding::Protobuf => req.encode_to_vec(),
        // The messages are plain data: serializing them cannot fail.
        push::Encoding::Json => {
            let mut v = serde_json::to_value(req).unwrap_or_default();
            bytes_as_base64(&mut v);
            serde_json::to_vec(&v).unwrap_or_default()
        }
    }
}

/// OTLP/JSON writes a `bytes` field as base64, and trace and span ids as
/// hex; opentelemetry-proto's serde writes `Profile.original_payload` and a
/// profile `Link`'s ids as arrays of numbers, which the Collector refuses.
/// (`Profile.profile_id` it writes as hex already.)
fn bytes_as_base64(v: &mut serde_json::Value) {
    use base64::Engine;
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                let bytes = || -> Vec<u8> { x.as_array().map(|a| a.iter().filter_map(|b| b.as_u64()).map(|b| b as u8).collect()).unwrap_or_default() };
                if x.is_array() && k == "originalPayload" {
                    *x = serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes()));
                } else if x.is_array() && (k == "traceId" || k == "spanId") {
                    *x = serde_json::Value::String(bytes().iter().map(|b| format!("{b:02x}")).collect());
                } else {
                    bytes_as_base64(x);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(bytes_as_base64),
        _ => {}
    }
}

/// Writes `req` to `path` (protobuf, or OTLP/JSON with `json`), private as
/// the trace it comes from: its addresses undo ASLR.
pub fn write<M: Message + serde::Serialize>(req: &M, path: &Path, json: bool) -> Result<(), OtlpError> {
    let bytes = encode(req, if json { push::Encoding::Json } else { push::Encoding::Protobuf });
    crate::platform::safe_fs::write_replacing(path, &bytes, 0o600).map_err(|source| OtlpError::Write { path: path.to_path_buf(), source })
}

/// A receiver's answer: (rejected, its message), from a protobuf or JSON
/// body; an empty or unreadable body is a full success (the spec allows it).
fn answer<R: Message + Default + serde::de::DeserializeOwned>(body: &[u8], encoding: push::Encoding, parts: impl Fn(R) -> (i64, String)) -> (i64, String) {
    let r = match encoding {
        push::Encoding::Protobuf => R::decode(body).ok(),
        push::Encoding::Json => serde_json::from_slice(body).ok(),
    };
    r.map(parts).unwrap_or_default()
}

/// Pushes a profiles request to `t`.
pub fn push_profiles(t: &Target, req: &ExportProfilesServiceRequest, retry: Retry) -> Result<Accepted, PushError> {
    match t.protocol {
        push::Protocol::Grpc => over_grpc(t, retry, |s| s.export_profiles(t, req)),
        push::Protocol::Http(e) => push::send(t, e, &encode(req, e), retry, |b, e| {
            answer(b, e, |r: ExportProfilesServiceResponse| r.partial_success.map(|p| (p.rejected_profiles, p.error_message)).unwrap_or_default())
        }),
    }
}

/// Pushes a metrics request to `t`.
pub fn push_metrics(t: &Target, req: &ExportMetricsServiceRequest, retry: Retry) -> Result<Accepted, PushError> {
    match t.protocol {
        push::Protocol::Grpc => over_grpc(t, retry, |s| s.export_metrics(t, req)),
        push::Protocol::Http(e) => push::send(t, e, &encode(req, e), retry, |b, e| {
            answer(b, e, |r: ExportMetricsServiceResponse| r.partial_success.map(|p| (p.rejected_data_points, p.error_message)).unwrap_or_default())
        }),
    }
}

/// The tries of one gRPC push, on one runtime.
fn over_grpc(t: &Target, retry: Retry, once: impl Fn(&grpc::Session) -> Result<(i64, String), push::TryFailure>) -> Result<Accepted, PushError> {
    let session = grpc::Session::new();
    push::retrying(t, retry, || match &session {
        Ok(s) => once(s),
        Err(f) => Err(push::TryFailure { again: false, why: f.why.clone() }),
    })
}

/// The sentence `report` and `runs export` print after a push.
pub fn accepted_message(what: &str, t: &Target, a: &Accepted) -> String {
    let mut s = format!("pushed {what} to {}", t.url);
    if a.tries > 1 {
        s.push_str(&format!(" (after {} tries)", a.tries));
    }
    if a.rejected > 0 || !a.message.is_empty() {
        s.push_str(&format!("; the receiver rejected {} of it: {}", a.rejected, a.message));
    }
    s
}
