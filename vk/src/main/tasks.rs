//! The tasks `vk run` starts once this replica leads (kubelet API, node manager, pod pipeline,
//! admission webhook, Service endpoints), the first of them to end, and how they are stopped.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use vk::config::Config;
use vk::node::NodeManager;
use vk::pods::PodController;

/// The running node's tasks, and the signal that stops the core ones cleanly.
pub struct Tasks {
    stop: watch::Sender<bool>,
    kubelet_api: vk::kubelet_api::Server,
    node: JoinHandle<()>,
    admission: JoinHandle<()>,
    endpoints: JoinHandle<()>,
    networks: JoinHandle<()>,
    fw: JoinHandle<Result<(), vk::supervise::TaskEnded>>,
}

/// Resolves once `rx` says stop.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

impl Tasks {
    /// Starts the kubelet API (an error when it cannot), then the node manager, the admission
    /// webhook, the Service endpoints and the pod pipeline.
    pub async fn start(
        fw: &Arc<PodController>,
        node: &Arc<NodeManager>,
        cfg: &Arc<Config>,
        client: &kube::Client,
    ) -> anyhow::Result<Self> {
        let (stop, stop_rx) = watch::channel(false);
        let kubelet_api = vk::kubelet_api::start(fw.clone(), cfg.clone(), client.clone())
            .await
            .context("failed to start the kubelet API")?;
        let node = tokio::spawn(node.clone().run(stopped(stop_rx.clone())));
        // The admission check is a first line only: without it the VK holds what it refuses, so
        // its failure is logged and the node goes on.
        let admission = tokio::spawn({
            let (fw, cfg, client) = (fw.clone(), cfg.clone(), client.clone());
            async move {
                if cfg.admission.enabled
                    && let Err(e) = vk::admission::run(fw, cfg, client).await
                {
                    tracing::error!(error = %format!("{e:#}"), "the admission webhook stopped; refused pods are held instead");
                }
            }
        });
        // Service traffic to offloaded pods; like the admission check, not a core task: a failure
        // is logged and retried, never the node's end.
        let endpoints = tokio::spawn(vk::endpoints::run(fw.clone(), cfg.clone(), client.clone()));
        if !cfg.allowed_namespaces.is_empty() {
            tokio::spawn(crate::namespaces::warn_missing(
                client.clone(),
                cfg.allowed_namespaces.clone(),
            ));
        }
        // The cluster's own networks, learnt before the first pod is reconciled (a provider
        // address inside them is refused: pods::networks).
        let nets = fw.networks().clone();
        vk::pods::networks::learn(&nets, client).await;
        let networks = tokio::spawn(vk::pods::networks::run(nets, client.clone()));
        let fw = tokio::spawn(fw.clone().run(stopped(stop_rx.clone())));
        Ok(Self {
            stop,
            kubelet_api,
            node,
            admission,
            endpoints,
            networks,
            fw,
        })
    }

    /// Waits for a signal (`None`) or for what ends the node first: a core task ending, or
    /// `lost` (the leader lease lost).
    pub async fn first_failure(&mut self, lost: impl Future<Output = ()>) -> Option<String> {
        // A core task that ends before a signal is a bug or a dead end: stop the process
        // (non-zero exit) so Kubernetes restarts it, rather than serving half a node.
        tokio::select! {
            () = crate::shutdown_signal() => None,
            r = &mut self.fw => Some(match r {
                Ok(Ok(())) => "the pod pipeline stopped".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("the pod pipeline task failed: {e}"),
            }),
            r = &mut self.node => Some(match r {
                Ok(()) => "the node manager stopped".to_owned(),
                Err(e) => format!("the node manager task failed: {e}"),
            }),
            () = lost => Some("lost the leader lease (another replica leads now)".to_owned()),
        }
    }

    /// Stops every task: after a failure at once, with the error to exit on; after a signal
    /// the core tasks first finish what they do.
    pub async fn stop(self, failed: Option<String>) -> anyhow::Result<()> {
        self.admission.abort();
        self.endpoints.abort();
        self.networks.abort();
        let _ = self.stop.send(true);
        if let Some(why) = failed {
            self.kubelet_api.abort();
            self.fw.abort();
            self.node.abort();
            anyhow::bail!("stopping: {why}");
        }
        info!("signal received, shutting down");
        let _ = self.fw.await;
        let _ = self.node.await;
        self.kubelet_api.abort();
        Ok(())
    }
}
