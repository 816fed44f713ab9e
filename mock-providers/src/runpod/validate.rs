//! Validation of `POST /v2/pods` and `POST /v2/pods/{id}/action` bodies: first against
//! RunPod's published v2 schema ([`crate::schema::runpod`]; a violation is 422 with
//! `errors[]`, as `UnprocessableEntityError` documents), then the rules the schema leaves to
//! the handler (400, `BadRequestError`: "exactly one of `gpu` or `cpu`", the two CUDA
//! constraints, the two mount kinds). The typed request is read from the valid body.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// GPU part of a create request (`CreateGpuConfig`: `id`, `count` and the CUDA constraints;
/// nothing else, `unevaluatedProperties: false`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuRequest {
    /// GPU type id.
    pub id: String,
    /// GPUs (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Acceptable CUDA versions (exact).
    #[serde(default)]
    pub allowed_cuda_versions: Vec<String>,
    /// Lowest CUDA version.
    #[serde(default)]
    pub min_cuda_version: Option<String>,
}

fn one() -> u32 {
    1
}

fn secure() -> String {
    "SECURE".to_owned()
}

/// A schema-valid create request.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatePod {
    /// Pod name.
    pub name: String,
    /// Image (absent only with a template).
    #[serde(default)]
    pub image: Option<String>,
    /// Arguments passed to the container entrypoint.
    #[serde(default)]
    pub args: String,
    /// Container disk GB.
    #[serde(default)]
    pub disk: Option<u64>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Ports, `port/protocol`.
    #[serde(default)]
    pub ports: Vec<String>,
    /// Registry credential id.
    #[serde(default)]
    pub registry: Option<String>,
    /// `SECURE` (the default) or `COMMUNITY`.
    #[serde(default = "secure")]
    pub cloud: String,
    /// Preferred data centers.
    #[serde(default)]
    pub data_center_ids: Vec<String>,
    /// Global networking.
    #[serde(default)]
    pub global_networking: bool,
    /// GPU request.
    #[serde(default)]
    pub gpu: Option<GpuRequest>,
    /// CPU request (kept raw).
    #[serde(default)]
    pub cpu: Option<Value>,
    /// Mounts (kept raw).
    #[serde(default)]
    pub mounts: Option<Value>,
    /// Template id.
    #[serde(default)]
    pub template_id: Option<String>,
}

/// Why a body was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Invalid {
    /// Malformed JSON (400).
    Json(String),
    /// Violations of the published schema (422).
    Schema(Vec<String>),
    /// A rule the schema leaves to the handler (400).
    Rule(String),
}

/// Compare `major.minor` versions numerically.
pub fn cuda_at_least(version: &str, floor: &str) -> bool {
    let parse = |s: &str| -> (u64, u64) {
        let (a, b) = s.split_once('.').unwrap_or((s, "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    parse(version) >= parse(floor)
}

/// The JSON of `body`, valid as the request of `operation`.
fn checked(operation: &str, body: &[u8]) -> Result<Value, Invalid> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Invalid::Json(format!("invalid JSON body: {e}")))?;
    let errors = crate::schema::runpod().request_errors(operation, &value);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(Invalid::Schema(errors))
    }
}

/// A `POST /v2/registries` body.
#[derive(Debug, serde::Deserialize)]
pub struct CreateRegistry {
    pub name: String,
    pub username: String,
    pub password: String,
}

/// Validate a registry credential body against `CreateRegistryRequest`.
pub fn parse_registry(body: &[u8]) -> Result<CreateRegistry, Invalid> {
    let value = checked("POST /v2/registries", body)?;
    serde_json::from_value(value)
        .map_err(|e| Invalid::Rule(format!("request could not be processed: {e}")))
}

/// Validate a create body.
pub fn parse_create(body: &[u8]) -> Result<CreatePod, Invalid> {
    let value = checked("POST /v2/pods", body)?;
    let pod: CreatePod = serde_json::from_value(value)
        .map_err(|e| Invalid::Rule(format!("request could not be processed: {e}")))?;
    // `CreatePodRequest`: "Exactly one of `gpu` or `cpu` must be set — enforced at the
    // handler layer."
    if pod.gpu.is_some() == pod.cpu.is_some() {
        return Err(Invalid::Rule(
            "exactly one of gpu or cpu must be set".into(),
        ));
    }
    // `CreateGpuConfig.allowedCudaVersions`: "A non-empty set is mutually exclusive with
    // minCudaVersion (400 if both are sent)."
    if let Some(g) = &pod.gpu
        && !g.allowed_cuda_versions.is_empty()
        && g.min_cuda_version.is_some()
    {
        return Err(Invalid::Rule(
            "gpu.allowedCudaVersions and gpu.minCudaVersion are mutually exclusive".into(),
        ));
    }
    if let Some(Value::Object(mo)) = &pod.mounts
        && mo.contains_key("persistent")
        && mo.contains_key("network")
    {
        return Err(Invalid::Rule(
            "mounts.persistent and mounts.network are mutually exclusive".into(),
        ));
    }
    Ok(pod)
}

