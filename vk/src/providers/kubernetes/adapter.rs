//! The [`Provider`] implementation of [`Kubernetes`]: create, delete and list remote pods,
//! their logs, exec and usage through the remote API server.

use std::collections::HashMap;

use bytes::Bytes;
use futures::SinkExt as _;
use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Api;
use kube::api::{AttachParams, DeleteParams, ListParams, LogParams, PostParams, Preconditions};
use tracing::{debug, info, warn};

use super::state::{self, PodUsage, parse_provider_id};
use super::{Kubernetes, api_error, spec, status_code};
use crate::provider::{
    Capabilities, ExecRequest, ExecSession, Inventory, LogOptions, LogStream, Observed, Price,
    Provider, ProviderError, Workload, WorkloadState,
};

const READ_CHUNK: usize = 16 * 1024;

impl Kubernetes {
    fn parse_id<'a>(
        &self,
        provider_id: &'a str,
    ) -> Result<(&'a str, &'a str, &'a str), ProviderError> {
        parse_provider_id(provider_id).ok_or_else(|| ProviderError::Invalid {
            message: format!("{provider_id:?} is not a remote pod id (namespace/name/uid)"),
        })
    }

    /// CPU and memory of this VK's remote pods in `ns`, by pod name; `None` when the remote
    /// cluster serves no metrics API (or refuses it).
    async fn usage(&self, client: &kube::Client, ns: &str) -> Option<HashMap<String, PodUsage>> {
        let selector = spec::selector(&self.owner);
        let url = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector={}",
            selector.replace('/', "%2F").replace('=', "%3D")
        );
        let req = axum::http::Request::get(url).body(Vec::new()).ok()?;
        let value: serde_json::Value = match self
            .call("list pod metrics", client.request(req))
            .await
        {
            Ok(v) => v,
            Err(e) => {
                debug!(provider = %self.name, namespace = ns, error = %e, "no usage from the remote metrics API");
                return None;
            }
        };
        Some(parse_pod_metrics(&value))
    }

    /// Writes the environment and pull Secrets of `w`, owned by its just created remote pod
    /// `uid`. A Secret of that name left by an earlier attempt is replaced. If one cannot be
    /// written, the pod (which would wait for it for ever) is deleted and the create fails, to
    /// be retried.
    async fn create_owned_secrets(
        &self,
        w: &Workload,
        ns: &str,
        uid: &str,
    ) -> Result<(), ProviderError> {
        let env = spec::env_secret(&self.cfg, &self.owner, w, uid)
            .map(|s| ("create remote environment Secret", s));
        let pull = spec::pull_secret(&self.cfg, &self.owner, w, uid)
            .map(|s| ("create remote pull Secret", s));
        for (what, secret) in env.into_iter().chain(pull) {
            self.write_owned_secret(w, ns, what, &secret).await?;
        }
        Ok(())
    }

    async fn write_owned_secret(
        &self,
        w: &Workload,
        ns: &str,
        what: &'static str,
        secret: &Secret,
    ) -> Result<(), ProviderError> {
        let client = self.client().await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let written = match self
            .call_raw(what, secrets.create(&PostParams::default(), secret))
            .await?
        {
            // Left by an earlier pod of this workload that the remote cluster has not collected
            // yet: ours now (owner and values replaced, so the collector keeps it).
            Err(e) if status_code(&e) == Some(409) => self
                .call_raw(what, secrets.replace(name, &PostParams::default(), secret))
                .await?
                .map(|_| ()),
            r => r.map(|_| ()),
        };
        let Err(e) = written else {
            return Ok(());
        };
        let err = api_error(what, e);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        if let Err(e) = self.pods(client, ns).delete(w.id.as_str(), &dp).await {
            warn!(provider = %self.name, workload = %w.id, error = %e, "cannot delete the remote pod whose Secret failed");
        }
        Err(err)
    }
}

/// `PodMetricsList` -> usage by pod name (containers summed).
pub fn parse_pod_metrics(v: &serde_json::Value) -> HashMap<String, PodUsage> {
    let mut out = HashMap::new();
    for item in v["items"].as_array().into_iter().flatten() {
        let Some(name) = item["metadata"]["name"].as_str() else {
            continue;
        };
        let mut u = PodUsage::default();
        for c in item["containers"].as_array().into_iter().flatten() {
            u.cpu_millis += c["usage"]["cpu"].as_str().and_then(cpu_millis).unwrap_or(0);
            u.memory_bytes += c["usage"]["memory"]
                .as_str()
                .and_then(|q| crate::vocab::quantity::parse_memory(q).ok())
                .unwrap_or(0);
        }
        out.insert(name.to_owned(), u);
    }
    out
}

