//! GPU-offload virtual kubelet: one Kubernetes node that runs its pods on external providers.
//!
//! Where things live: [`node`] registers the Node; [`pods`] is the pod pipeline (watch, queue,
//! the pure `decide`, create/restart/delete, provider observation, garbage collection, status
//! writes, start-up); [`provider`] is the adapter contract (and the call layer every provider
//! sits behind) and [`providers`] the adapters, which [`providers::registry`] builds from
//! [`config`]; [`kubelet_api`] serves logs, exec and stats; [`telemetry`] is metrics and logs;
//! [`leader`] lets several replicas serve one node, one at a time; [`overflow`] is the offload
//! policy (admission webhook and reclaim) of `vk overflow`; [`admission`] refuses at create time
//! the pods this node would refuse.
//! `docs/architecture.md` draws the data flow and what may import what.

pub mod admission;
pub mod config;
pub mod endpoints;
pub mod kubelet_api;
pub mod leader;
pub mod naming;
pub mod node;
pub mod overflow;
pub mod pods;
pub mod provider;
pub mod providers;
pub mod supervise;
pub mod telemetry;
pub mod tls;
pub mod vocab;

#[cfg(test)]
pub(crate) mod fuzz;
#[cfg(test)]
pub(crate) mod test_support;
