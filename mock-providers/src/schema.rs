//! The providers' published schemas, as `scripts/schemas/derive` extracts them from their
//! OpenAPI documents (`mock-providers/schemas/`, each naming its source and date), and
//! validation against them with the `jsonschema` crate: the emulators check every request body
//! they take, and the adapters' contract tests check every body the adapters send, against the
//! provider's own schema rather than our reading of it.
//!
//! Messages name the field by path (`$.gpu`) and never echo a value (they are masked): a body's
//! env values may be Secrets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use jsonschema::Validator;
use serde_json::{Value, json};

/// One provider's derived schema document.
pub struct Spec {
    name: &'static str,
    doc: Value,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// RunPod's v2 API (runpod/docs `api-reference-v2/openapi.json`).
pub fn runpod() -> &'static Spec {
    static SPEC: OnceLock<Spec> = OnceLock::new();
    SPEC.get_or_init(|| Spec::new("runpod-v2", include_str!("../schemas/runpod-v2.json")))
}

/// Vast.ai's API (vast-ai/docs `api-reference/openapi.yaml`), with the errata its own guide and
/// CLI show (`x-errata`). Operations are named without the trailing slash Vast's URLs carry.
pub fn vast() -> &'static Spec {
    static SPEC: OnceLock<Spec> = OnceLock::new();
    SPEC.get_or_init(|| Spec::new("vast", include_str!("../schemas/vast.json")))
}

/// slurmrestd's own `/openapi/v3` of each release the tests run (`scripts/schemas/slurm`),
/// closed and with path-named `required` entries dropped, as `x-closed` and
/// `x-dropped-path-required` say why.
pub fn slurm(release: SlurmRelease) -> &'static Spec {
    static S2205: OnceLock<Spec> = OnceLock::new();
    static S2411: OnceLock<Spec> = OnceLock::new();
    static S2605: OnceLock<Spec> = OnceLock::new();
    match release {
        SlurmRelease::R2205 => S2205
            .get_or_init(|| Spec::new("slurm-22.05", include_str!("../schemas/slurm-22.05.json"))),
        SlurmRelease::R2411 => S2411
            .get_or_init(|| Spec::new("slurm-24.11", include_str!("../schemas/slurm-24.11.json"))),
        SlurmRelease::R2605 => S2605
            .get_or_init(|| Spec::new("slurm-26.05", include_str!("../schemas/slurm-26.05.json"))),
    }
}

/// One thing wrong with a request, by kind; `at` is the field's path (`$.job.environment`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Fields the schema does not list, in the object at `at`.
    Unknown { at: String, fields: Vec<String> },
    /// A value of another JSON type than `expected` (`array`, `object`, ...).
    Type { at: String, expected: String },
    /// Anything else (a missing field, a value outside an enum or bound): the validator's
    /// message, which never echoes the value.
    Other { at: String, message: String },
}

/// The Slurm releases whose schemas are kept, one per Debian suite the tests run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmRelease {
    /// 22.05 (bookworm): `openapi/v0.0.38`. Its document does not describe its own answers
    /// (integer versions where it says strings, nulls, undocumented fields), so only its
    /// request schemas are checked.
    R2205,
    /// 24.11 (trixie): v0.0.40 to v0.0.42.
    R2411,
    /// 26.05 (sid): v0.0.42 to v0.0.45.
    R2605,
}

impl SlurmRelease {
    /// Every release, oldest first.
    pub const ALL: [SlurmRelease; 3] = [Self::R2205, Self::R2411, Self::R2605];

    /// The releases that serve `version` (`"v0.0.42"`): a dialect served by two releases is
    /// checked against both documents.
    pub fn serving(version: &str) -> Vec<SlurmRelease> {
        Self::ALL
            .into_iter()
            .filter(|r| {
                slurm(*r)
                    .operations()
                    .iter()
                    .any(|op| op == &format!("POST /slurm/{version}/job/submit"))
            })
            .collect()
    }

    /// Whether the release's document describes its answers (see [`SlurmRelease::R2205`]).
    pub fn describes_answers(self) -> bool {
        self != Self::R2205
    }
}

