//! The statuses of a pod's containers beside the one the provider runs: the ends the provider
//! observed per container, and the containers it does not run (left out, init, sidecars).

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Context, reason};
use crate::provider::Observed;

/// What [`apply_exits`] found.
pub(super) struct Ended {
    /// An init container failed: the regular containers never ran.
    pub init_failed: bool,
    /// Regular containers that ended while the pod runs (so it is not ready).
    pub unready: Vec<String>,
}

/// Gives each container whose own end the provider observed ([`Observed::container_exits`])
/// that end (its exit code, Completed or Error), as the kubelet reports each container of a
/// pod; after a failed init container, the containers that never ran wait with
/// PodInitializing, as on a kubelet (`pkg/kubelet/kubelet_pods.go`, the init containers'
/// waiting reason), and a container that ended makes the pod not Ready with the kubelet's
/// message (`pkg/kubelet/status/generate.go`: "containers with unready status: [...]").
pub(super) fn apply_exits(
    pod: &Pod,
    obs: &Observed,
    cx: &Context<'_>,
    statuses: &mut [ContainerStatus],
    init_statuses: Option<&mut [ContainerStatus]>,
    phase: &str,
) -> Ended {
    let exits = &obs.container_exits;
    let ended = |s: &mut ContainerStatus, e: &crate::provider::ContainerExit| {
        s.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: e.exit_code,
                reason: Some(
                    if e.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .into(),
                ),
                message: Some(format!("run by provider {} as a job step", cx.provider)),
                started_at: obs.started_at.map(Time),
                finished_at: e.finished_at.or(obs.finished_at).map(Time),
                container_id: s.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
        s.ready = false;
        s.started = Some(false);
    };
    let waits = |s: &mut ContainerStatus| {
        s.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason::POD_INITIALIZING.into()),
                message: None,
            }),
            ..Default::default()
        });
        s.ready = false;
        s.started = Some(false);
    };
    // A native sidecar's code (143 after the SIGTERM at the end) fails nothing.
    let sidecars: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| crate::pods::spec::is_sidecar(c))
        .map(|c| c.name.as_str())
        .collect();
    let mut init_failed = false;
    for s in init_statuses.into_iter().flatten() {
        match exits.get(&s.name) {
            Some(e) => {
                init_failed |= e.exit_code != 0 && !sidecars.contains(&s.name.as_str());
                ended(s, e);
            }
            // After a failed one, the later init containers never started.
            None if init_failed => waits(s),
            None => {}
        }
    }
    let mut unready = Vec::new();
    for s in statuses.iter_mut() {
        let left_out = s
            .state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .and_then(|t| t.reason.as_deref())
            == Some(reason::NOT_RUN_ON_PROVIDER);
        if left_out {
            continue;
        }
        if let Some(e) = exits.get(&s.name) {
            ended(s, e);
            if phase == "Running" {
                unready.push(s.name.clone());
            }
        } else if init_failed {
            waits(s);
        }
    }
    Ended {
        init_failed,
        unready,
    }
}

/// The statuses of every container of the pod, `main` (the one the provider runs) among them in
/// spec order, and of its init containers: those left out (`gpu-vk.io/omit-containers`) say so,
/// init containers wait until the workload runs and are done once it has (they run before
/// the main command in the same workload; their own progress is not observed).
///
/// With [`Context::all_containers`], the others that run share the main container's state (one
/// job runs them all; per-container exit codes are not observed), native sidecars among the
/// init statuses, and init containers are done once the job runs its regular containers.
pub(super) fn others(
    pod: &Pod,
    main: ContainerStatus,
    initialized: bool,
    cx: &Context<'_>,
) -> (Vec<ContainerStatus>, Option<Vec<ContainerStatus>>) {
    let omitted = crate::pods::spec::omitted(pod);
    let runs = |c: &Container| cx.all_containers && !omitted.contains(&c.name.as_str());
    let main_status = main.clone();
    let Some(spec) = pod.spec.as_ref() else {
        return (vec![main], None);
    };
    let mut main = Some(main);
    let statuses = spec
        .containers
        .iter()
        .filter_map(|c| {
            if main.as_ref().is_some_and(|m| m.name == c.name) {
                main.take()
            } else if runs(c) {
                Some(like_main(&main_status, c))
            } else {
                Some(left_out(c, cx.provider))
            }
        })
        .collect();
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return (statuses, None);
    }
    let init_statuses = inits
        .iter()
        .map(|c| {
            if !crate::pods::spec::is_sidecar(c) {
                init_status(c, initialized, cx)
            } else if runs(c) {
                like_main(&main_status, c)
            } else {
                left_out(c, cx.provider)
            }
        })
        .collect();
    (statuses, Some(init_statuses))
}

/// A container run in the same job as the main one: it has the main container's state, as
/// its own exit is not observed.
fn like_main(main: &ContainerStatus, c: &Container) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        container_id: main
            .container_id
            .as_ref()
            .map(|id| format!("{id}/{}", c.name)),
        ..main.clone()
    }
}

/// A container `provider` does not run: ended before it started, saying why.
fn left_out(c: &Container, provider: &str) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        started: Some(false),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some(reason::NOT_RUN_ON_PROVIDER.into()),
                message: Some(format!(
                    "not run: left out on provider {provider} by gpu-vk.io/omit-containers (a \
                     provider runs one container)"
                )),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An init container that is not a sidecar: done once the pod is `initialized`, waiting with
/// PodInitializing until then.
fn init_status(c: &Container, initialized: bool, cx: &Context<'_>) -> ContainerStatus {
    let provider = cx.provider;
    let how = if cx.all_containers {
        "as a job step before the containers (a failure ends the job with its exit code)"
    } else {
        "before the main command, in the same workload (a failure ends the workload with its \
         exit code)"
    };
    let state = if initialized {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                message: Some(format!("run by provider {provider} {how}")),
                ..Default::default()
            }),
            ..Default::default()
        }
    } else {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason::POD_INITIALIZING.into()),
                message: None,
            }),
            ..Default::default()
        }
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        started: Some(false),
        ready: initialized,
        state: Some(state),
        ..Default::default()
    }
}
