//! slurmrestd wire formats of the supported dialects (v0.0.38 of Slurm 22.05/23.02/23.11,
//! data_parser v0.0.41 to v0.0.45 of Slurm 24.05 to 26.05): request paths and bodies, the
//! choice of a dialect from slurmrestd's `/openapi/v3`, the lenient decoding of job records and
//! error lists, and the mapping of Slurm job states to [`WorkloadState`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::provider::{FailureReason, WorkloadState};

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
}

impl SubmitAnswer {
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

/// A job as either dialect lists it, decoded leniently: one odd field never drops the job.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct JobRecord {
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub job_id: Option<u64>,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub name: Option<String>,
    /// A string (v0.0.38) or an array of base state and flags (v0.0.41).
    #[serde(default)]
    pub job_state: Value,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub state_reason: Option<String>,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub state_description: Option<String>,
    /// Raw wait status (v0.0.38) or `{status[], return_code, signal}` (v0.0.41).
    #[serde(default)]
    pub exit_code: Value,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub restart_cnt: Option<u32>,
    #[serde(default)]
    pub submit_time: Value,
    #[serde(default)]
    pub start_time: Value,
    #[serde(default)]
    pub end_time: Value,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub nodes: Option<String>,
    /// GPUs the job asked for per node, `gres:gpu:2` / `gres/gpu:a100:2` (both dialects).
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub tres_per_node: Option<String>,
    #[serde(default, deserialize_with = "crate::providers::rest::lenient")]
    pub comment: Option<String>,
}

/// `{jobs: [...]}`; a body without `jobs` is malformed, not "no jobs".
#[derive(Debug, Deserialize)]
pub(crate) struct JobList {
    pub jobs: Vec<Value>,
}

impl JobRecord {
    /// GPUs per node from `tres_per_node` (0 when it names none).
    pub fn gpus(&self) -> u32 {
        let Some(spec) = self.tres_per_node.as_deref() else {
            return 0;
        };
        spec.split(',')
            .filter_map(|part| {
                let rest = part
                    .trim()
                    .strip_prefix("gres/gpu")
                    .or_else(|| part.trim().strip_prefix("gres:gpu"))?;
                rest.rsplit(':').next()?.parse::<u32>().ok()
            })
            .sum()
    }

    /// Base state and flags, upper case (`["RUNNING"]`, `["PENDING", "REQUEUED"]`).
    pub fn states(&self) -> Vec<String> {
        match &self.job_state {
            Value::String(s) => vec![s.trim().to_ascii_uppercase()],
            Value::Array(items) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|s| s.trim().to_ascii_uppercase())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The pending or failure reason, unless Slurm says `None`.
    pub fn reason(&self) -> Option<String> {
        self.state_reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != "None")
            .map(str::to_owned)
    }

    /// Text for the pod's status message: reason and description.
    pub fn message(&self) -> Option<String> {
        let desc = self
            .state_description
            .as_deref()
            .map(str::trim)
            .filter(|d| !d.is_empty());
        match (self.reason(), desc) {
            (Some(r), Some(d)) => Some(format!("{r}: {d}")),
            (Some(r), None) => Some(r),
            (None, Some(d)) => Some(d.to_owned()),
            (None, None) => None,
        }
    }

    /// The exit code a container would report: the process's code, or 128 + signal.
    pub fn exit_code(&self) -> Option<i32> {
        decode_exit(&self.exit_code)
    }

    pub fn submit_time(&self) -> Option<i64> {
        epoch(&self.submit_time)
    }
    pub fn start_time(&self) -> Option<i64> {
        epoch(&self.start_time)
    }
    pub fn end_time(&self) -> Option<i64> {
        epoch(&self.end_time)
    }
}

/// A number (v0.0.38) or `{set, infinite, number}` (v0.0.41); `None` when unset, zero or
/// infinite.
pub(crate) fn no_val_number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Object(o) => {
            if o.get("infinite").and_then(Value::as_bool) == Some(true)
                || o.get("set").and_then(Value::as_bool) == Some(false)
            {
                return None;
            }
            o.get("number").and_then(Value::as_i64)
        }
        _ => None,
    }
}

