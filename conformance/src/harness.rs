//! Harness for cluster tests and the conformance suite: the real testbed (KUBECONFIG from
//! `make test`), provider emulators served in-process over HTTP (RunPod, Vast, slurmrestd), the
//! real single-node Slurm of `make slurm-up` observed through its REST API, and the `vk`
//! binary run as a child process (so scenarios can `kill -9` it), or, with `VK_MODE=pod`
//! (`make e2e KIND=1`), as a pod of a kind cluster installed by the Helm chart ([`pod`]).
//!
//! Steps look at the provider side through an [`Observer`]: an emulator's `/_admin` API,
//! slurmrestd's own job list for a real Slurm (which has no admin API, so only the generic
//! views exist there: all workloads, live ones, those of one pod), or for another Kubernetes
//! cluster its remote pods and a proxy in front of its API server ([`kubernetes`]).
//!
//! Test support code: failing loudly (panics with a message) is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mock_providers::config::{EmulatorConfig, ExecutionMode, GpuStock};
pub use mock_providers::slurm::Dialect as SlurmDialect;
use serde_json::{Value, json};

mod cluster;
mod emulator;
pub mod ha;
pub mod kubernetes;
pub mod lab;
mod observer;
pub mod pod;
mod real_slurm;
mod vk;

pub use cluster::*;
pub use emulator::*;
pub use observer::*;
pub use real_slurm::*;
pub use vk::*;

/// The API key (RunPod, Vast) or JWT (Slurm) every emulator accepts; the VK gets it through
/// `apiKeyEnv: TEST_PROVIDER_KEY`.
pub const API_KEY: &str = "emulator-key-7f3a";
/// The Slurm user of the slurmrestd emulator (`X-SLURM-USER-NAME`).
pub const SLURM_EMULATOR_USER: &str = "vkslurm";
