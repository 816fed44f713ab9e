//! One builder for the provider-level [`Workload`] the adapter tests hand to `create`, so a
//! test's workload reads like its scenario:
//!
//! ```ignore
//! WorkloadBuilder::new(&owner, POD_UID)
//!     .pod("ml", "train-0")
//!     .image("ghcr.io/acme/train:1.2")
//!     .command(["python", "-m", "train"])
//!     .env("MODE", "fast")
//!     .gpu("RTX4090", 2)
//!     .build()
//! ```
//!
//! Include it with `#[path = "support/workload.rs"] mod workload_builder;`.
#![allow(dead_code)]

use vk::naming::Owner;
use vk::provider::{ContainerRole, EnvVar, GpuRequest, PodContainer, Workload};

/// Builds a [`Workload`]; what is not set stays empty (no command, env, GPU or resources).
#[derive(Clone, Debug)]
pub struct WorkloadBuilder {
    owner: Owner,
    pod_uid: String,
    workload: Workload,
}

impl WorkloadBuilder {
    /// The workload of pod `pod_uid` owned by `owner`: pod `default/p`, container `main`,
    /// image `busybox`, nothing requested.
    pub fn new(owner: &Owner, pod_uid: &str) -> Self {
        Self {
            owner: owner.clone(),
            pod_uid: pod_uid.into(),
            workload: Workload {
                id: workload_id(owner, pod_uid),
                namespace: "default".into(),
                pod_name: "p".into(),
                container_name: "main".into(),
                image: "busybox".into(),
                command: vec![],
                args: vec![],
                working_dir: None,
                env: vec![],
                gpu: None,
                cpu_millis: None,
                memory_bytes: None,
                ports: vec![],
                options: Default::default(),
                containers: Vec::new(),
                hardening: Default::default(),
                registry_logins: Vec::new(),
            },
        }
    }

    /// A pod with a fresh random UID (tests that create many workloads on one backend).
    pub fn fresh(owner: &Owner) -> Self {
        Self::new(owner, &uuid::Uuid::new_v4().to_string())
    }

    /// Another pod UID, so another workload id; everything else kept.
    pub fn pod_uid(mut self, pod_uid: &str) -> Self {
        self.workload.id = workload_id(&self.owner, pod_uid);
        self.pod_uid = pod_uid.into();
        self
    }

    /// Owned by another VK (cluster and node), so another workload id; everything else kept.
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.workload.id = workload_id(owner, &self.pod_uid);
        self.owner = owner.clone();
        self
    }

    pub fn pod(mut self, namespace: &str, name: &str) -> Self {
        self.workload.namespace = namespace.into();
        self.workload.pod_name = name.into();
        self
    }

    pub fn container(mut self, name: &str) -> Self {
        self.workload.container_name = name.into();
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        self.workload.image = image.into();
        self
    }

    /// The container's command (replaces any earlier one).
    pub fn command<S: Into<String>>(mut self, command: impl IntoIterator<Item = S>) -> Self {
        self.workload.command = command.into_iter().map(Into::into).collect();
        self
    }

    /// `/bin/bash -c <script>`.
    pub fn bash(self, script: &str) -> Self {
        self.command(["/bin/bash", "-c", script])
    }

    /// The container's args (replace any earlier ones).
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.workload.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// No command and no args: the image's own entrypoint and CMD run.
    pub fn image_entrypoint(mut self) -> Self {
        self.workload.command.clear();
        self.workload.args.clear();
        self
    }

    pub fn working_dir(mut self, dir: &str) -> Self {
        self.workload.working_dir = Some(dir.into());
        self
    }

    /// Appends one environment variable.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.workload.env.push(EnvVar {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// `count` GPUs of the pod's type `gpu_type` (as in its resource or selector).
    pub fn gpu(mut self, gpu_type: &str, count: u32) -> Self {
        self.workload.gpu = Some(GpuRequest {
            gpu_type: Some(gpu_type.into()),
            count,
        });
        self
    }

    /// No GPU requested.
    pub fn no_gpu(mut self) -> Self {
        self.workload.gpu = None;
        self
    }

    /// `count` GPUs of any type.
    pub fn any_gpu(mut self, count: u32) -> Self {
        self.workload.gpu = Some(GpuRequest {
            gpu_type: None,
            count,
        });
        self
    }

    pub fn cpu_millis(mut self, millis: u64) -> Self {
        self.workload.cpu_millis = Some(millis);
        self
    }

    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.workload.memory_bytes = Some(bytes);
        self
    }

    /// No CPU or memory request.
    pub fn no_cpu_memory(mut self) -> Self {
        self.workload.cpu_millis = None;
        self.workload.memory_bytes = None;
        self
    }

    /// Appends one exposed port.
    pub fn port(mut self, port: u16) -> Self {
        self.workload.ports.push(port);
        self
    }

    /// Adds a registry login the pod's images pull with.
    pub fn login(mut self, registry: &str, username: &str, password: &str) -> Self {
        self.workload
            .registry_logins
            .push(vk::provider::RegistryLogin {
                registry: registry.into(),
                username: username.into(),
                password: password.into(),
            });
        self
    }

    /// Sets one provider option (a pod's `gpu-vk.io/<key>` annotation).
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.workload.options.insert(key.into(), value.into());
        self
    }

    /// Adds a container of the pod (in order: init containers before regular ones) running
    /// `script` in bash, with its own `env`, for providers that run each container.
    pub fn step_container(
        mut self,
        name: &str,
        role: ContainerRole,
        script: &str,
        env: &[(&str, &str)],
    ) -> Self {
        self.workload.containers.push(PodContainer {
            name: name.into(),
            role,
            image: "busybox".into(),
            command: vec!["/bin/bash".into(), "-c".into(), script.into()],
            args: vec![],
            working_dir: Some("/tmp".into()),
            env: env
                .iter()
                .map(|(n, v)| EnvVar {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        });
        self
    }

    pub fn build(self) -> Workload {
        self.workload
    }
}

fn workload_id(owner: &Owner, pod_uid: &str) -> vk::naming::WorkloadId {
    owner
        .workload_id(pod_uid)
        .unwrap_or_else(|| panic!("{pod_uid:?} is not a pod UID"))
}
