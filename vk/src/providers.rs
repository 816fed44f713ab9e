//! Provider adapters: one module per backend, each implementing [`crate::provider::Provider`],
//! over one HTTP client with pluggable authentication ([`http`]) and the shared pod options
//! ([`options`]); [`registry`] builds them from the configuration.

pub(crate) mod cpu;
pub mod http;
pub mod kubernetes;
pub mod options;
pub mod registry;
pub mod rest;
pub mod runpod;
pub mod slurm;
pub mod vast;

use crate::naming::Owner;
use crate::provider::{ProviderError, Workload};

/// Refuses a workload that does not carry this VK's ownership marker: an adapter only creates
/// what its `list()` recognises as this VK's own.
pub(crate) fn ensure_owned(owner: &Owner, w: &Workload) -> Result<(), ProviderError> {
    if owner.owns(&w.id) {
        return Ok(());
    }
    Err(ProviderError::Invalid {
        message: format!(
            "workload {} does not carry this VK's ownership marker",
            w.id
        ),
    })
}
