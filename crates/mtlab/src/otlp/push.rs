//! Sending an OTLP request where the OTLP exporters' settings say: over
//! OTLP/HTTP (protobuf or JSON) here, over OTLP/gRPC through `grpc.rs`.
//!
//! - Protocol: `--otlp-protocol`, else `OTEL_EXPORTER_OTLP[_SIGNAL]_PROTOCOL`
//!   (`grpc`, `http/protobuf`, `http/json`), else `http/protobuf`, the
//!   default the OpenTelemetry specification gives the variable.
//! - Endpoint over HTTP: `--otlp-endpoint URL` (a bare address gets the
//!   signal's path), else `OTEL_EXPORTER_OTLP_{PROFILES,METRICS}_ENDPOINT` as
//!   is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + the signal's path, else
//!   `http://localhost:4318` + the path. Over gRPC the same order without
//!   paths (the service names the method), default `http://localhost:4317`.
//! - Headers (`…_HEADERS`, gRPC metadata over gRPC) and time-out
//!   (`…_TIMEOUT`, ms) from the same variables.
//!
//! A refused connection, a time-out, HTTP 429/502/503/504 and the gRPC
//! codes the OTLP specification calls retryable are tried again with
//! doubling waits; any other answer is final.

use std::time::Duration;

/// Which OTLP signal a request carries: its path and its variables' infix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Profiles,
    Metrics,
}

impl Signal {
    fn path(self) -> &'static str {
        match self {
            // The Collector's otlpreceiver serves the development signal here.
            Signal::Profiles => "/v1development/profiles",
            Signal::Metrics => "/v1/metrics",
        }
    }
    fn env(self) -> &'static str {
        match self {
            Signal::Profiles => "PROFILES",
            Signal::Metrics => "METRICS",
        }
    }
    fn what(self) -> &'static str {
        match self {
            Signal::Profiles => "profile",
            Signal::Metrics => "metrics",
        }
    }
}

/// How a request is written: in a file, or in an OTLP/HTTP body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// How a request travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Http(Encoding),
}

impl Protocol {
    /// The exporters' names: `grpc`, `http/protobuf`, `http/json`.
    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::Http(Encoding::Protobuf)),
            "http/json" => Ok(Protocol::Http(Encoding::Json)),
            p => Err(format!("`{p}`: give grpc, http/protobuf or http/json (as OTEL_EXPORTER_OTLP_PROTOCOL takes them)")),
        }
    }

    /// The receiver port OTLP uses for it (the Collector's otlp receiver).
    fn port(self) -> u16 {
        match self {
            Protocol::Grpc => 4317,
            Protocol::Http(_) => 4318,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "gRPC",
            Protocol::Http(_) => "HTTP",
        }
    }
}

/// Where and how to send one signal.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub signal: Signal,
}

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Config(String),
    /// Every try failed; the last failure.
    #[error("cannot push the {what} to {url}: {why} ({tries} tr{ies}); {hint}", ies = if *tries == 1 { "y" } else { "ies" })]
    Failed { what: &'static str, url: String, why: String, tries: u32, hint: String },
}

/// How often, and after how long, a failed push is tried again.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub tries: u32,
    pub first_wait: Duration,
}

impl Retry {
    /// `report` and `runs export`: three tries over about 1.5 s.
    pub const ONCE: Retry = Retry { tries: 3, first_wait: Duration::from_millis(500) };
}

/// What the receiver answered to a request it took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Accepted {
    /// Its `partial_success`: what it rejected and why (0 and empty: all taken).
    pub rejected: i64,
    pub message: String,
    pub tries: u32,
}

