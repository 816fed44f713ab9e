//! slurmrestd wire formats of the supported dialects (v0.0.38 of Slurm 22.05/23.02/23.11,
//! data_parser v0.0.41 to v0.0.45 of Slurm 24.05 to 26.05): request paths and bodies, the
//! choice of a dialect from slurmrestd's `/openapi/v3`, the lenient decoding of job records and
//! error lists, and the mapping of Slurm job states to [`WorkloadState`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod jobs;
pub(crate) use jobs::{JobList, JobRecord, workload_state};

/// Which OpenAPI plugin of slurmrestd the adapter speaks.
///
/// The data_parser dialects (v0.0.41 on) share every field the adapter sends and reads
/// (compared in the `/openapi/v3` of real 24.11.5 and 26.05.5 daemons; only v0.0.41 also
/// nests a submission's job id under `result`); they differ in the URL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dialect {
    /// Not configured: the newest dialect slurmrestd serves, read from its `/openapi/v3`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// `openapi/v0.0.38` (Slurm 22.05 to 23.11; what Debian bookworm ships).
    #[serde(rename = "v0.0.38")]
    V0038,
    /// data_parser v0.0.41 (Slurm 24.05 to 25.05).
    #[serde(rename = "v0.0.41")]
    V0041,
    /// data_parser v0.0.42 (Slurm 24.11 to 26.05; Debian trixie's 24.11 serves v0.0.40-42).
    #[serde(rename = "v0.0.42")]
    V0042,
    /// data_parser v0.0.43 (Slurm 25.05 on; 26.05 serves it).
    #[serde(rename = "v0.0.43")]
    V0043,
    /// data_parser v0.0.44 (26.05 serves it).
    #[serde(rename = "v0.0.44")]
    V0044,
    /// data_parser v0.0.45 (Slurm 26.05, Debian sid's serves v0.0.42-45).
    #[serde(rename = "v0.0.45")]
    V0045,
}

impl Dialect {
    /// Every dialect the adapter speaks, newest first (the order detection prefers).
    pub const NEWEST_FIRST: [Dialect; 6] = [
        Self::V0045,
        Self::V0044,
        Self::V0043,
        Self::V0042,
        Self::V0041,
        Self::V0038,
    ];

    /// The version segment of the URL paths (`auto` for [`Dialect::Auto`], which is never
    /// put in a URL).
    pub fn version(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::V0038 => "v0.0.38",
            Self::V0041 => "v0.0.41",
            Self::V0042 => "v0.0.42",
            Self::V0043 => "v0.0.43",
            Self::V0044 => "v0.0.44",
            Self::V0045 => "v0.0.45",
        }
    }

    /// The dialect of a URL version segment (`v0.0.42`).
    pub fn from_version(v: &str) -> Option<Self> {
        Self::NEWEST_FIRST.into_iter().find(|d| d.version() == v)
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.version())
    }
}

/// The newest dialect the adapter speaks among those whose job submission path slurmrestd's
/// OpenAPI document (`GET /openapi/v3`) lists; otherwise the versions it does serve.
pub(crate) fn detect(openapi: &Value) -> Result<Dialect, Vec<String>> {
    let served: Vec<&str> = openapi
        .get("paths")
        .and_then(Value::as_object)
        .map(|paths| {
            paths
                .keys()
                .filter_map(|p| p.strip_prefix("/slurm/")?.strip_suffix("/job/submit"))
                .collect()
        })
        .unwrap_or_default();
    Dialect::NEWEST_FIRST
        .into_iter()
        .find(|d| served.contains(&d.version()))
        .ok_or_else(|| {
            let mut v: Vec<String> = served.iter().map(|s| (*s).to_owned()).collect();
            v.sort();
            v
        })
}

/// Everything one job submission carries, dialect-neutral.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JobRequest {
    pub name: String,
    pub comment: String,
    pub script: String,
    /// The job's environment (slurmrestd requires a non-empty one in v0.0.38): `PATH` and
    /// the pod's variables under their transport names (see `script`).
    pub environment: Environment,
    pub working_directory: String,
    pub standard_output: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time_limit_minutes: Option<u32>,
    /// GPUs per node, optionally typed (`a100:2`).
    pub gpus_per_node: Option<String>,
    pub cpus_per_task: Option<u32>,
    pub memory_per_node_mb: Option<u64>,
    pub requeue: Option<bool>,
}

