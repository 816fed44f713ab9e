//! Builds provider adapters from the configuration file.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::config::{self, ProviderConfig};
use crate::naming::Owner;
use crate::provider::DynProvider;
use crate::providers::{http::InitError, runpod, slurm, vast};

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
}

/// Kinds of adapters this build knows.
pub const KINDS: &str = "runpod, slurm, vast";

/// Builds every configured provider, in configuration order.
pub fn build(
    providers: &[ProviderConfig],
    owner: &Owner,
) -> Result<Vec<Arc<dyn DynProvider>>, Error> {
    providers.iter().map(|p| build_one(p, owner)).collect()
}

/// Decodes a provider's `settings`; an absent (null) value means all defaults.
pub fn decode_settings<T: DeserializeOwned>(
    settings: &serde_yaml::Value,
) -> Result<T, serde_yaml::Error> {
    let value = match settings {
        serde_yaml::Value::Null => serde_yaml::Value::Mapping(Default::default()),
        v => v.clone(),
    };
    serde_yaml::from_value(value)
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
        other => {
            return Err(Error::UnknownKind {
                name: p.name.clone(),
                kind: other.to_owned(),
            });
        }
    })
}
