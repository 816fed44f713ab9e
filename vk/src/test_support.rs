//! Builders for unit tests: a pod and a workload that read like the scenario
//! (`PodBuilder::new().gpus("1").restart_policy("Never").running("runpod").build()`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, EnvFromSource, EnvVar as KEnv, Pod, PodSpec, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use crate::naming::Owner;
use crate::pods::spec::{ANN_ASSIGNED, GPU_RESOURCE};
use crate::provider::{EnvVar, GpuRequest, Observed, Workload, WorkloadState};

/// The UID every test pod has unless told otherwise.
pub const UID: &str = "8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b";

/// The owner (cluster id, node name) test workloads belong to.
pub fn owner() -> Owner {
    Owner::new("c1", "vk-gpu")
}

pub fn ts(s: &str) -> Timestamp {
    s.parse()
        .unwrap_or_else(|e| panic!("bad timestamp {s:?}: {e}"))
}

/// A pod bound to the virtual node: `research/train-0`, one container `trainer`.
pub struct PodBuilder {
    pod: Pod,
}

impl Default for PodBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PodBuilder {
    pub fn new() -> Self {
        Self {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some("train-0".into()),
                    namespace: Some("research".into()),
                    uid: Some(UID.into()),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "trainer".into(),
                        image: Some("ghcr.io/acme/train:1".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                status: None,
            },
        }
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    pub fn name(mut self, namespace: &str, name: &str) -> Self {
        self.pod.metadata.namespace = Some(namespace.into());
        self.pod.metadata.name = Some(name.into());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }

    pub fn resource_version(mut self, rv: &str) -> Self {
        self.pod.metadata.resource_version = Some(rv.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(key.into(), value.into());
        self
    }

    /// The provider the VK recorded on the pod.
    pub fn assigned(self, provider: &str) -> Self {
        self.annotation(ANN_ASSIGNED, provider)
    }

    pub fn deleting(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(ts("2026-11-29T11:00:00Z")));
        self
    }

    fn container(&mut self) -> &mut Container {
        let spec = self.pod.spec.get_or_insert_default();
        if spec.containers.is_empty() {
            spec.containers.push(Container::default());
        }
        &mut spec.containers[0]
    }

    pub fn container_name(mut self, name: &str) -> Self {
        self.container().name = name.into();
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        self.container().image = Some(image.into());
        self
    }

    /// A resource limit of the container (`nvidia.com/gpu`, `cpu`, `memory`...).
    pub fn limit(mut self, resource: &str, quantity: &str) -> Self {
        self.container()
            .resources
            .get_or_insert_with(ResourceRequirements::default)
            .limits
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.into(), Quantity(quantity.into()));
        self
    }

    pub fn gpus(self, count: &str) -> Self {
        self.limit(GPU_RESOURCE, count)
    }

    pub fn env(mut self, env: Vec<KEnv>) -> Self {
        self.container().env = Some(env);
        self
    }

    pub fn env_from(mut self, env_from: Vec<EnvFromSource>) -> Self {
        self.container().env_from = Some(env_from);
        self
    }

    /// The pod's `imagePullSecrets`, by name.
    pub fn pull_secrets(mut self, names: &[&str]) -> Self {
        self.pod.spec.get_or_insert_default().image_pull_secrets = Some(
            names
                .iter()
                .map(|n| k8s_openapi::api::core::v1::LocalObjectReference { name: (*n).into() })
                .collect(),
        );
        self
    }

    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.pod.spec.get_or_insert_default().restart_policy = Some(policy.into());
        self
    }

    pub fn spec(mut self, f: impl FnOnce(&mut PodSpec)) -> Self {
        f(self.pod.spec.get_or_insert_default());
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.pod.status.get_or_insert_default().phase = Some(phase.into());
        self
    }

    pub fn status(mut self, f: impl FnOnce(&mut PodStatus)) -> Self {
        f(self.pod.status.get_or_insert_default());
        self
    }

    fn container_status(&mut self) -> &mut ContainerStatus {
        let name = self.container().name.clone();
        let statuses = self
            .pod
            .status
            .get_or_insert_default()
            .container_statuses
            .get_or_insert_default();
        if statuses.is_empty() {
            statuses.push(ContainerStatus {
                name,
                ..Default::default()
            });
        }
        &mut statuses[0]
    }

    /// The pod as the VK reports it once its workload on `provider` runs.
    pub fn running(mut self, provider: &str) -> Self {
        let cs = self.container_status();
        cs.container_id = Some(format!("{provider}://{}", workload_id()));
        cs.state = Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(ts("2026-11-29T10:00:05Z"))),
            }),
            ..Default::default()
        });
        cs.ready = true;
        self.assigned(provider).phase("Running")
    }

    /// The pod as the VK reports it while a container that ended at `finished` (after
    /// `restarts` restarts) waits out its restart back-off: its workload was deleted, so the
    /// status holds no container id.
    pub fn crash_looping(mut self, provider: &str, restarts: i32, finished: &str) -> Self {
        let cs = self.container_status();
        cs.restart_count = restarts;
        cs.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..Default::default()
        });
        cs.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                finished_at: Some(Time(ts(finished))),
                ..Default::default()
            }),
            ..Default::default()
        });
        self.assigned(provider).phase("Running")
    }
}

/// The workload id of the test pod.
pub fn workload_id() -> crate::naming::WorkloadId {
    owner()
        .workload_id(UID)
        .unwrap_or_else(|| panic!("{UID} is a UUID"))
}

/// What a provider lists for the test pod's workload in `state`.
pub fn observed(state: WorkloadState) -> Observed {
    Observed {
        id: workload_id(),
        provider_id: "rp-123".into(),
        state,
        message: None,
        created_at: Some(ts("2026-11-29T10:00:00Z")),
        started_at: Some(ts("2026-11-29T10:00:05Z")),
        finished_at: None,
        ip: Some("10.1.2.3".into()),
        provider_restarts: 0,
        ports: Default::default(),
        usage: None,
        price: None,
        container_exits: Default::default(),
        pull_failure: None,
    }
}

/// A resolved workload for the test pod: one RTX 4090, an image, a command and two variables.
pub fn workload() -> Workload {
    Workload {
        id: workload_id(),
        namespace: "research".into(),
        pod_name: "train-0".into(),
        container_name: "trainer".into(),
        image: "ghcr.io/acme/train:1".into(),
        command: vec!["python".into(), "-m".into(), "train".into()],
        args: vec![],
        working_dir: None,
        env: vec![EnvVar {
            name: "MODE".into(),
            value: "fast".into(),
        }],
        gpu: Some(GpuRequest {
            gpu_type: Some("RTX4090".into()),
            count: 1,
        }),
        cpu_millis: None,
        memory_bytes: None,
        ports: vec![],
        options: BTreeMap::new(),
        containers: Vec::new(),
        hardening: Default::default(),
        registry_logins: Vec::new(),
    }
}