/// The target of `signal`: `flag` (`--otlp-endpoint URL`; empty: from the
/// environment), `protocol` (`--otlp-protocol`; None: from the environment)
/// and the exporters' variables, read through `env`.
pub fn target(flag: &str, protocol: Option<Protocol>, signal: Signal, env: &dyn Fn(&str) -> Option<String>) -> Result<Target, PushError> {
    let var = |name: &str| {
        env(&format!("OTEL_EXPORTER_OTLP_{}_{name}", signal.env())).or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{name}"))).filter(|v| !v.trim().is_empty())
    };
    let protocol = match protocol {
        Some(p) => p,
        None => match var("PROTOCOL") {
            None => Protocol::Http(Encoding::Protobuf),
            Some(p) => Protocol::parse(&p).map_err(|e| PushError::Config(format!("OTEL_EXPORTER_OTLP_PROTOCOL={}", e.trim_start_matches('`').replacen('`', "", 1))))?,
        },
    };
    let grpc = protocol == Protocol::Grpc;
    // Over HTTP a base address gets the signal's path; gRPC has none.
    let with_path = |base: &str| if grpc { base.trim_end_matches('/').to_string() } else { format!("{}{}", base.trim_end_matches('/'), signal.path()) };
    let path_of = |u: &str| u.split_once("://").map_or("", |(_, r)| r).split_once('/').map_or("", |(_, p)| p).to_string();
    let url = if !flag.is_empty() {
        // A bare address gets the signal's path; a URL with a path is taken as is.
        if path_of(flag).is_empty() { with_path(flag) } else { flag.to_string() }
    } else if let Some(u) = env(&format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.env())).filter(|v| !v.is_empty()) {
        if grpc { with_path(&u) } else { u }
    } else if let Some(u) = env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()) {
        with_path(&u)
    } else {
        with_path(&format!("http://localhost:{}", protocol.port()))
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(PushError::Config(format!("OTLP endpoint `{url}`: give an http:// or https:// URL, e.g. http://localhost:{}", protocol.port())));
    }
    if grpc && !path_of(&url).is_empty() {
        return Err(PushError::Config(format!(
            "OTLP endpoint `{url}`: a gRPC endpoint has no path (the service names the method): give scheme://host:port, e.g. http://localhost:4317, \
             or push over HTTP (--otlp-protocol http/protobuf)"
        )));
    }
    let headers = match var("HEADERS") {
        None => Vec::new(),
        Some(h) => super::resource::parse_resource_attributes(&h).map_err(|e| PushError::Config(e.replace("OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_HEADERS")))?,
    };
    let timeout = match var("TIMEOUT") {
        None => Duration::from_secs(10),
        Some(t) => Duration::from_millis(t.trim().parse().map_err(|_| PushError::Config(format!("OTEL_EXPORTER_OTLP_TIMEOUT={t}: give milliseconds, e.g. 10000")))?),
    };
    Ok(Target { url, protocol, headers, timeout, signal })
}

/// The real environment, for [`target`].
pub fn real_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// One try's failure: whether to try again, and what to say.
pub(super) struct TryFailure {
    pub again: bool,
    pub why: String,
}

/// One OTLP/HTTP try: the receiver's answer body.
fn try_http(t: &Target, encoding: Encoding, body: &[u8]) -> Result<Vec<u8>, TryFailure> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(t.timeout)).http_status_as_error(false).build().into();
    let content_type = match encoding {
        Encoding::Protobuf => "application/x-protobuf",
        Encoding::Json => "application/json",
    };
    let mut req = agent.post(&t.url).header("Content-Type", content_type);
    for (k, v) in &t.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let mut resp = req.send(body).map_err(|e| {
        let again = matches!(e, ureq::Error::Io(_) | ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound);
        TryFailure { again, why: e.to_string() }
    })?;
    let status = resp.status().as_u16();
    let answer = resp.body_mut().read_to_vec().unwrap_or_default();
    if (200..300).contains(&status) {
        return Ok(answer);
    }
    let text = String::from_utf8_lossy(&answer[..answer.len().min(300)]).trim().to_string();
    Err(TryFailure { again: matches!(status, 429 | 502 | 503 | 504), why: format!("HTTP {status}{}{text}", if text.is_empty() { "" } else { ": " }) })
}

/// Sends `body` (already encoded as `encoding`) over OTLP/HTTP with `retry`;
/// `decode` reads the receiver's answer into (rejected, message).
pub fn send(t: &Target, encoding: Encoding, body: &[u8], retry: Retry, decode: impl Fn(&[u8], Encoding) -> (i64, String)) -> Result<Accepted, PushError> {
    retrying(t, retry, || try_http(t, encoding, body).map(|answer| decode(&answer, encoding)))
}

