//! Job records as slurmrestd lists them in either dialect, decoded leniently (one odd field never
//! drops a job), their exit codes, and the mapping of Slurm job states to [`WorkloadState`].

use serde::Deserialize;
use serde_json::Value;

use crate::provider::{FailureReason, WorkloadState};

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
    // EXPEDITING (JOB_EXPEDITING, Slurm 25.11, dialect v0.0.44: "checking for expedited
    // requeue") marks an ended job slurmctld may put back in the queue: not final yet.
    if has("REQUEUED")
        || has("EXPEDITING")
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
