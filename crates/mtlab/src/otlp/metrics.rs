//! A study run as OTLP metrics: one gauge per measured metric
//! (`mtlab.STUDY.METRIC`, in the metric's unit), one data point per
//! configuration and repetition, so a backend keeps every value the run
//! measured and can compare machines on any of them.
//!
//! * data point attributes: `configuration` (its name), each of its
//!   parameters by its own name (`allocator`, `cpus`, `interval`, …),
//!   `repetition` (0, 1, …), `run.id` when the run is stored;
//! * resource: `service.name` `mtlab`, `service.version`, `host.name`,
//!   `os.type`, `os.version` (the kernel release), `host.cpu.model.name`,
//!   and the run's environment as `mtlab.*` (`mtlab.kernel_build`,
//!   `mtlab.preemption`, `mtlab.cpus_online`, `mtlab.smt`, `mtlab.cpu_set`,
//!   `mtlab.governor`, `mtlab.libc`, `mtlab.virtualized`, and each
//!   software version as `mtlab.software.NAME`), then
//!   `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` over them;
//! * every point's time is the run's end (`started` + `duration_s`), its
//!   start time the run's start.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics};

use super::profiles::{kv_str, scope};
use crate::study::model::Run;

fn kv_int(key: &str, v: i64) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(any_value::Value::IntValue(v)) }), ..Default::default() }
}

fn kv_bool(key: &str, v: bool) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(any_value::Value::BoolValue(v)) }), ..Default::default() }
}

/// A unit as UCUM, as OTLP asks: bytes `By`, time units as they are, any
/// other count in braces (`{cycles}`).
pub fn ucum(unit: &str) -> String {
    match unit {
        "bytes" | "B" => "By".into(),
        "s" | "ms" | "us" | "ns" | "%" | "1" => unit.into(),
        "" => "1".into(),
        u => format!("{{{u}}}"),
    }
}

/// The run's environment as resource attributes (before the variables).
fn environment(run: &Run) -> Vec<KeyValue> {
    let e = &run.environment;
    let mut a = vec![
        kv_str("service.name", "mtlab"),
        kv_str("service.version", &run.mtlab_version),
        kv_str("host.name", &e.host),
        kv_str("os.type", "linux"),
        kv_str("os.version", &e.kernel),
        kv_str("mtlab.kernel_build", &e.kernel_version),
        kv_int("mtlab.cpus_online", i64::from(e.cpus_online)),
        kv_str("mtlab.cpu_set", &e.cpu_set),
        kv_str("mtlab.libc", &e.libc),
    ];
    if let Some(m) = &e.cpu_model {
        a.push(kv_str("host.cpu.model.name", m));
    }
    if let Some(p) = &e.preemption {
        a.push(kv_str("mtlab.preemption", p));
    }
    if let Some(s) = e.smt {
        a.push(kv_bool("mtlab.smt", s));
    }
    if let Some(g) = &e.governor {
        a.push(kv_str("mtlab.governor", g));
    }
    if let Some(v) = e.virtualized {
        a.push(kv_bool("mtlab.virtualized", v));
    }
    for (name, version) in &e.software {
        a.push(kv_str(&format!("mtlab.software.{name}"), version));
    }
    a
}