/// A CPU quantity as metrics-server writes it (`123456789n`, `250u`, `5m`, `1`) in millicores.
fn cpu_millis(q: &str) -> Option<u64> {
    if let Some(n) = q.strip_suffix('n') {
        return n.parse::<u64>().ok().map(|n| n / 1_000_000);
    }
    if let Some(u) = q.strip_suffix('u') {
        return u.parse::<u64>().ok().map(|u| u / 1_000);
    }
    crate::vocab::quantity::parse_cpu(q).ok()
}

/// One read of up to a buffer's length from a reader (futures' or tokio's `AsyncRead`).
type ReadOnce<R> = for<'a> fn(&'a mut R, &'a mut [u8]) -> BoxFuture<'a, std::io::Result<usize>>;

/// Reads `reader` with `read` as a stream of chunks; ends at EOF or after the first error.
fn read_chunks<R: Send + 'static>(reader: R, read: ReadOnce<R>, what: &'static str) -> LogStream {
    Box::pin(futures::stream::unfold(Some(reader), move |r| async move {
        let mut r = r?;
        let mut buf = vec![0u8; READ_CHUNK];
        match read(&mut r, &mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(r)))
            }
            Err(e) => Some((
                Err(ProviderError::transient(format!("{what} ended: {e}"))),
                None,
            )),
        }
    }))
}

/// A futures reader (the remote log stream) as chunks.
fn chunks<R>(reader: R, what: &'static str) -> LogStream
where
    R: futures::AsyncRead + Send + Unpin + 'static,
{
    read_chunks(
        reader,
        |r, b| Box::pin(futures::AsyncReadExt::read(r, b)),
        what,
    )
}

/// A tokio reader (an exec session's output) as chunks.
fn tokio_chunks<R>(reader: R) -> LogStream
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
{
    read_chunks(
        reader,
        |r, b| Box::pin(tokio::io::AsyncReadExt::read(r, b)),
        "exec stream",
    )
}

/// The exit code in an exec's final status: 0 on success, the `ExitCode` cause otherwise.
pub fn exit_code(status: Option<&Status>) -> Result<i32, ProviderError> {
    let Some(s) = status else {
        return Err(ProviderError::transient(
            "the remote exec ended without a status",
        ));
    };
    if s.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    let code = s
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse::<i32>().ok());
    match code {
        Some(c) => Ok(c),
        None => Err(ProviderError::Invalid {
            message: format!(
                "remote exec failed: {}",
                s.message.as_deref().unwrap_or("no message")
            ),
        }),
    }
}

