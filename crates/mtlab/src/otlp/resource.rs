//! The OTLP resource of an export: the traced process (`service.name`,
//! `host.name`, `process.pid`, `process.executable.name`,
//! `process.command_args`) with what `OTEL_RESOURCE_ATTRIBUTES` and
//! `OTEL_SERVICE_NAME` add, as the OpenTelemetry SDKs take them: detected
//! values first, the variables over them, `--service` over everything.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::profiles::kv_str;

/// What mtlab knows of the process a profile is of.
#[derive(Debug, Clone, Default)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Its executable's path.
    pub exe: String,
    pub args: Vec<String>,
}

impl ProcessInfo {
    /// The program's name: the executable's base name, else the first argument's.
    pub fn program_name(&self) -> String {
        let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
        if !self.exe.is_empty() {
            base(&self.exe)
        } else {
            self.args.first().map(|a| base(a)).unwrap_or_else(|| "unknown_service".into())
        }
    }
}

/// This machine's name (`host.name`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// `%XX` escapes decoded (W3C Baggage octets, as `OTEL_RESOURCE_ATTRIBUTES` uses them).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `key1=value1,key2=value2` pairs; a malformed list is ignored whole (the
/// SDKs' rule), and said so in the error.
pub fn parse_resource_attributes(spec: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!("OTEL_RESOURCE_ATTRIBUTES: `{part}` is not key=value; the variable is ignored"));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("OTEL_RESOURCE_ATTRIBUTES: `{part}` has no key; the variable is ignored"));
        }
        out.push((percent_decode(k), percent_decode(v.trim())));
    }
    Ok(out)
}

/// The resource: the process's attributes, the environment's over them
/// (`env` reads a variable: the real environment, or a test's), `service`
/// over all. A malformed `OTEL_RESOURCE_ATTRIBUTES` is reported in `warnings`.
pub fn resource(p: &ProcessInfo, service: Option<&str>, env: &dyn Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> Resource {
    let mut attrs: Vec<KeyValue> = vec![
        kv_str("service.name", &p.program_name()),
        kv_str("host.name", &host_name()),
        KeyValue { key: "process.pid".into(), value: Some(AnyValue { value: Some(any_value::Value::IntValue(i64::from(p.pid))) }), ..Default::default() },
        kv_str("process.executable.name", &p.program_name()),
        KeyValue {
            key: "process.command_args".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: p.args.iter().map(|a| AnyValue { value: Some(any_value::Value::StringValue(a.clone())) }).collect(),
                })),
            }),
            ..Default::default()
        },
    ];
    if !p.exe.is_empty() {
        attrs.push(kv_str("process.executable.path", &p.exe));
    }
    overlay(attrs, service, env, warnings)
}

/// `detected` with `OTEL_RESOURCE_ATTRIBUTES`, then `OTEL_SERVICE_NAME`,
/// then `service` over it, as a resource.
pub fn overlay(mut attrs: Vec<KeyValue>, service: Option<&str>, env: &dyn Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> Resource {
    let set = |attrs: &mut Vec<KeyValue>, k: &str, v: &str| match attrs.iter_mut().find(|a| a.key == k) {
        Some(a) => *a = kv_str(k, v),
        None => attrs.push(kv_str(k, v)),
    };
    if let Some(spec) = env("OTEL_RESOURCE_ATTRIBUTES") {
        match parse_resource_attributes(&spec) {
            Ok(pairs) => pairs.iter().for_each(|(k, v)| set(&mut attrs, k, v)),
            Err(e) => warnings.push(e),
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|s| !s.is_empty()) {
        set(&mut attrs, "service.name", &name);
    }
    if let Some(name) = service {
        set(&mut attrs, "service.name", name);
    }
    Resource { attributes: attrs, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(r: &'a Resource, k: &str) -> Option<&'a any_value::Value> {
        r.attributes.iter().find(|a| a.key == k).and_then(|a| a.value.as_ref()).and_then(|v| v.value.as_ref())
    }

    fn s(v: &str) -> any_value::Value {
        any_value::Value::StringValue(v.into())
    }

    #[test]
    fn detected_then_environment_then_flag() {
        let p = ProcessInfo { pid: 42, exe: "/usr/bin/python3.11".into(), args: vec!["python3".into(), "-c".into(), "pass".into()] };
        let none = |_: &str| None;
        let mut w = Vec::new();
        let r = resource(&p, None, &none, &mut w);
        assert_eq!(get(&r, "service.name"), Some(&s("python3.11")));
        assert_eq!(get(&r, "process.pid"), Some(&any_value::Value::IntValue(42)));
        assert_eq!(get(&r, "process.executable.name"), Some(&s("python3.11")));
        let Some(any_value::Value::ArrayValue(args)) = get(&r, "process.command_args") else { panic!() };
        assert_eq!(args.values.len(), 3);
        assert_eq!(get(&r, "host.name"), Some(&s(&host_name())));

        let env = |k: &str| match k {
            "OTEL_RESOURCE_ATTRIBUTES" => Some("deployment.environment=lab, team=heap%20people,service.name=from-attrs".to_string()),
            _ => None,
        };
        let r = resource(&p, None, &env, &mut w);
        assert_eq!(get(&r, "service.name"), Some(&s("from-attrs")));
        assert_eq!(get(&r, "team"), Some(&s("heap people")));
        assert_eq!(get(&r, "deployment.environment"), Some(&s("lab")));
        let env2 = |k: &str| match k {
            "OTEL_SERVICE_NAME" => Some("svc".to_string()),
            k => env(k),
        };
        assert_eq!(get(&resource(&p, None, &env2, &mut w), "service.name"), Some(&s("svc")));
        assert_eq!(get(&resource(&p, Some("flag"), &env2, &mut w), "service.name"), Some(&s("flag")));
        assert!(w.is_empty(), "{w:?}");

        let bad = |k: &str| (k == "OTEL_RESOURCE_ATTRIBUTES").then(|| "a=1,oops".to_string());
        let r = resource(&p, None, &bad, &mut w);
        assert_eq!(get(&r, "a"), None, "a malformed list is ignored whole");
        assert!(w[0].contains("`oops` is not key=value"), "{w:?}");
    }

    #[test]
    fn percent_escapes() {
        assert_eq!(percent_decode("a%2Cb%3D"), "a,b=");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