/// The OTLP metrics request of `run`; a malformed `OTEL_RESOURCE_ATTRIBUTES`
/// is said in `warnings`.
pub fn request(run: &Run, env: &dyn Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> ExportMetricsServiceRequest {
    let start_s = crate::study::env::parse_rfc3339(&run.started).unwrap_or(0).max(0) as u64;
    let start_ns = start_s.saturating_mul(1_000_000_000);
    let end_ns = start_ns.saturating_add((run.duration_s.max(0.0) * 1e9) as u64);
    let mut metrics: Vec<Metric> = Vec::new();
    for m in &run.measurements {
        let name = format!("mtlab.{}.{}", run.study, m.metric);
        let config = run.configurations.iter().find(|c| c.name == m.configuration);
        let points = m.values.iter().enumerate().map(|(rep, &v)| {
            let mut attributes = vec![kv_str("configuration", &m.configuration)];
            if let Some(c) = config {
                attributes.extend(c.params.iter().map(|(k, v)| kv_str(k, v)));
            }
            attributes.push(kv_int("repetition", rep as i64));
            if let Some(id) = run.id {
                attributes.push(kv_int("run.id", id));
            }
            NumberDataPoint {
                attributes,
                start_time_unix_nano: start_ns,
                time_unix_nano: end_ns,
                value: Some(number_data_point::Value::AsDouble(v)),
                ..Default::default()
            }
        });
        match metrics.iter_mut().find(|x| x.name == name) {
            Some(Metric { data: Some(metric::Data::Gauge(g)), .. }) => g.data_points.extend(points),
            _ => metrics.push(Metric {
                name,
                description: format!("{} ({} is better)", run.title, if m.lower_is_better { "lower" } else { "higher" }),
                unit: ucum(&m.unit),
                data: Some(metric::Data::Gauge(Gauge { data_points: points.collect() })),
                ..Default::default()
            }),
        }
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(super::resource::overlay(environment(run), None, env, warnings)),
            scope_metrics: vec![ScopeMetrics { scope: Some(scope()), metrics, schema_url: String::new() }],
            schema_url: String::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::model::{Configuration, Measurement};

    #[test]
    fn one_point_per_configuration_and_repetition() {
        let mut run = Run::new("heap-compare", "heap managers on a test");
        run.id = Some(7);
        run.started = "2026-11-23T21:02:03Z".into();
        run.duration_s = 2.5;
        for (name, alloc) in [("glibc", "glibc"), ("jemalloc", "jemalloc")] {
            let params = [("allocator".to_string(), alloc.to_string())].into_iter().collect();
            run.configurations.push(Configuration { name: name.into(), params, baseline: None });
            run.measurements.push(Measurement { configuration: name.into(), metric: "wall_s".into(), unit: "s".into(), lower_is_better: true, values: vec![1.0, 2.0, 3.0] });
        }
        run.measurements.push(Measurement { configuration: "glibc".into(), metric: "peak_rss".into(), unit: "bytes".into(), lower_is_better: true, values: vec![4096.0] });
        let mut w = Vec::new();
        let env = |k: &str| (k == "OTEL_RESOURCE_ATTRIBUTES").then(|| "fleet=lab".to_string());
        let req = request(&run, &env, &mut w);
        let rm = &req.resource_metrics[0];
        let res = &rm.resource.as_ref().unwrap().attributes;
        let get = |k: &str| res.iter().find(|a| a.key == k).and_then(|a| a.value.clone()).and_then(|v| v.value);
        assert_eq!(get("fleet"), Some(any_value::Value::StringValue("lab".into())));
        assert_eq!(get("host.name"), Some(any_value::Value::StringValue(run.environment.host.clone())));
        let metrics = &rm.scope_metrics[0].metrics;
        assert_eq!(metrics.iter().map(|m| (m.name.as_str(), m.unit.as_str())).collect::<Vec<_>>(), vec![("mtlab.heap-compare.wall_s", "s"), ("mtlab.heap-compare.peak_rss", "By")]);
        let Some(metric::Data::Gauge(g)) = &metrics[0].data else { panic!() };
        assert_eq!(g.data_points.len(), 6);
        let p = &g.data_points[4];
        assert_eq!(p.value, Some(number_data_point::Value::AsDouble(2.0)));
        assert_eq!(p.start_time_unix_nano, 1_795_467_723_000_000_000);
        assert_eq!(p.time_unix_nano, 1_795_467_725_500_000_000);
        let keys: Vec<(&str, Option<&any_value::Value>)> = p.attributes.iter().map(|a| (a.key.as_str(), a.value.as_ref().and_then(|v| v.value.as_ref()))).collect();
        assert_eq!(
            keys,
            vec![
                ("configuration", Some(&any_value::Value::StringValue("jemalloc".into()))),
                ("allocator", Some(&any_value::Value::StringValue("jemalloc".into()))),
                ("repetition", Some(&any_value::Value::IntValue(1))),
                ("run.id", Some(&any_value::Value::IntValue(7))),
            ]
        );
        assert!(w.is_empty());
    }
}
