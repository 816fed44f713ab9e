//! `/metrics/resource`: the node's resource metrics in the Prometheus text format.

use std::fmt::Write as _;

use jiff::Timestamp;

use super::Snapshot;

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<String>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }
    fn push(&mut self, labels: &[(&str, &str)], value: &str, ts: Option<Timestamp>) {
        let mut line = String::from(self.name);
        if !labels.is_empty() {
            line.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{k}=\"{}\"", escape(v));
            }
            line.push('}');
        }
        let _ = write!(line, " {value}");
        if let Some(ts) = ts {
            let _ = write!(line, " {}", ts.as_millisecond());
        }
        self.samples.push(line);
    }
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn seconds(nanos: u64) -> String {
    (nanos as f64 / 1e9).to_string()
}

/// Renders the resource metrics in the Prometheus text format (version 0.0.4), families sorted
/// by name as the kubelet's registry emits them.
pub fn render_resource_metrics(s: &Snapshot) -> String {
    let mut c_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut c_mem = Family::new(
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    );
    let mut c_start = Family::new(
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    let mut n_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut n_mem = Family::new(
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
    );
    let mut p_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut p_mem = Family::new(
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    let mut r_err = Family::new(
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    let mut s_err = Family::new(
        "scrape_error",
        "gauge",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
    );

    for c in &s.containers {
        let labels = [
            ("container", c.container.as_str()),
            ("namespace", c.namespace.as_str()),
            ("pod", c.pod.as_str()),
        ];
        let pod_labels = [("namespace", c.namespace.as_str()), ("pod", c.pod.as_str())];
        let u = &c.usage;
        let mut any = false;
        if u.cpu_usage_nanos > 0 {
            c_cpu.push(&labels, &seconds(u.cpu_usage_nanos), Some(u.timestamp));
            p_cpu.push(&pod_labels, &seconds(u.cpu_usage_nanos), Some(u.timestamp));
            any = true;
        }
        if u.memory_bytes > 0 {
            c_mem.push(&labels, &u.memory_bytes.to_string(), Some(u.timestamp));
            p_mem.push(&pod_labels, &u.memory_bytes.to_string(), Some(u.timestamp));
            any = true;
        }
        if any && let Some(start) = c.container_start {
            let secs = start.as_nanosecond() as f64 / 1e9;
            c_start.push(&labels, &secs.to_string(), None);
        }
    }
    if let Some(ts) = s.node.timestamp {
        if s.node.cpu_usage_nanos > 0 {
            n_cpu.push(&[], &seconds(s.node.cpu_usage_nanos), Some(ts));
        }
        if s.node.memory_bytes > 0 {
            n_mem.push(&[], &s.node.memory_bytes.to_string(), Some(ts));
        }
    }
    r_err.push(&[], "0", None);
    s_err.push(&[], "0", None);

    let mut out = String::new();
    for f in [
        c_cpu, c_mem, c_start, n_cpu, n_mem, p_cpu, p_mem, r_err, s_err,
    ] {
        if f.samples.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for line in f.samples {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