/// Makes `once` (one try: the receiver's (rejected, message)) up to
/// `retry.tries` times, waiting longer each time, while its failure is one
/// to try again.
pub(super) fn retrying(t: &Target, retry: Retry, mut once: impl FnMut() -> Result<(i64, String), TryFailure>) -> Result<Accepted, PushError> {
    let mut wait = retry.first_wait;
    let mut tries = 0;
    loop {
        tries += 1;
        match once() {
            Ok((rejected, message)) => return Ok(Accepted { rejected, message, tries }),
            Err(f) if f.again && tries < retry.tries => {
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2);
            }
            Err(f) => {
                let hint = if f.why.contains("HTTP 404") || f.why.contains("Unimplemented") {
                    format!("is the receiver's {} signal enabled? The OpenTelemetry Collector needs --feature-gates=+service.profilesSupport and a profiles pipeline", t.signal.what())
                } else if f.again {
                    format!(
                        "is an OTLP receiver (e.g. an OpenTelemetry Collector's otlp receiver, {} port {}) listening there?",
                        t.protocol.name(),
                        t.protocol.port()
                    )
                } else {
                    "the receiver refused it".to_string()
                };
                return Err(PushError::Failed { what: t.signal.what(), url: t.url.clone(), why: f.why, tries, hint });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target_(flag: &str, signal: Signal, env: &dyn Fn(&str) -> Option<String>) -> Result<Target, PushError> {
        target(flag, None, signal, env)
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn endpoint_from_flag_and_variables() {
        let none = env_of(&[]);
        assert_eq!(target_("", Signal::Profiles, &none).unwrap().url, "http://localhost:4318/v1development/profiles");
        assert_eq!(target_("http://h:4318", Signal::Profiles, &none).unwrap().url, "http://h:4318/v1development/profiles");
        assert_eq!(target_("http://h:4318/", Signal::Metrics, &none).unwrap().url, "http://h:4318/v1/metrics");
        assert_eq!(target_("http://h/custom/path", Signal::Metrics, &none).unwrap().url, "http://h/custom/path");
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://col:4318/"), ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m/x")]);
        assert_eq!(target_("", Signal::Profiles, &env).unwrap().url, "https://col:4318/v1development/profiles");
        assert_eq!(target_("", Signal::Metrics, &env).unwrap().url, "http://m/x");
        // The flag wins over the variables.
        assert_eq!(target_("http://f:1", Signal::Metrics, &env).unwrap().url, "http://f:1/v1/metrics");

        let t = target_("", Signal::Profiles, &env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic%20abc"), ("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "2500")])).unwrap();
        assert_eq!(t.protocol, Protocol::Http(Encoding::Json));
        assert_eq!(t.headers, vec![("authorization".to_string(), "Basic abc".to_string())]);
        assert_eq!(t.timeout, Duration::from_millis(2500));

        let e = target_("", Signal::Profiles, &env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")])).unwrap_err().to_string();
        assert!(e.contains("OTEL_EXPORTER_OTLP_PROTOCOL=thrift") && e.contains("grpc, http/protobuf or http/json"), "{e}");
        let e = target_("localhost:4317", Signal::Profiles, &none).unwrap_err().to_string();
        assert!(e.contains("http:// or https://"), "{e}");
    }

    #[test]
    fn grpc_endpoints_have_no_path_and_default_to_4317() {
        let none = env_of(&[]);
        let grpc = |flag: &str, env: &dyn Fn(&str) -> Option<String>| target(flag, Some(Protocol::Grpc), Signal::Profiles, env);
        assert_eq!(grpc("", &none).unwrap().url, "http://localhost:4317");
        assert_eq!(grpc("http://h:4317/", &none).unwrap().url, "http://h:4317");
        let e = grpc("http://h:4318/v1development/profiles", &none).unwrap_err().to_string();
        assert!(e.contains("has no path") && e.contains("--otlp-protocol http/protobuf"), "{e}");
        // The variables: the generic endpoint and the signal's are both used as they are.
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://col:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        let t = target_("", Signal::Metrics, &env).unwrap();
        assert_eq!((t.url.as_str(), t.protocol), ("https://col:4317", Protocol::Grpc));
        let env = env_of(&[("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://p:9"), ("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "grpc")]);
        assert_eq!(target_("", Signal::Profiles, &env).unwrap().url, "http://p:9");
        assert_eq!(target_("", Signal::Metrics, &env).unwrap().protocol, Protocol::Http(Encoding::Protobuf), "the profiles' variable only");
        // The flag wins over the variable.
        let env = env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert_eq!(target("http://h:4317", Some(Protocol::Grpc), Signal::Metrics, &env).unwrap().protocol, Protocol::Grpc);
        assert_eq!(Protocol::parse("http/protobuf"), Ok(Protocol::Http(Encoding::Protobuf)));
    }

    #[test]
    fn a_closed_port_fails_after_the_tries_with_what_to_do() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = target_(&format!("http://127.0.0.1:{port}"), Signal::Profiles, &env_of(&[])).unwrap();
        let started = std::time::Instant::now();
        let e = send(&t, Encoding::Protobuf, b"x", Retry { tries: 3, first_wait: Duration::from_millis(50) }, |_, _| (0, String::new())).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PushError::Failed { tries: 3, .. }), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{port}")) && msg.contains("listening there") && msg.contains("HTTP port 4318"), "{msg}");
        // Waited 50 + 100 ms between the tries.
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
    }
}
