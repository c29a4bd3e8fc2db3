//! Sending an OTLP request over HTTP (OTLP/HTTP, protobuf or JSON), where
//! the OTLP exporters' variables say: the endpoint (`--otlp-endpoint URL`,
//! else `OTEL_EXPORTER_OTLP_{PROFILES,METRICS}_ENDPOINT` as is, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT` + the signal's path, else
//! `http://localhost:4318` + the path), the protocol
//! (`OTEL_EXPORTER_OTLP[_SIGNAL]_PROTOCOL`: `http/protobuf`, the default, or
//! `http/json`; `grpc` is refused with what to do), the headers
//! (`OTEL_EXPORTER_OTLP[_SIGNAL]_HEADERS`) and the timeout
//! (`OTEL_EXPORTER_OTLP[_SIGNAL]_TIMEOUT`, ms). A refused connection, a
//! time-out, 429, 502, 503 and 504 are tried again with doubling waits;
//! any other answer is final.

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Where and how to send one signal.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub encoding: Encoding,
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
/// environment) and the exporters' variables, read through `env`.
pub fn target(flag: &str, signal: Signal, env: &dyn Fn(&str) -> Option<String>) -> Result<Target, PushError> {
    let var = |name: &str| {
        env(&format!("OTEL_EXPORTER_OTLP_{}_{name}", signal.env())).or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{name}"))).filter(|v| !v.trim().is_empty())
    };
    let with_path = |base: &str| format!("{}{}", base.trim_end_matches('/'), signal.path());
    let url = if !flag.is_empty() {
        // A bare address gets the signal's path; a URL with a path is taken as is.
        let rest = flag.split_once("://").map_or("", |(_, r)| r);
        if rest.split_once('/').is_none_or(|(_, p)| p.is_empty()) { with_path(flag) } else { flag.to_string() }
    } else if let Some(u) = env(&format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.env())).filter(|v| !v.is_empty()) {
        u
    } else if let Some(u) = env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()) {
        with_path(&u)
    } else {
        with_path("http://localhost:4318")
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(PushError::Config(format!("OTLP endpoint `{url}`: give an http:// or https:// URL, e.g. http://localhost:4318")));
    }
    let encoding = match var("PROTOCOL").as_deref().map(str::trim) {
        None | Some("http/protobuf") => Encoding::Protobuf,
        Some("http/json") => Encoding::Json,
        Some("grpc") => {
            return Err(PushError::Config(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: mtlab sends OTLP over HTTP only (http/protobuf or http/json); \
                 point it at the receiver's HTTP port (the Collector's otlp receiver: 4318) and unset the variable or set it to http/protobuf"
                    .into(),
            ))
        }
        Some(p) => return Err(PushError::Config(format!("OTEL_EXPORTER_OTLP_PROTOCOL={p}: mtlab knows http/protobuf and http/json"))),
    };
    let headers = match var("HEADERS") {
        None => Vec::new(),
        Some(h) => super::resource::parse_resource_attributes(&h).map_err(|e| PushError::Config(e.replace("OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_HEADERS")))?,
    };
    let timeout = match var("TIMEOUT") {
        None => Duration::from_secs(10),
        Some(t) => Duration::from_millis(t.trim().parse().map_err(|_| PushError::Config(format!("OTEL_EXPORTER_OTLP_TIMEOUT={t}: give milliseconds, e.g. 10000")))?),
    };
    Ok(Target { url, encoding, headers, timeout, signal })
}

/// The real environment, for [`target`].
pub fn real_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// One try's failure: whether to try again, and what to say.
struct TryFailure {
    again: bool,
    why: String,
}

fn try_once(t: &Target, body: &[u8]) -> Result<Vec<u8>, TryFailure> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(t.timeout)).http_status_as_error(false).build().into();
    let content_type = match t.encoding {
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

/// Sends `body` (already encoded as `t.encoding`) with `retry`; `decode`
/// reads the receiver's answer into (rejected, message).
pub fn send(t: &Target, body: &[u8], retry: Retry, decode: impl Fn(&[u8], Encoding) -> (i64, String)) -> Result<Accepted, PushError> {
    let mut wait = retry.first_wait;
    let mut tries = 0;
    loop {
        tries += 1;
        match try_once(t, body) {
            Ok(answer) => {
                let (rejected, message) = decode(&answer, t.encoding);
                return Ok(Accepted { rejected, message, tries });
            }
            Err(f) if f.again && tries < retry.tries => {
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2);
            }
            Err(f) => {
                let hint = if f.why.contains("HTTP 404") {
                    format!("is the receiver's {} signal enabled? The OpenTelemetry Collector needs --feature-gates=+service.profilesSupport and a profiles pipeline", t.signal.what())
                } else if f.again {
                    "is an OTLP receiver (e.g. an OpenTelemetry Collector's otlp receiver, HTTP port 4318) listening there?".to_string()
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

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn endpoint_from_flag_and_variables() {
        let none = env_of(&[]);
        assert_eq!(target("", Signal::Profiles, &none).unwrap().url, "http://localhost:4318/v1development/profiles");
        assert_eq!(target("http://h:4318", Signal::Profiles, &none).unwrap().url, "http://h:4318/v1development/profiles");
        assert_eq!(target("http://h:4318/", Signal::Metrics, &none).unwrap().url, "http://h:4318/v1/metrics");
        assert_eq!(target("http://h/custom/path", Signal::Metrics, &none).unwrap().url, "http://h/custom/path");
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://col:4318/"), ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m/x")]);
        assert_eq!(target("", Signal::Profiles, &env).unwrap().url, "https://col:4318/v1development/profiles");
        assert_eq!(target("", Signal::Metrics, &env).unwrap().url, "http://m/x");
        // The flag wins over the variables.
        assert_eq!(target("http://f:1", Signal::Metrics, &env).unwrap().url, "http://f:1/v1/metrics");

        let t = target("", Signal::Profiles, &env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic%20abc"), ("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "2500")])).unwrap();
        assert_eq!(t.encoding, Encoding::Json);
        assert_eq!(t.headers, vec![("authorization".to_string(), "Basic abc".to_string())]);
        assert_eq!(t.timeout, Duration::from_millis(2500));

        let e = target("", Signal::Profiles, &env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).unwrap_err().to_string();
        assert!(e.contains("HTTP only") && e.contains("4318"), "{e}");
        let e = target("localhost:4317", Signal::Profiles, &none).unwrap_err().to_string();
        assert!(e.contains("http:// or https://"), "{e}");
    }

    #[test]
    fn a_closed_port_fails_after_the_tries_with_what_to_do() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = target(&format!("http://127.0.0.1:{port}"), Signal::Profiles, &env_of(&[])).unwrap();
        let started = std::time::Instant::now();
        let e = send(&t, b"x", Retry { tries: 3, first_wait: Duration::from_millis(50) }, |_, _| (0, String::new())).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PushError::Failed { tries: 3, .. }), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{port}")) && msg.contains("listening there"), "{msg}");
        // Waited 50 + 100 ms between the tries.
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
    }
}
