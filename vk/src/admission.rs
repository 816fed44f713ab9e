//! The validating admission webhook (`admission.enabled`): a pod that targets this node and that
//! the VK would refuse is refused at create time, with the VK's own reason and message, so no
//! pod exists to fail and no controller replaces one (a ReplicaSet records `FailedCreate` and
//! backs off, as for a quota refusal). The judgement is [`crate::pods::decide::refusal`], the one
//! `decide` makes. The webhook is registered as a ValidatingWebhookConfiguration named after the
//! node and owned by the Node, with `failurePolicy: Ignore` (a webhook that is down blocks
//! nothing: the VK then holds what it refuses) and match conditions that send it only pods that
//! target this node.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};

use kube::{Api, Client};
use tracing::{info, warn};

use crate::config::Config;
use crate::pods::PodController;
use crate::pods::translate::reason;
use crate::tls::{Limits, TlsConfigs, TlsListener, review};

mod register;
mod target;

pub use target::targets;

/// What the webhook judges with.
#[derive(Clone)]
struct Judge {
    node: String,
    fw: Arc<PodController>,
}

/// Serves the webhook and registers it once the Node exists; runs until the process ends.
pub async fn run(fw: Arc<PodController>, cfg: Arc<Config>, client: Client) -> anyhow::Result<()> {
    let a = &cfg.admission;
    let addr: SocketAddr = a.addr().parse().context("invalid admission.addr")?;
    let names = match (&a.service, &a.url) {
        (Some(s), _) => {
            let (ns, name) = s.split_once('/').context("admission.service")?;
            vec![
                name.to_owned(),
                format!("{name}.{ns}"),
                format!("{name}.{ns}.svc"),
                format!("{name}.{ns}.svc.cluster.local"),
            ]
        }
        (None, Some(u)) => {
            let host = u
                .trim_start_matches("https://")
                .split(['/', ':'])
                .next()
                .unwrap_or_default();
            vec![host.to_owned()]
        }
        (None, None) => anyhow::bail!("admission: no service or url"),
    };
    let cert = crate::overflow::certs::self_signed_for(names)?;
    let configs = TlsConfigs::new(cert.serving, None).map_err(std::io::Error::other)?;
    let tcp = crate::tls::bind_when_free(addr, crate::tls::BIND_PATIENCE)
        .await
        .with_context(|| format!("cannot bind admission.addr {addr}"))?;
    let judge = Judge {
        node: cfg.node_name.clone(),
        fw,
    };
    let listener = TlsListener::new(tcp, configs, Limits::new(256));
    let server = tokio::spawn(crate::tls::serve(
        listener,
        router(judge),
        crate::tls::Deadlines::default(),
    ));
    info!(addr = %addr, "admission webhook listening");
    // The webhook is owned by the Node, so it waits for the node manager to register it.
    let nodes: Api<Node> = Api::all(client.clone());
    let node_uid = loop {
        if let Ok(Some(n)) = nodes.get_opt(&cfg.node_name).await
            && let Some(uid) = n.metadata.uid
        {
            break uid;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // Until it is registered the API server never calls it; keep trying (RBAC may come late).
    let mut delay = Duration::from_secs(1);
    while let Err(e) = register::publish(&client, &cfg, &node_uid, &cert.pem).await {
        warn!(error = %e, retry_in_s = delay.as_secs(), "cannot register the admission webhook");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(60));
    }
    info!(node = %cfg.node_name, "admission webhook registered");
    server.await?;
    anyhow::bail!("the admission webhook stopped")
}

fn router(judge: Judge) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(judge)
}

async fn validate(
    State(judge): State<Judge>,
    Json(review): Json<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let req = match review::pod_request(review) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let verdict = req
        .object
        .as_ref()
        .and_then(|pod| verdict(&judge.node, pod, |p| judge.fw.refusal(p)));
    let resp = AdmissionResponse::from(&req);
    Json(match verdict {
        None => resp,
        Some(message) => {
            info!(namespace = %req.namespace.clone().unwrap_or_default(), "admission refused a pod: {message}");
            resp.deny(message)
        }
    }
    .into_review())
}

/// The denial message for `pod` (`None`: admitted): only a pod that targets `node`, and only a
/// refusal that does not depend on something that may appear later (an unknown provider name
/// may be configured next; the VK judges such a pod when it arrives).
pub fn verdict(
    node: &str,
    pod: &Pod,
    refusal: impl FnOnce(&Pod) -> Option<crate::pods::decide::Refusal>,
) -> Option<String> {
    if !targets(pod, node) {
        return None;
    }
    let (why, message) = refusal(pod)?;
    if why == reason::UNKNOWN_PROVIDER {
        warn!(
            "admission: a pod pins a provider this node does not have; admitted, the VK judges it"
        );
        return None;
    }
    Some(format!(
        "{why}: {message} (refused by the virtual node {node}'s admission check)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::PodBuilder;

    fn on(node: &str) -> Pod {
        PodBuilder::new()
            .spec(|s| s.node_name = Some(node.to_owned()))
            .build()
    }

    #[test]
    fn only_a_pod_of_this_node_is_refused_and_never_for_an_unknown_provider() {
        let invalid = |_: &Pod| Some((reason::INVALID_SPEC, "hostPath volume".to_owned()));
        let denied = verdict("vk-a", &on("vk-a"), invalid).unwrap();
        assert!(
            denied.starts_with("InvalidSpec: hostPath volume") && denied.contains("vk-a"),
            "{denied}"
        );
        // Another node's pod is never judged, whatever the VK would say of it.
        assert_eq!(verdict("vk-a", &on("gpu-node-1"), invalid), None);
        // A provider name this node lacks may be configured next: admitted.
        let unknown = |_: &Pod| Some((reason::UNKNOWN_PROVIDER, "nimbus".to_owned()));
        assert_eq!(verdict("vk-a", &on("vk-a"), unknown), None);
        assert_eq!(verdict("vk-a", &on("vk-a"), |_| None), None);
    }
}