/// The four pod actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodAction {
    /// Boot an EXITED or ERROR pod.
    Start,
    /// Stop, releasing the GPUs.
    Stop,
    /// Restart a RUNNING pod's container.
    Restart,
    /// Delete the pod.
    Terminate,
}

impl PodAction {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::Terminate => "terminate",
        }
    }
}

/// Validate an action body.
pub fn parse_action(body: &[u8]) -> Result<PodAction, Invalid> {
    let value = checked("POST /v2/pods/{id}/action", body)?;
    match value["action"].as_str() {
        Some("start") => Ok(PodAction::Start),
        Some("stop") => Ok(PodAction::Stop),
        Some("restart") => Ok(PodAction::Restart),
        Some("terminate") => Ok(PodAction::Terminate),
        _ => Err(Invalid::Schema(vec!["$.action: not a pod action".into()])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn create(v: Value) -> Result<CreatePod, Invalid> {
        parse_create(v.to_string().as_bytes())
    }

    #[test]
    fn accepts_documented_example() {
        let pod = create(json!({
            "name": "pytorch-training",
            "image": "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
            "disk": 50
        }))
        .unwrap();
        let gpu = pod.gpu.unwrap();
        assert_eq!(gpu.count, 1);
        assert_eq!(pod.cloud, "SECURE");
    }

    #[test]
    fn fields_the_schema_does_not_have_are_refused() {
        // Under `unevaluatedProperties: false` (`CreateGpuConfig`, `CreatePodRequest`).
        let Err(Invalid::Schema(errors)) = create(json!({
            "name": "a", "image": "i", "bogus": 1,
            "gpu": {"id": "x", "count": 1, "minRamPerGpu": 32, "minVcpuCountPerGpu": 8}
        })) else {
            panic!("expected a schema error");
        };
        for field in ["bogus", "minRamPerGpu", "minVcpuCountPerGpu"] {
            assert!(
                errors.iter().any(|e| e.contains(field)),
                "{field}: {errors:?}"
            );
        }
    }

    #[test]
    fn schema_errors_are_listed() {
        let Err(Invalid::Schema(errors)) = create(json!({"gpu": {"id": 3, "count": 0}})) else {
            panic!("expected schema error");
        };
        let has = |path: &str, word: &str| {
            errors
                .iter()
                .any(|e| e.starts_with(path) && e.contains(word))
        };
        assert!(has("$:", "name"), "{errors:?}");
        assert!(has("$:", "image"), "{errors:?}");
        assert!(has("$.gpu.id", "string"), "{errors:?}");
        assert!(has("$.gpu.count", "1"), "{errors:?}");
    }

    #[test]
    fn cross_field_rules_are_400() {
        assert!(matches!(
            create(json!({"name": "a", "image": "i"})),
            Err(Invalid::Rule(_))
        ));
        assert!(matches!(
            create(
                json!({"name": "a", "image": "i", "gpu": {"id": "x", "allowedCudaVersions": ["12.8"], "minCudaVersion": "12.1"}})
            ),
            Err(Invalid::Rule(_))
        ));
        assert!(matches!(parse_create(b"{nope"), Err(Invalid::Json(_))));
    }

    #[test]
    fn actions() {
        assert_eq!(parse_action(br#"{"action":"stop"}"#), Ok(PodAction::Stop));
        assert!(matches!(
            parse_action(br#"{"action":"explode"}"#),
            Err(Invalid::Schema(_))
        ));
        assert!(matches!(
            parse_action(br#"{"action":"stop","x":1}"#),
            Err(Invalid::Schema(_))
        ));
    }

    #[test]
    fn cuda_versions() {
        assert!(cuda_at_least("12.11", "12.2"));
        assert!(!cuda_at_least("12.8", "13.0"));
    }
}
