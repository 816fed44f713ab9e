//! Validation of `POST /v2/pods` and `POST /v2/pods/{id}/action` bodies against the v2
//! schema: contract violations are 422 with `errors[]`, cross-field rules are 400.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// GPU part of a create request.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRequest {
    /// GPU type id.
    pub id: String,
    /// GPUs (default 1).
    pub count: u32,
    /// Acceptable CUDA versions (exact).
    pub allowed_cuda_versions: Vec<String>,
    /// Lowest CUDA version.
    pub min_cuda_version: Option<String>,
    /// Minimum RAM per GPU in GB (placement filter).
    pub min_ram_per_gpu: Option<u64>,
    /// Minimum vCPUs per GPU (placement filter).
    pub min_vcpu_count_per_gpu: Option<u64>,
}

/// A schema-valid create request.
#[derive(Clone, Debug, PartialEq)]
pub struct CreatePod {
    /// Pod name.
    pub name: String,
    /// Image (absent only with a template).
    pub image: Option<String>,
    /// Arguments passed to the container entrypoint.
    pub args: String,
    /// Container disk GB.
    pub disk: Option<u64>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Ports, `port/protocol`.
    pub ports: Vec<String>,
    /// Registry credential id.
    pub registry: Option<String>,
    /// `SECURE` or `COMMUNITY`.
    pub cloud: String,
    /// Preferred data centers.
    pub data_center_ids: Vec<String>,
    /// Global networking.
    pub global_networking: bool,
    /// GPU request.
    pub gpu: Option<GpuRequest>,
    /// CPU request (kept raw; CPU pods are refused).
    pub cpu: Option<Value>,
    /// Mounts (kept raw).
    pub mounts: Option<Value>,
    /// Template id.
    pub template_id: Option<String>,
}

/// Why a body was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Invalid {
    /// Malformed JSON (400).
    Json(String),
    /// Contract violations (422).
    Schema(Vec<String>),
    /// Cross-field rule (400).
    Rule(String),
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

struct Checker {
    errors: Vec<String>,
}

impl Checker {
    fn wrong_type(&mut self, path: &str, want: &str, got: &Value) {
        self.errors.push(format!(
            "{path}: expected {want}, but got {}",
            type_name(got)
        ));
    }

    fn object<'a>(&mut self, path: &str, v: &'a Value) -> Option<&'a Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            other => {
                self.wrong_type(path, "object", other);
                None
            }
        }
    }

    fn allowed(&mut self, path: &str, m: &Map<String, Value>, allowed: &[&str]) {
        let extra: Vec<String> = m
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .map(|k| format!("'{k}'"))
            .collect();
        if !extra.is_empty() {
            self.errors.push(format!(
                "{path}: additional properties {} not allowed",
                extra.join(", ")
            ));
        }
    }

    fn string(&mut self, path: &str, v: &Value, min_len: usize) -> Option<String> {
        match v {
            Value::String(s) if s.chars().count() >= min_len => Some(s.clone()),
            Value::String(_) => {
                self.errors
                    .push(format!("{path}: length must be >= {min_len}"));
                None
            }
            other => {
                self.wrong_type(path, "string", other);
                None
            }
        }
    }

    fn integer(&mut self, path: &str, v: &Value, min: u64) -> Option<u64> {
        match v {
            Value::Number(n) => match n.as_u64() {
                Some(x) if x >= min => Some(x),
                Some(_) => {
                    self.errors.push(format!("{path}: must be >= {min}"));
                    None
                }
                None if n.is_i64() => {
                    self.errors.push(format!("{path}: must be >= {min}"));
                    None
                }
                None => {
                    self.wrong_type(path, "integer", v);
                    None
                }
            },
            other => {
                self.wrong_type(path, "integer", other);
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong_type(path, "boolean", other);
                None
            }
        }
    }

    fn string_array(&mut self, path: &str, v: &Value, pattern_cuda: bool) -> Option<Vec<String>> {
        let Value::Array(items) = v else {
            self.wrong_type(path, "array", v);
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            if let Some(s) = self.string(&p, item, 0) {
                if pattern_cuda && !is_cuda_version(&s) {
                    self.errors
                        .push(format!("{p}: does not match pattern '^\\d+\\.\\d+$'"));
                } else {
                    out.push(s);
                }
            }
        }
        Some(out)
    }

    fn enumeration(&mut self, path: &str, v: &Value, values: &[&str]) -> Option<String> {
        let s = self.string(path, v, 0)?;
        if values.contains(&s.as_str()) {
            Some(s)
        } else {
            let list: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
            self.errors
                .push(format!("{path}: value must be one of {}", list.join(", ")));
            None
        }
    }
}