impl Spec {
    fn new(name: &'static str, text: &str) -> Self {
        let doc = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("schemas/{name}.json is not JSON: {e}"));
        Self {
            name,
            doc,
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// The schema's name (`runpod-v2`, `slurm-24.11`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Where the schema comes from (`x-source`: repository, path, commit, date).
    pub fn source(&self) -> &Value {
        &self.doc["x-source"]
    }

    /// The operations the schema has (`"POST /v2/pods"`, ...).
    pub fn operations(&self) -> Vec<String> {
        self.doc["x-operations"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// What is wrong with `body` as the request of `operation` (empty: valid).
    ///
    /// # Panics
    /// When the schema has no request body for `operation` (a bug of the caller).
    pub fn request_errors(&self, operation: &str, body: &Value) -> Vec<String> {
        self.errors(operation, &["request"], body)
    }

    /// Whether the spec documents a JSON answer of `operation` with `status` (or a default).
    pub fn documents(&self, operation: &str, status: u16) -> bool {
        let responses = &self.doc["x-operations"][operation]["responses"];
        responses.get(status.to_string()).is_some() || responses.get("default").is_some()
    }

    /// What is wrong with `body` as the `status` response of `operation` (empty: valid; the
    /// `default` response where the status has none of its own).
    ///
    /// # Panics
    /// When the schema has no JSON response for `operation` and `status` (nor a default).
    pub fn response_errors(&self, operation: &str, status: u16, body: &Value) -> Vec<String> {
        let code = status.to_string();
        let responses = &self.doc["x-operations"][operation]["responses"];
        let key = if responses.get(&code).is_some() {
            code.as_str()
        } else {
            "default"
        };
        self.errors(operation, &["responses", key], body)
    }

    /// What is wrong with `body` as the request of `operation`, by kind, for an emulator that
    /// answers each kind as its service does (unknown fields dropped with a warning, wrong types
    /// refused).
    ///
    /// # Panics
    /// When the schema has no request body for `operation` (a bug of the caller).
    pub fn request_violations(&self, operation: &str, body: &Value) -> Vec<Violation> {
        use jsonschema::error::{TypeKind, ValidationErrorKind};
        let v = self.validator(operation, &["request"]);
        v.iter_errors(body)
            .map(|e| {
                let at = format!("${}", e.instance_path().to_string().replace('/', "."));
                match e.kind() {
                    ValidationErrorKind::AdditionalProperties { unexpected } => {
                        Violation::Unknown {
                            at,
                            fields: unexpected.clone(),
                        }
                    }
                    ValidationErrorKind::Type { kind } => Violation::Type {
                        at,
                        expected: match kind {
                            TypeKind::Single(t) => t.to_string(),
                            TypeKind::Multiple(ts) => format!("{ts:?}"),
                        },
                    },
                    _ => Violation::Other {
                        at,
                        message: e.masked().to_string(),
                    },
                }
            })
            .collect()
    }

    fn errors(&self, operation: &str, at: &[&str], body: &Value) -> Vec<String> {
        let v = self.validator(operation, at);
        v.iter_errors(body)
            .map(|e| {
                let path = e.instance_path().to_string();
                format!("${}: {}", path.replace('/', "."), e.masked())
            })
            .collect()
    }

    fn validator(&self, operation: &str, at: &[&str]) -> Arc<Validator> {
        let key = format!("{operation} {}", at.join(" "));
        let mut cache = self.validators.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = cache.get(&key) {
            return v.clone();
        }
        let mut schema = &self.doc["x-operations"][operation];
        for part in at {
            schema = &schema[*part];
        }
        assert!(
            !schema.is_null(),
            "{}: no schema at {operation} {at:?}",
            self.name
        );
        // The operation's schema, with the document's definitions beside it for its `$ref`s.
        let mut root = json!({"$schema": self.doc["$schema"], "$defs": self.doc["$defs"]});
        if let (Some(r), Some(s)) = (root.as_object_mut(), schema.as_object()) {
            r.extend(s.clone());
        }
        let v = Arc::new(
            jsonschema::validator_for(&root)
                .unwrap_or_else(|e| panic!("{}: {operation}: bad schema: {e}", self.name)),
        );
        cache.insert(key, v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vasts_guide_example_is_valid_with_the_errata_and_wrong_types_are_not() {
        let spec = vast();
        assert_eq!(spec.source()["repository"], "vast-ai/docs");
        // api-reference/creating-instances-with-api.mdx: env as an object, a port as a key.
        let example = json!({"image": "vllm/vllm-openai:latest", "label": "vllm-inference-server",
            "disk": 50, "runtype": "ssh_direct",
            "env": {"MODEL_ID": "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "-p 8000:8000": "1"},
            "onstart": "vllm serve $MODEL_ID --port 8000"});
        const CREATE: &str = "PUT /api/v0/asks/{id}";
        assert_eq!(spec.request_errors(CREATE, &example), Vec::<String>::new());
        let mut bad = example.clone();
        bad["runtype"] = json!("docker");
        bad["disk"] = json!("50");
        bad["env"] = json!({"SECRET": 7});
        let errors = spec.request_errors(CREATE, &bad);
        for field in ["$.runtype", "$.disk", "$.env"] {
            assert!(
                errors.iter().any(|e| e.starts_with(field)),
                "{field}: {errors:?}"
            );
        }
        // vast-cli's default order, one [field, direction] pair (the second erratum).
        let search = json!({"order": [["score", "desc"]], "type": "ondemand", "limit": 64});
        assert_eq!(
            spec.request_errors("POST /api/v0/bundles", &search),
            Vec::<String>::new()
        );
        assert!(spec.documents(CREATE, 410));
        assert!(!spec.documents("DELETE /api/v0/instances/{id}", 401));
    }

    #[test]
    fn runpods_documented_example_is_valid_and_unknown_fields_are_not() {
        let spec = runpod();
        assert_eq!(spec.source()["repository"], "runpod/docs");
        let example = json!({"name": "pytorch-training", "image": "runpod/pytorch:1.0.2",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}, "disk": 50});
        assert_eq!(
            spec.request_errors("POST /v2/pods", &example),
            Vec::<String>::new()
        );
        let mut bad = example.clone();
        bad["gpu"]["minRamPerGpu"] = json!(16);
        bad["env"] = json!({"HF_TOKEN": 42});
        let errors = spec.request_errors("POST /v2/pods", &bad);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("$.gpu") && e.contains("minRamPerGpu")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.starts_with("$.env.HF_TOKEN")),
            "{errors:?}"
        );
        assert!(
            !errors.iter().any(|e| e.contains("42")),
            "a value is echoed: {errors:?}"
        );
    }
}
