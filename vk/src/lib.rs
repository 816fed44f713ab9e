//! GPU-offload virtual kubelet: one Kubernetes node that runs its pods on external providers.
//!
//! Where things live: [`node`] registers the Node; [`framework`] watches pods, observes
//! providers, reconciles and writes pod status (through the pure [`translate`]); [`dispatch`]
//! picks providers; [`spec`] and [`env`] read what a pod asks for; [`provider`] is the
//! adapter contract and [`providers`] the adapters, which [`providers::registry`] builds from
//! [`config`].

pub mod config;
pub mod dispatch;
pub mod env;
pub mod events;
pub mod framework;
pub mod kubelet_api;
pub mod naming;
pub mod node;
pub mod provider;
pub mod providers;
pub mod spec;
pub mod telemetry;
pub mod translate;