/// `major.minor`.
pub fn is_cuda_version(s: &str) -> bool {
    let mut parts = s.split('.');
    let ok =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// Compare `major.minor` versions numerically.
pub fn cuda_at_least(version: &str, floor: &str) -> bool {
    let parse = |s: &str| -> (u64, u64) {
        let (a, b) = s.split_once('.').unwrap_or((s, "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    parse(version) >= parse(floor)
}

const CREATE_FIELDS: &[&str] = &[
    "name",
    "image",
    "args",
    "disk",
    "env",
    "ports",
    "registry",
    "cloud",
    "cpu",
    "dataCenterIds",
    "globalNetworking",
    "gpu",
    "mounts",
    "startJupyter",
    "startSsh",
    "templateId",
];

const GPU_FIELDS: &[&str] = &[
    "id",
    "count",
    "allowedCudaVersions",
    "minCudaVersion",
    "minRamPerGpu",
    "minVcpuCountPerGpu",
];

/// Validate a create body.
pub fn parse_create(body: &[u8]) -> Result<CreatePod, Invalid> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Invalid::Json(format!("invalid JSON body: {e}")))?;
    let mut c = Checker { errors: Vec::new() };
    let Some(m) = c.object("$", &value) else {
        return Err(Invalid::Schema(c.errors));
    };
    c.allowed("$", m, CREATE_FIELDS);

    let name = match m.get("name") {
        Some(v) => c.string("$.name", v, 1),
        None => {
            c.errors.push("$: missing property 'name'".into());
            None
        }
    };
    let template_id = m
        .get("templateId")
        .and_then(|v| c.string("$.templateId", v, 1));
    let image = match m.get("image") {
        Some(v) => c.string("$.image", v, 0),
        None => {
            if !m.contains_key("templateId") {
                c.errors.push("$: missing property 'image'".into());
            }
            None
        }
    };
    let args = m
        .get("args")
        .and_then(|v| c.string("$.args", v, 0))
        .unwrap_or_default();
    let disk = m.get("disk").and_then(|v| c.integer("$.disk", v, 1));
    let mut env = BTreeMap::new();
    if let Some(v) = m.get("env")
        && let Some(obj) = c.object("$.env", v)
    {
        for (k, val) in obj {
            if let Some(s) = c.string(&format!("$.env.{k}"), val, 0) {
                env.insert(k.clone(), s);
            }
        }
    }
    let ports = m
        .get("ports")
        .and_then(|v| c.string_array("$.ports", v, false))
        .unwrap_or_default();
    let registry = match m.get("registry") {
        None | Some(Value::Null) => None,
        Some(v) => c.string("$.registry", v, 0),
    };
    let cloud = m
        .get("cloud")
        .and_then(|v| c.enumeration("$.cloud", v, &["SECURE", "COMMUNITY"]))
        .unwrap_or_else(|| "SECURE".to_owned());
    let data_center_ids = m
        .get("dataCenterIds")
        .and_then(|v| c.string_array("$.dataCenterIds", v, false))
        .unwrap_or_default();
    let global_networking = m
        .get("globalNetworking")
        .and_then(|v| c.boolean("$.globalNetworking", v))
        .unwrap_or(false);
    for flag in ["startJupyter", "startSsh"] {
        if let Some(v) = m.get(flag) {
            c.boolean(&format!("$.{flag}"), v);
        }
    }
    let gpu = m.get("gpu").and_then(|v| parse_gpu(&mut c, v));
    let cpu = match m.get("cpu") {
        None => None,
        Some(v) => {
            if let Some(obj) = c.object("$.cpu", v) {
                c.allowed("$.cpu", obj, &["id", "vcpuCount"]);
                match obj.get("id") {
                    Some(id) => {
                        c.string("$.cpu.id", id, 1);
                    }
                    None => c.errors.push("$.cpu: missing property 'id'".into()),
                }
                match obj.get("vcpuCount") {
                    Some(n) => {
                        c.integer("$.cpu.vcpuCount", n, 2);
                    }
                    None => c.errors.push("$.cpu: missing property 'vcpuCount'".into()),
                }
            }
            Some(v.clone())
        }
    };
    let mounts = match m.get("mounts") {
        None => None,
        Some(v) => {
            if let Some(obj) = c.object("$.mounts", v) {
                c.allowed("$.mounts", obj, &["persistent", "network"]);
                if let Some(p) = obj.get("persistent")
                    && let Some(po) = c.object("$.mounts.persistent", p)
                {
                    c.allowed("$.mounts.persistent", po, &["size", "path"]);
                    match po.get("size") {
                        Some(s) => {
                            c.integer("$.mounts.persistent.size", s, 10);
                        }
                        None => c
                            .errors
                            .push("$.mounts.persistent: missing property 'size'".into()),
                    }
                    match po.get("path") {
                        Some(s) => {
                            c.string("$.mounts.persistent.path", s, 0);
                        }
                        None => c
                            .errors
                            .push("$.mounts.persistent: missing property 'path'".into()),
                    }
                }
                if let Some(n) = obj.get("network") {
                    match n {
                        Value::Array(items) if items.len() <= 1 => {
                            for (i, item) in items.iter().enumerate() {
                                let p = format!("$.mounts.network[{i}]");
                                if let Some(o) = c.object(&p, item) {
                                    c.allowed(&p, o, &["volumeId", "path"]);
                                    for key in ["volumeId", "path"] {
                                        match o.get(key) {
                                            Some(s) => {
                                                c.string(&format!("{p}.{key}"), s, 0);
                                            }
                                            None => c
                                                .errors
                                                .push(format!("{p}: missing property '{key}'")),
                                        }
                                    }
                                }
                            }
                        }
                        Value::Array(_) => c
                            .errors
                            .push("$.mounts.network: must have at most 1 items".into()),
                        other => c.wrong_type("$.mounts.network", "array", other),
                    }
                }
            }
            Some(v.clone())
        }
    };
    if !c.errors.is_empty() {
        return Err(Invalid::Schema(c.errors));
    }
    let Some(name) = name else {
        return Err(Invalid::Schema(vec!["$: missing property 'name'".into()]));
    };
    // Cross-field rules: 400.
    if gpu.is_some() == cpu.is_some() {
        return Err(Invalid::Rule(
            "exactly one of gpu or cpu must be set".into(),
        ));
    }
    if let Some(g) = &gpu
        && !g.allowed_cuda_versions.is_empty()
        && g.min_cuda_version.is_some()
    {
        return Err(Invalid::Rule(
            "gpu.allowedCudaVersions and gpu.minCudaVersion are mutually exclusive".into(),
        ));
    }
    if let Some(Value::Object(mo)) = &mounts
        && mo.contains_key("persistent")
        && mo.contains_key("network")
    {
        return Err(Invalid::Rule(
            "mounts.persistent and mounts.network are mutually exclusive".into(),
        ));
    }
    Ok(CreatePod {
        name,
        image,
        args,
        disk,
        env,
        ports,
        registry,
        cloud,
        data_center_ids,
        global_networking,
        gpu,
        cpu,
        mounts,
        template_id,
    })
}

fn parse_gpu(c: &mut Checker, v: &Value) -> Option<GpuRequest> {
    let obj = c.object("$.gpu", v)?;
    c.allowed("$.gpu", obj, GPU_FIELDS);
    let id = match obj.get("id") {
        Some(v) => c.string("$.gpu.id", v, 0),
        None => {
            c.errors.push("$.gpu: missing property 'id'".into());
            None
        }
    };
    let count = obj
        .get("count")
        .map(|v| c.integer("$.gpu.count", v, 1))
        .unwrap_or(Some(1));
    let allowed_cuda_versions = obj
        .get("allowedCudaVersions")
        .and_then(|v| c.string_array("$.gpu.allowedCudaVersions", v, true))
        .unwrap_or_default();
    let min_cuda_version = match obj.get("minCudaVersion") {
        None => None,
        Some(v) => match c.string("$.gpu.minCudaVersion", v, 0) {
            Some(s) if is_cuda_version(&s) => Some(s),
            Some(_) => {
                c.errors
                    .push("$.gpu.minCudaVersion: does not match pattern '^\\d+\\.\\d+$'".into());
                None
            }
            None => None,
        },
    };
    let min_ram_per_gpu = obj
        .get("minRamPerGpu")
        .and_then(|v| c.integer("$.gpu.minRamPerGpu", v, 1));
    let min_vcpu_count_per_gpu = obj
        .get("minVcpuCountPerGpu")
        .and_then(|v| c.integer("$.gpu.minVcpuCountPerGpu", v, 1));
    let count = u32::try_from(count?).ok().or_else(|| {
        c.errors
            .push(format!("$.gpu.count: must be <= {}", u32::MAX));
        None
    })?;
    Some(GpuRequest {
        id: id?,
        count,
        allowed_cuda_versions,
        min_cuda_version,
        min_ram_per_gpu,
        min_vcpu_count_per_gpu,
    })
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
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Invalid::Json(format!("invalid JSON body: {e}")))?;
    let mut c = Checker { errors: Vec::new() };
    let Some(m) = c.object("$", &value) else {
        return Err(Invalid::Schema(c.errors));
    };
    c.allowed("$", m, &["action"]);
    let action = match m.get("action") {
        Some(v) => c.enumeration("$.action", v, &["start", "stop", "restart", "terminate"]),
        None => {
            c.errors.push("$: missing property 'action'".into());
            None
        }
    };
    if !c.errors.is_empty() {
        return Err(Invalid::Schema(c.errors));
    }
    match action.as_deref() {
        Some("start") => Ok(PodAction::Start),
        Some("stop") => Ok(PodAction::Stop),
        Some("restart") => Ok(PodAction::Restart),
        Some("terminate") => Ok(PodAction::Terminate),
        _ => Err(Invalid::Schema(vec!["$: missing property 'action'".into()])),
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
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1, "minRamPerGpu": 32, "minVcpuCountPerGpu": 8},
            "disk": 50
        }))
        .unwrap();
        let gpu = pod.gpu.unwrap();
        assert_eq!(gpu.count, 1);
        assert_eq!(gpu.min_ram_per_gpu, Some(32));
        assert_eq!(pod.cloud, "SECURE");
    }

    #[test]
    fn schema_errors_are_listed() {
        let Err(Invalid::Schema(errors)) =
            create(json!({"bogus": 1, "gpu": {"id": 3, "count": 0}}))
        else {
            panic!("expected schema error");
        };
        assert!(errors.contains(&"$: additional properties 'bogus' not allowed".to_owned()));
        assert!(errors.contains(&"$: missing property 'name'".to_owned()));
        assert!(errors.contains(&"$: missing property 'image'".to_owned()));
        assert!(errors.contains(&"$.gpu.id: expected string, but got integer".to_owned()));
        assert!(errors.contains(&"$.gpu.count: must be >= 1".to_owned()));
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
        assert!(is_cuda_version("12.8"));
        assert!(!is_cuda_version("12"));
        assert!(!is_cuda_version("12.x"));
        assert!(cuda_at_least("12.11", "12.2"));
        assert!(!cuda_at_least("12.8", "13.0"));
    }
}