impl Provider for Kubernetes {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logs: true,
            follow_logs: true,
            exec: self.cfg.exec,
            metrics: self.cfg.metrics,
            // Copied into the remote namespace as a docker config Secret of the remote pod.
            registry_logins: true,
            ..Capabilities::gpus(self.cfg.gpu_types.keys(), self.cfg.max_gpus_per_workload)
        }
    }

    async fn create(&self, w: &Workload) -> Result<(), ProviderError> {
        crate::providers::ensure_owned(&self.owner, w)?;
        let pod = spec::remote_pod(&self.cfg, &self.owner, w)?;
        let ns = self.cfg.remote_namespace(&w.namespace).to_owned();
        let client = self.client().await?;
        let api = self.pods(client, &ns);
        let what = "create remote pod";
        match self
            .call_raw(what, api.create(&PostParams::default(), &pod))
            .await?
        {
            Ok(created) => {
                let uid = created.metadata.uid.clone().unwrap_or_default();
                info!(provider = %self.name, workload = %w.id, namespace = %ns, uid, "created remote pod");
                self.create_owned_secrets(w, &ns, &uid).await
            }
            Err(e) if status_code(&e) == Some(404) => Err(ProviderError::transient(format!(
                "{what}: the remote namespace {ns} does not exist"
            ))),
            Err(e) if status_code(&e) == Some(409) => Err(ProviderError::transient(format!(
                "{what}: a remote pod named {} exists in {ns} (a previous run still \
                 terminating, or a create whose answer was lost)",
                w.id
            ))),
            Err(e) => Err(api_error(what, e)),
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let (ns, name, uid) = self.parse_id(provider_id)?;
        let client = self.client().await?;
        let dp = DeleteParams {
            preconditions: (!uid.is_empty()).then(|| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let what = "delete remote pod";
        match self
            .call_raw(what, self.pods(client, ns).delete(name, &dp))
            .await?
        {
            Ok(_) => {
                info!(provider = %self.name, namespace = ns, pod = name, "deleted remote pod");
                Ok(())
            }
            // Gone already, or (a failed UID precondition) the pod under that name is newer.
            Err(e) if matches!(status_code(&e), Some(404 | 409)) => {
                debug!(provider = %self.name, namespace = ns, pod = name, "remote pod already gone");
                Ok(())
            }
            Err(e) => Err(api_error(what, e)),
        }
    }

    async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
        let client = self.client().await?;
        let price = self.cfg.price_per_gpu_hour.and_then(Price::from_dollars);
        let lp = ListParams::default().labels(&spec::selector(&self.owner));
        let mut out = Vec::new();
        for ns in self.cfg.remote_namespaces() {
            let pods = self
                .call("list remote pods", self.pods(client.clone(), &ns).list(&lp))
                .await?;
            let usage = if self.cfg.metrics && !pods.items.is_empty() {
                self.usage(&client, &ns).await
            } else {
                None
            };
            for pod in &pods.items {
                let u = pod
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|n| usage.as_ref()?.get(n).copied());
                let Some(obs) = state::observe(&self.owner, pod, price, &self.cfg.gpu_resource, u)
                else {
                    continue;
                };
                if let WorkloadState::Unknown { raw } = &obs.state {
                    warn!(provider = %self.name, workload = %obs.id, phase = %raw, "unknown remote pod phase");
                }
                out.push(obs);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        state::count_cpu(&mut cpu, &mut out, Timestamp::now());
        Ok(out)
    }

    async fn inventory(&self) -> Result<Inventory, ProviderError> {
        Ok(Inventory::configured(
            self.cfg.price_per_gpu_hour,
            self.cfg.max_gpus_per_workload,
        ))
    }

    async fn logs(&self, provider_id: &str, opts: &LogOptions) -> Result<LogStream, ProviderError> {
        if opts.previous {
            // Remote pods never restart in place (restartPolicy Never): the previous run's
            // remote pod was deleted when the framework restarted the container.
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "logs of a previous container (each run is its own remote pod, deleted \
                       at the restart)"
                    .into(),
            });
        }
        let (ns, name, _) = self.parse_id(provider_id)?;
        let lp = LogParams {
            follow: opts.follow,
            tail_lines: opts.tail_lines.and_then(|t| i64::try_from(t).ok()),
            since_time: opts.since,
            limit_bytes: opts.limit_bytes.and_then(|l| i64::try_from(l).ok()),
            timestamps: opts.timestamps,
            ..LogParams::default()
        };
        let client = self.client().await?;
        let api = self.pods(client, ns);
        let reader = self
            .call("remote pod logs", api.log_stream(name, &lp))
            .await?;
        Ok(chunks(Box::pin(reader), "remote log stream"))
    }

    async fn exec(
        &self,
        provider_id: &str,
        req: ExecRequest,
    ) -> Result<ExecSession, ProviderError> {
        if !self.cfg.exec {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "exec (set exec: true in its settings)".into(),
            });
        }
        let (ns, name, _) = self.parse_id(provider_id)?;
        let client = self.client().await?;
        let api: kube::Api<Pod> = self.pods(client, ns);
        let ap = AttachParams::default()
            .stdin(req.stdin)
            .stdout(true)
            .stderr(!req.tty)
            .tty(req.tty);
        let mut proc = api
            .exec(name, req.command.clone(), &ap)
            .await
            .map_err(|e| match e {
                // The remote node has no exec (a VK over a provider without one answers 501).
                kube::Error::Api(s) if s.code == 501 => ProviderError::Unsupported {
                    provider: self.name.clone(),
                    what: format!("exec on the remote node ({})", s.message),
                },
                // The API server or the remote node refused the upgrade.
                kube::Error::UpgradeConnection(u) => ProviderError::Invalid {
                    message: format!("the remote cluster refused the exec: {u}"),
                },
                e => api_error("remote exec", e),
            })?;
        let stdout = proc
            .stdout()
            .map(tokio_chunks)
            .unwrap_or_else(|| Box::pin(futures::stream::empty()));
        let stderr = proc.stderr().map(tokio_chunks);
        let stdin = proc
            .stdin()
            .filter(|_| req.stdin)
            .map(|w| Box::pin(w) as crate::provider::ExecStdin);
        let resize = proc.terminal_size().map(|mut kube_tx| {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<crate::provider::TerminalSize>(4);
            tokio::spawn(async move {
                while let Some(s) = rx.recv().await {
                    let size = kube::api::TerminalSize {
                        width: s.width,
                        height: s.height,
                    };
                    if kube_tx.send(size).await.is_err() {
                        break;
                    }
                }
            });
            tx
        });
        let status = proc.take_status();
        let exit = Box::pin(async move {
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            // The session's task ends with the streams; dropping `proc` earlier would cut them.
            let _ = proc.join().await;
            exit_code(status.as_ref())
        });
        Ok(ExecSession {
            stdin,
            stdout,
            stderr,
            resize,
            exit,
        })
    }
}
