//! Builds provider adapters from the configuration file.

use std::sync::Arc;

use crate::config::{self, ProviderConfig};
use crate::naming::Owner;
use crate::provider::DynProvider;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("provider {name}: unknown kind {kind:?} (known: {known})")]
    UnknownKind {
        name: String,
        kind: String,
        known: &'static str,
    },
    #[error("provider {name}: invalid settings: {message}")]
    Settings { name: String, message: String },
    #[error(transparent)]
    Credential(#[from] config::Error),
}

/// Kinds of adapters this build knows.
pub const KINDS: &str = "";

/// Builds every configured provider, in configuration order.
pub fn build(
    providers: &[ProviderConfig],
    owner: &Owner,
) -> Result<Vec<Arc<dyn DynProvider>>, Error> {
    providers.iter().map(|p| build_one(p, owner)).collect()
}

fn build_one(p: &ProviderConfig, _owner: &Owner) -> Result<Arc<dyn DynProvider>, Error> {
    let _key = p.api_key()?;
    Err(Error::UnknownKind {
        name: p.name.clone(),
        kind: p.kind.clone(),
        known: KINDS,
    })
}
