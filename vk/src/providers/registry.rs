//! Builds provider adapters from the configuration file.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::config::{self, ProviderConfig};
use crate::naming::Owner;
use crate::provider::DynProvider;
use crate::providers::{http::InitError, kubernetes, runpod, slurm, vast};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("provider {name}: unknown kind {kind:?} (known: {KINDS})")]
    UnknownKind { name: String, kind: String },
    #[error("provider {name}: invalid settings: {message}")]
    Settings { name: String, message: String },
    #[error(transparent)]
    Credential(#[from] config::Error),
    #[error(transparent)]
    Init(#[from] InitError),
    #[error("provider {name}: {message}")]
    Preflight { name: String, message: String },
}

/// Kinds of adapters this build knows.
pub const KINDS: &str = "kubernetes, runpod, slurm, vast";

/// Builds every configured provider, in configuration order.
pub fn build(
    providers: &[ProviderConfig],
    owner: &Owner,
) -> Result<Vec<Arc<dyn DynProvider>>, Error> {
    providers.iter().map(|p| build_one(p, owner)).collect()
}

/// Decodes a provider's `settings` (read from the YAML file as a JSON value, since each
/// adapter's own type is known only here); an absent (null) value means all defaults.
pub fn decode_settings<T: DeserializeOwned>(
    settings: &serde_json::Value,
) -> Result<T, serde_json::Error> {
    let value = match settings {
        serde_json::Value::Null => serde_json::Value::Object(Default::default()),
        v => v.clone(),
    };
    serde_json::from_value(value)
}

fn settings<T: DeserializeOwned>(p: &ProviderConfig) -> Result<T, Error> {
    decode_settings(&p.settings).map_err(|e| Error::Settings {
        name: p.name.clone(),
        message: e.to_string(),
    })
}

fn build_one(p: &ProviderConfig, owner: &Owner) -> Result<Arc<dyn DynProvider>, Error> {
    let key = p.api_key()?;
    Ok(match p.kind.as_str() {
        "runpod" => {
            let cfg: runpod::RunPodConfig = settings(p)?;
            Arc::new(runpod::RunPod::new(
                p.name.clone(),
                cfg.with_api_key(key.expose()),
                owner.clone(),
            )?)
        }
        "vast" => {
            let cfg: vast::VastConfig = settings(p)?;
            Arc::new(vast::Vast::new(
                p.name.clone(),
                cfg.with_api_key(key.expose()),
                owner.clone(),
            )?)
        }
        "slurm" => {
            let cfg: slurm::SlurmConfig = settings(p)?;
            Arc::new(slurm::Slurm::new(
                p.name.clone(),
                cfg.with_api_key(key.expose()),
                owner.clone(),
            )?)
        }
        "kubernetes" => Arc::new(kubernetes_adapter(p, key.expose(), owner.clone())?),
        other => {
            return Err(Error::UnknownKind {
                name: p.name.clone(),
                kind: other.to_owned(),
            });
        }
    })
}

fn kubernetes_adapter(
    p: &ProviderConfig,
    key: &str,
    owner: Owner,
) -> Result<kubernetes::Kubernetes, Error> {
    let cfg: kubernetes::KubernetesConfig = settings(p)?;
    Ok(kubernetes::Kubernetes::new(
        p.name.clone(),
        cfg.with_api_key(key),
        owner,
    )?)
}

/// What `vk check-config` verifies beyond the file: each `kubernetes` provider's remote API
/// server answers and its remote namespaces exist.
pub async fn preflight(providers: &[ProviderConfig], owner: &Owner) -> Result<(), Error> {
    for p in providers.iter().filter(|p| p.kind == "kubernetes") {
        let key = p.api_key()?;
        let k = kubernetes_adapter(p, key.expose(), owner.clone())?;
        k.preflight().await.map_err(|message| Error::Preflight {
            name: p.name.clone(),
            message,
        })?;
    }
    Ok(())
}

/// Warnings for `vk check-config`: GPU types the configuration names that a provider cannot
/// map to the provider's own exact names, one line each naming the provider and the type. A
/// pod asking for such a type finds nothing there (Vast matches `gpu_name` exactly; RunPod
/// takes only its GPU ids). Settings that do not decode are left to [`build`], which reports
/// them as errors.
pub fn gpu_type_warnings(providers: &[ProviderConfig]) -> Vec<String> {
    let mut out = Vec::new();
    for p in providers {
        match p.kind.as_str() {
            "vast" => {
                if let Ok(cfg) = decode_settings::<vast::VastConfig>(&p.settings) {
                    out.extend(vast::gpus::unmapped_warnings(
                        &p.name,
                        &cfg.gpu_names,
                        cfg.default_gpu_type.as_deref(),
                    ));
                }
            }
            "runpod" => {
                if let Ok(cfg) = decode_settings::<runpod::RunPodConfig>(&p.settings)
                    && let Some(t) = &cfg.default_gpu_type
                    && !cfg.gpu_ids.contains_key(t)
                {
                    out.push(format!(
                        "provider {}: defaultGpuType {t} is not in gpuIds, so it is sent to \
                         RunPod as a GPU id as written (RunPod ids read like \"NVIDIA GeForce \
                         RTX 4090\"); map it in gpuIds",
                        p.name
                    ));
                }
            }
            // Slurm takes GRES types from `gpuTypes` and refuses a pod whose type is not
            // listed there (or sends the count alone when nothing is): nothing to map.
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn providers(yaml: &str) -> Vec<ProviderConfig> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn unmapped_gpu_types_are_warned_about_per_provider() {
        let ps = providers(
            r#"
- name: vast-ok
  kind: vast
  settings: {defaultGpuType: RTX4090}
- name: vast-typo
  kind: vast
  settings: {defaultGpuType: RTX4009, gpuNames: {A100-80GB: "A100_SXM4"}}
- name: runpod-ok
  kind: runpod
  settings: {defaultGpuType: A100-80GB, gpuIds: {A100-80GB: "NVIDIA A100 80GB PCIe"}}
- name: runpod-raw
  kind: runpod
  settings: {defaultGpuType: H100}
- name: slurm
  kind: slurm
  settings: {gpuTypes: {A100-80GB: a100}}
"#,
        );
        let w = gpu_type_warnings(&ps);
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(w[0].starts_with("provider vast-typo:") && w[0].contains("A100-80GB"));
        assert!(w[0].contains("\"A100_SXM4\""), "{}", w[0]);
        assert!(w[1].starts_with("provider vast-typo:") && w[1].contains("RTX4009"));
        assert!(w[2].starts_with("provider runpod-raw:") && w[2].contains("H100"));
        assert!(gpu_type_warnings(&providers("[]")).is_empty());
    }
}