fn epoch(v: &Value) -> Option<i64> {
    no_val_number(v).filter(|s| *s > 0)
}

/// Decodes Slurm's exit code: v0.0.38 reports the raw wait status (`code << 8`, or the signal
/// number in the low 7 bits); v0.0.41 an object with `status`, `return_code` and `signal`.
pub(crate) fn decode_exit(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => {
            let raw = n.as_i64()?;
            let raw = u32::try_from(raw).ok()?;
            let signal = raw & 0x7f;
            if signal != 0 {
                Some(128 + signal as i32)
            } else {
                Some(((raw >> 8) & 0xff) as i32)
            }
        }
        Value::Object(o) => {
            let signaled = o.get("status").and_then(Value::as_array).is_some_and(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .any(|s| s == "SIGNALED" || s == "CORE_DUMPED")
            });
            let signal = o
                .get("signal")
                .and_then(|s| s.get("id"))
                .and_then(no_val_number)
                .filter(|s| *s > 0);
            if signaled && let Some(sig) = signal {
                return i32::try_from(128 + sig).ok();
            }
            o.get("return_code")
                .and_then(no_val_number)
                .and_then(|c| i32::try_from(c).ok())
        }
        _ => None,
    }
}

/// Exit code shown for a failure Slurm reports without one.
const GENERIC_FAILURE_EXIT: i32 = 1;
/// 128 + SIGKILL, what a container killed for memory reports.
const OOM_EXIT: i32 = 137;
/// 128 + SIGTERM, what `scancel` and a time limit deliver first.
const TERM_EXIT: i32 = 143;

/// Maps a job's state to the framework's closed set. The mapping table is in `docs/slurm.md`.
pub(crate) fn workload_state(job: &JobRecord) -> WorkloadState {
    let states = job.states();
    let has = |s: &str| states.iter().any(|x| x == s);
    let queued = || WorkloadState::Queued {
        reason: job.reason(),
    };
    let failed = |reason: FailureReason, default_exit: i32| WorkloadState::Failed {
        exit_code: job.exit_code().filter(|c| *c != 0).unwrap_or(default_exit),
        reason,
    };
    // Flags first (v0.0.38 reports a flag instead of the base state while it is set).
    if has("REQUEUED")
        || has("REQUEUE_HOLD")
        || has("REQUEUE_FED")
        || has("CONFIGURING")
        || has("RESV_DEL_HOLD")
        || has("POWER_UP_NODE")
    {
        return queued();
    }
    if has("COMPLETING") || has("SIGNALING") || has("STAGE_OUT") || has("RESIZING") {
        return WorkloadState::Running;
    }
    let Some(base) = states.first() else {
        return WorkloadState::Unknown {
            raw: job.job_state.to_string(),
        };
    };
    match base.as_str() {
        "PENDING" => queued(),
        "RUNNING" => WorkloadState::Running,
        "SUSPENDED" | "STOPPED" => WorkloadState::NotReady {
            reason: format!("job {}", base.to_ascii_lowercase()),
        },
        "COMPLETED" => WorkloadState::Succeeded,
        "FAILED" | "BOOT_FAIL" | "DEADLINE" | "SPECIAL_EXIT" => {
            failed(FailureReason::Error, GENERIC_FAILURE_EXIT)
        }
        "LAUNCH_FAILED" => failed(FailureReason::ProviderError, GENERIC_FAILURE_EXIT),
        "OOM" | "OUT_OF_MEMORY" => WorkloadState::Failed {
            exit_code: OOM_EXIT,
            reason: FailureReason::OomKilled,
        },
        "TIMEOUT" => failed(FailureReason::DeadlineExceeded, TERM_EXIT),
        "PREEMPTED" => WorkloadState::Preempted,
        "NODE_FAIL" | "REVOKED" => WorkloadState::Lost,
        // We only cancel jobs whose pods are being deleted, and those are no longer
        // reported; any other cancellation came from someone else.
        "CANCELLED" => failed(FailureReason::Evicted, TERM_EXIT),
        other => WorkloadState::Unknown {
            raw: other.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests;
