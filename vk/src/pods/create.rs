//! Creating a pod's workload: resolve its environment, then try the dispatch candidates in
//! order until one provider accepts it (failover on capacity errors, see
//! [`super::decide::after_create_error`]).

use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::info;

use super::decide::{AfterCreateError, after_create_error, assigned, restart_count};
use super::events::EventType;
use super::reconcile::Action;
use super::spec::{self, Request};
use super::translate::{Situation, reason};
use super::{Error, PodController, env, queue, read, write};
use crate::naming::WorkloadId;
use crate::provider::{Observed, WorkloadState};

impl PodController {
    /// Creates the workload `id` on the first of `candidates` that accepts it. `seen` is when this
    /// process first saw the pod (for the admission latency metric).
    pub(super) async fn create(
        &self,
        pod: &Pod,
        id: WorkloadId,
        req: &Request,
        candidates: &[usize],
        seen: Instant,
    ) -> Result<Action, Error> {
        let uid = id.pod_uid().to_owned();
        let assigned = assigned(pod).unwrap_or_default().to_owned();
        let env = match env::resolve(
            pod,
            &env::KubeSource(self.client.clone()),
            &self.cfg.internal_ip,
        )
        .await
        {
            Ok(env) => env,
            Err(env::Error::Missing(m)) => {
                self.event(
                    pod,
                    EventType::Warning,
                    "Failed",
                    "CreateWorkload",
                    &format!("Error: {m}"),
                );
                let s = Situation::Waiting {
                    reason: reason::CONFIG_ERROR,
                    message: m,
                };
                self.write_status(pod, &s, &assigned).await?;
                return Ok(Action::requeue(queue::backoff(4)));
            }
            Err(env::Error::Invalid(m)) => {
                self.fail(pod, reason::INVALID_SPEC, &m).await?;
                return Ok(Action::await_change());
            }
            Err(e) => return Err(Error::ResolveEnv(e)),
        };
        if !env.skipped.is_empty() {
            // The kubelet's event for the same case.
            self.event(
                pod,
                EventType::Warning,
                "InvalidEnvironmentVariableNames",
                "CreateWorkload",
                &format!(
                    "Keys [{}] from the EnvFrom configMap or secret were skipped since they are \
                     considered invalid environment variable names.",
                    env.skipped.join(", ")
                ),
            );
        }
        let workload = spec::workload(pod, req, id.clone(), env.vars);

        let mut capacity_msgs = Vec::new();
        for &i in candidates {
            let slot = &self.slots[i];
            let name = slot.provider.name().to_owned();
            // An earlier attempt on this provider may have created the workload even though it
            // failed for us (timeout, crash): only a list that began after it can tell. This is
            // what lets adapters create without looking up the name first.
            if read(&self.recent).created.contains_key(&(i, uid.clone())) {
                return Ok(Action::requeue(self.cfg.timings.poll_interval()));
            }
            write(&self.recent)
                .created
                .insert((i, uid.clone()), Instant::now());
            let call = Instant::now();
            let result = slot.provider.create(&workload).await;
            let call = call.elapsed();
            // Only a list that began after the provider answered is sure to show the workload:
            // a list sent while the create was in flight may be served before it (seen under
            // load: the workload judged vanished and the pod failed with ProviderLost).
            write(&self.recent)
                .created
                .insert((i, uid.clone()), Instant::now());
            let e = match result {
                Ok(()) => {
                    let obs = Observed {
                        id: id.clone(),
                        provider_id: String::new(),
                        state: WorkloadState::Queued { reason: None },
                        message: None,
                        created_at: Some(Timestamp::now()),
                        started_at: None,
                        finished_at: None,
                        ip: None,
                        provider_restarts: 0,
                        usage: None,
                    };
                    write(&slot.cache).insert(uid.clone(), obs.clone());
                    let waited = seen.elapsed();
                    if restart_count(pod) == 0 {
                        // Relaunches after a restart back-off are not admission latency.
                        self.metrics.create_latency.observe(waited.as_secs_f64());
                    }
                    info!(namespace = pod.namespace().unwrap_or_default(), pod = pod.name_any(), uid, provider = %name, workload = %id, since_seen_ms = waited.as_millis() as u64, provider_ms = call.as_millis() as u64, "created workload");
                    // The status write also records the chosen provider on the pod.
                    self.write_status(pod, &Situation::Observed(&obs), &name)
                        .await?;
                    self.event(
                        pod,
                        EventType::Normal,
                        "Created",
                        "CreateWorkload",
                        &format!("created workload {id} on provider {name}"),
                    );
                    return Ok(Action::await_change());
                }
                Err(e) => e,
            };
            match after_create_error(&name, &e) {
                AfterCreateError::NextCandidate => {
                    let message = match &e {
                        crate::provider::ProviderError::Capacity { message } => message.clone(),
                        other => other.to_string(),
                    };
                    self.event(
                        pod,
                        EventType::Warning,
                        reason::PROVIDER_CAPACITY,
                        "CreateWorkload",
                        &format!("provider {name} has no capacity: {message}"),
                    );
                    capacity_msgs.push(format!("{name}: {message}"));
                }
                AfterCreateError::Fail { reason, message } => {
                    self.fail(pod, reason, &message).await?;
                    return Ok(Action::await_change());
                }
                AfterCreateError::Retry(after) => {
                    self.event(
                        pod,
                        EventType::Warning,
                        reason::PROVIDER_ERROR,
                        "CreateWorkload",
                        &format!("provider {name}: {e}"),
                    );
                    let s = Situation::Waiting {
                        reason: reason::PROVIDER_ERROR,
                        message: format!("provider {name}: {e}"),
                    };
                    self.write_status(pod, &s, &name).await?;
                    return match after {
                        Some(d) => Ok(Action::requeue(d)),
                        None => Err(Error::Provider {
                            provider: name,
                            source: e,
                        }),
                    };
                }
            }
        }
        let msg = format!("no provider has capacity ({})", capacity_msgs.join("; "));
        let s = Situation::Waiting {
            reason: reason::PROVIDER_CAPACITY,
            message: msg,
        };
        self.write_status(pod, &s, &assigned).await?;
        Ok(Action::requeue(
            self.cfg.timings.poll_interval().max(queue::backoff(3)),
        ))
    }
}
