//! OTLP/gRPC: the only async code in mtlab. A push over gRPC makes a
//! current-thread tokio runtime on the pushing thread (none exists
//! otherwise), connects tonic's channel and calls opentelemetry-proto's
//! generated client, each try bounded by the target's time-out; the
//! runtime lives as long as the push and its retries.

use std::future::Future;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::push::{Target, TryFailure};

/// A runtime for the tries of one push.
pub(super) struct Session {
    rt: tokio::runtime::Runtime,
}

impl Session {
    pub fn new() -> Result<Session, TryFailure> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TryFailure { again: false, why: format!("cannot start the gRPC client's runtime: {e}") })?;
        Ok(Session { rt })
    }

    /// One try of `ExportProfilesServiceRequest`: (rejected, message).
    pub fn export_profiles(&self, t: &Target, req: &ExportProfilesServiceRequest) -> Result<(i64, String), TryFailure> {
        self.call(t, req, |ch, r| async move {
            let p = ProfilesServiceClient::new(ch).export(r).await?.into_inner().partial_success;
            Ok(p.map(|p| (p.rejected_profiles, p.error_message)).unwrap_or_default())
        })
    }

    /// One try of `ExportMetricsServiceRequest`: (rejected, message).
    pub fn export_metrics(&self, t: &Target, req: &ExportMetricsServiceRequest) -> Result<(i64, String), TryFailure> {
        self.call(t, req, |ch, r| async move {
            let p = MetricsServiceClient::new(ch).export(r).await?.into_inner().partial_success;
            Ok(p.map(|p| (p.rejected_data_points, p.error_message)).unwrap_or_default())
        })
    }

    /// Connects to `t` and makes `rpc` with `req` and `t`'s headers as
    /// metadata, all within `t.timeout`.
    fn call<M: Clone, F, Fut>(&self, t: &Target, req: &M, rpc: F) -> Result<(i64, String), TryFailure>
    where
        F: FnOnce(Channel, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<(i64, String), tonic::Status>>,
    {
        let mut request = tonic::Request::new(req.clone());
        for (k, v) in &t.headers {
            let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes());
            let value = tonic::metadata::MetadataValue::try_from(v.as_str());
            match (key, value) {
                (Ok(k), Ok(v)) => {
                    request.metadata_mut().insert(k, v);
                }
                _ => return Err(TryFailure { again: false, why: format!("header `{k}` cannot be sent as gRPC metadata") }),
            }
        }
        let endpoint = endpoint(t)?;
        self.rt.block_on(async move {
            let work = async move {
                let channel = endpoint.connect().await.map_err(|e| TryFailure { again: true, why: chain(&e) })?;
                rpc(channel, request).await.map_err(|s| status_failure(&s))
            };
            match tokio::time::timeout(t.timeout, work).await {
                Ok(r) => r,
                Err(_) => Err(TryFailure { again: true, why: format!("no answer in {} ms", t.timeout.as_millis()) }),
            }
        })
    }
}

/// The channel's endpoint: `t.url`, with TLS (the webpki roots) for https.
fn endpoint(t: &Target) -> Result<Endpoint, TryFailure> {
    let bad = |e: tonic::transport::Error| TryFailure { again: false, why: format!("`{}` is not a gRPC endpoint: {}", t.url, chain(&e)) };
    let mut e = Endpoint::from_shared(t.url.clone()).map_err(bad)?.timeout(t.timeout).connect_timeout(t.timeout);
    if t.url.starts_with("https://") {
        e = e.tls_config(ClientTlsConfig::new().with_webpki_roots()).map_err(bad)?;
    }
    Ok(e)
}

/// A status as a try's failure: the codes the OTLP specification says to
/// retry are tried again.
fn status_failure(s: &tonic::Status) -> TryFailure {
    use tonic::Code::*;
    let again = matches!(s.code(), Unavailable | Cancelled | DeadlineExceeded | Aborted | OutOfRange | DataLoss | ResourceExhausted);
    let msg = s.message().trim();
    TryFailure { again, why: format!("gRPC status {:?}{}{msg}", s.code(), if msg.is_empty() { "" } else { ": " }) }
}

/// An error and its causes on one line (tonic's own text is only "transport error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !s.contains(&c_text) {
            s.push_str(": ");
            s.push_str(&c_text);
        }
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::push::{self, Protocol, Retry, Signal};

    #[test]
    fn retryable_codes_are_the_specifications() {
        assert!(status_failure(&tonic::Status::unavailable("down")).again);
        assert!(status_failure(&tonic::Status::resource_exhausted("busy")).again);
        let f = status_failure(&tonic::Status::unimplemented("unknown service"));
        assert!(!f.again);
        assert_eq!(f.why, "gRPC status Unimplemented: unknown service");
        assert!(!status_failure(&tonic::Status::invalid_argument("bad")).again);
    }

    #[test]
    fn a_closed_port_is_tried_again_then_fails_with_what_to_do() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = push::target(&format!("http://127.0.0.1:{port}"), Some(Protocol::Grpc), Signal::Metrics, &|_| None).unwrap();
        let session = Session::new().ok().unwrap();
        let req = ExportMetricsServiceRequest::default();
        let e = push::retrying(&t, Retry { tries: 2, first_wait: std::time::Duration::from_millis(10) }, || session.export_metrics(&t, &req)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("(2 tries)") && msg.contains("gRPC port 4317") && msg.contains("onnect"), "{msg}");
    }
}
