//! What a pod's object says that decisions read (its controller, assigned provider, current
//! container and restarts), and what a failed create means for it.

use super::*;

/// The owner that would replace the pod if it failed (its controller reference).
pub fn controller_of(
    pod: &Pod,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// The provider the VK recorded on the pod.
pub fn assigned(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(ANN_ASSIGNED)
        .map(String::as_str)
}

/// The status of the container the provider runs.
pub fn current_container(pod: &Pod) -> Option<&ContainerStatus> {
    let name = &crate::pods::spec::main_container(pod)?.name;
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == *name)
}

/// Container restarts recorded on the pod.
pub fn restart_count(pod: &Pod) -> i32 {
    current_container(pod).map(|c| c.restart_count).unwrap_or(0)
}

/// What a failed create attempt on one candidate means for the pod.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterCreateError {
    /// The provider has no room: try the next candidate.
    NextCandidate,
    /// The provider says the pod can never run as it is.
    Fail {
        reason: &'static str,
        message: String,
    },
    /// Try the same provider again: after `Some(delay)` (the provider's Retry-After), or
    /// with the queue's back-off.
    Retry(Option<Duration>),
}

/// Failover: how a provider's create error is acted on.
pub fn after_create_error(provider: &str, e: &ProviderError) -> AfterCreateError {
    match e {
        ProviderError::Capacity { .. } => AfterCreateError::NextCandidate,
        ProviderError::Invalid { message } => AfterCreateError::Fail {
            reason: reason::INVALID_SPEC,
            message: format!("provider {provider} rejected the pod: {message}"),
        },
        ProviderError::Transient {
            retry_after: Some(d),
            ..
        } => AfterCreateError::Retry(Some(*d)),
        _ => AfterCreateError::Retry(None),
    }
}