/// A job environment; `Debug` shows the names only (values may come from Secrets).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Environment(pub BTreeMap<String, String>);

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The JSON body of `POST /slurm/<dialect>/job/submit`.
pub(crate) fn submit_body(dialect: Dialect, r: &JobRequest) -> Value {
    let mut job = serde_json::Map::new();
    let mut put = |k: &str, v: Value| {
        job.insert(k.to_owned(), v);
    };
    put("name", json!(r.name));
    put("comment", json!(r.comment));
    put("current_working_directory", json!(r.working_directory));
    if let Some(p) = &r.partition {
        put("partition", json!(p));
    }
    if let Some(a) = &r.account {
        put("account", json!(a));
    }
    if let Some(q) = &r.qos {
        put("qos", json!(q));
    }
    if let Some(o) = &r.standard_output {
        put("standard_output", json!(o));
    }
    if let Some(c) = r.cpus_per_task {
        put("cpus_per_task", json!(c));
    }
    if let Some(q) = r.requeue {
        put("requeue", json!(q));
    }
    match dialect {
        Dialect::V0038 => {
            // v0.0.38_job_properties: environment is an object, gpus_per_node a string,
            // time_limit and memory_per_node plain integers.
            put("environment", json!(r.environment.0));
            if let Some(g) = &r.gpus_per_node {
                put("gpus_per_node", json!(g));
            }
            if let Some(t) = r.time_limit_minutes {
                put("time_limit", json!(t));
            }
            if let Some(m) = r.memory_per_node_mb {
                put("memory_per_node", json!(m));
            }
            json!({ "script": r.script, "job": Value::Object(job) })
        }
        // Auto is resolved before a submission; its body here is the current one's.
        Dialect::Auto
        | Dialect::V0041
        | Dialect::V0042
        | Dialect::V0043
        | Dialect::V0044
        | Dialect::V0045 => {
            // v0.0.41_job_desc_msg (the same fields through v0.0.45_job_desc_msg): the script moves into `job`, environment is `["K=V"]`,
            // GPUs are a TRES string, numbers that may be unset are `{set, infinite, number}`.
            put("script", json!(r.script));
            let env: Vec<String> = r
                .environment
                .0
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            put("environment", json!(env));
            if let Some(g) = &r.gpus_per_node {
                put("tres_per_node", json!(format!("gres/gpu:{g}")));
            }
            if let Some(t) = r.time_limit_minutes {
                put("time_limit", no_val(u64::from(t)));
            }
            if let Some(m) = r.memory_per_node_mb {
                put("memory_per_node", no_val(m));
            }
            json!({ "job": Value::Object(job) })
        }
    }
}

fn no_val(n: u64) -> Value {
    json!({ "set": true, "infinite": false, "number": n })
}

/// `{job_id, errors[], warnings[]}` of a submission (both dialects; v0.0.41 also nests the id
/// under `result`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SubmitAnswer {
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub job_id: Option<u64>,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub job_submit_user_msg: Option<String>,
    /// v0.0.40 on: what the data parser dropped or converted (`Ignoring unknown field`).
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub warnings: Option<Vec<Value>>,
}

impl SubmitAnswer {
    /// The fields slurmrestd warned about (each warning's `source`, `#/job/F/`); never the
    /// descriptions, which may quote a value.
    pub fn warned_fields(&self) -> Vec<String> {
        self.warnings
            .iter()
            .flatten()
            .map(|w| {
                w.get("source")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect()
    }

    pub fn job_id(&self) -> Option<u64> {
        self.job_id.filter(|id| *id > 0).or_else(|| {
            self.result
                .as_ref()
                .and_then(|r| r.get("job_id"))
                .and_then(Value::as_u64)
                .filter(|id| *id > 0)
        })
    }
}

/// One entry of `errors[]`. 22.05 uses `error_number` in query answers but `error_code` in
/// submission answers; the v0.0.38 spec documents `errno`. All are accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlurmError {
    pub number: Option<i64>,
    pub error: String,
    pub description: String,
    pub source: String,
}

impl SlurmError {
    /// `error: description` without empty parts.
    pub fn text(&self) -> String {
        match (self.error.is_empty(), self.description.is_empty()) {
            (false, false) if self.error != self.description => {
                format!("{}: {}", self.error, self.description)
            }
            (false, _) => self.error.clone(),
            (true, false) => self.description.clone(),
            (true, true) => String::new(),
        }
    }
}

/// The `errors[]` of any slurmrestd JSON answer; empty when the body is not JSON.
pub(crate) fn errors_of(body: &[u8]) -> Vec<SlurmError> {
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |e: &Value| {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let number = ["error_number", "error_code", "errno"]
            .iter()
            .find_map(|k| e.get(*k).and_then(Value::as_i64));
        out.push(SlurmError {
            number,
            error: s("error"),
            description: s("description"),
            source: s("source"),
        });
    };
    if let Some(Value::Array(items)) = obj.get("errors") {
        items.iter().for_each(&mut push);
    }
    // v0.0.41 repeats a failed submission's code under `result`.
    if let Some(result) = obj.get("result")
        && result
            .get("error_code")
            .and_then(Value::as_i64)
            .is_some_and(|c| c != 0)
    {
        push(result);
    }
    // v0.0.42 on answer a cancellation with HTTP 200 and one `status[]` entry per job, its
    // outcome in `error {code, string, message}` (measured on 24.11.5 and 26.05.5: an unknown
    // job is code 2017 there, `errors` stays empty).
    if let Some(Value::Array(items)) = obj.get("status") {
        for e in items.iter().filter_map(|st| st.get("error")) {
            let Some(code) = e.get("code").and_then(Value::as_i64).filter(|c| *c != 0) else {
                continue;
            };
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            out.push(SlurmError {
                number: Some(code),
                error: s("string"),
                description: s("message"),
                source: String::new(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
