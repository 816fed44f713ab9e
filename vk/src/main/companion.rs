//! `vk overflow`, the companion: its webhook, its reclaim and hand-off controllers, and the
//! hand-off's settings from the command line.

use std::net::SocketAddr;

use anyhow::Context as _;
use tracing::info;

use crate::{WebhookCert, default_identity, shutdown_signal};
use vk::telemetry::Metrics;

/// The hand-off's settings, when it is on (a virtual node and a maximum delay).
pub fn handoff_settings(
    virtual_node: Option<String>,
    max_delay_seconds: u64,
    warm_replicas: u32,
    research_namespaces: Vec<String>,
    research_priority_classes: Vec<String>,
) -> Option<vk::overflow::handoff::Settings> {
    if max_delay_seconds > 0 && research_namespaces.is_empty() {
        tracing::warn!(
            "the hand-off lists no research namespace (--handoff-research-namespaces): every research pod schedules without it"
        );
    }
    virtual_node
        .filter(|_| max_delay_seconds > 0)
        .map(|node| vk::overflow::handoff::Settings {
            max_delay: std::time::Duration::from_secs(max_delay_seconds),
            virtual_node: node,
            warm_replicas,
            research_namespaces,
            research_priority_classes,
        })
}

/// `vk overflow`: serves the webhook (its certificate from files, or a fresh one published as
/// the webhook's caBundle) and runs the reclaim and hand-off controllers until a signal.
pub async fn overflow(
    webhook_addr: SocketAddr,
    service: &str,
    cert: WebhookCert,
    metrics_addr: SocketAddr,
    reclaim: Option<vk::overflow::reclaim::Settings>,
    handoff: Option<vk::overflow::handoff::Settings>,
    drain_seconds: u32,
) -> anyhow::Result<()> {
    let (namespace, name) = service
        .split_once('/')
        .context("--service must be NAMESPACE/NAME")?;
    let client = kube::Client::try_default()
        .await
        .context("failed to build a Kubernetes client")?;
    let metrics = Metrics::new();
    let serving = match cert {
        WebhookCert::Files { cert, key } => {
            let tls = vk::config::TlsConfig {
                cert_file: Some(cert),
                key_file: Some(key),
                ..vk::config::TlsConfig::default()
            };
            let serving = vk::tls::ServingCert::load(&tls, name, "127.0.0.1")
                .context("cannot load the webhook's certificate files")?;
            serving.watch();
            serving
        }
        WebhookCert::Publish { config } => {
            let cert = vk::overflow::certs::self_signed(name, namespace)?;
            // The API server must trust this certificate before the webhook answers anything.
            vk::overflow::certs::publish_ca_bundle(&client, &config, &cert.pem)
                .await
                .context("cannot publish the webhook's certificate")?;
            info!(webhook = %config, service, "published the webhook certificate");
            cert.serving
        }
    };
    let mut webhook = tokio::spawn(vk::overflow::webhook::serve(
        webhook_addr,
        serving,
        metrics.clone(),
        handoff.clone(),
        drain_seconds,
    ));
    let mut metrics_task = tokio::spawn(metrics.clone().serve(metrics_addr));
    let instance = std::env::var("VK_POD_NAME").unwrap_or_else(|_| default_identity());
    let caches =
        (reclaim.is_some() || handoff.is_some()).then(|| vk::overflow::reclaim::caches(&client));
    let mut handoff_task = tokio::spawn({
        let (client, caches, instance) = (client.clone(), caches.clone(), instance.clone());
        async move {
            match (handoff, caches) {
                (Some(settings), Some((nodes, pods))) => {
                    vk::overflow::handoff::run::run(client, settings, nodes, pods, instance).await;
                }
                _ => std::future::pending().await,
            }
        }
    });
    let mut reclaim_task = tokio::spawn(async move {
        match (reclaim, caches) {
            (Some(settings), Some(caches)) => {
                vk::overflow::reclaim::run(client, settings, metrics, instance, caches).await;
            }
            _ => std::future::pending().await,
        }
    });
    info!("overflow companion started");
    let failed = tokio::select! {
        () = shutdown_signal() => None,
        r = &mut webhook => Some(format!("the webhook stopped: {r:?}")),
        r = &mut metrics_task => Some(format!("the metrics listener stopped: {r:?}")),
        r = &mut reclaim_task => Some(format!("the reclaim controller stopped: {r:?}")),
        r = &mut handoff_task => Some(format!("the hand-off controller stopped: {r:?}")),
    };
    webhook.abort();
    handoff_task.abort();
    metrics_task.abort();
    reclaim_task.abort();
    match failed {
        Some(why) => anyhow::bail!("stopping: {why}"),
        None => Ok(()),
    }
}
