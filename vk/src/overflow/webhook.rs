//! The mutating admission webhook: `POST /mutate` takes an AdmissionReview of a Pod and answers
//! with the patch of [`super::mutate::decide`]; it never denies a pod (a refusal only keeps the
//! pod in-cluster and says why, in an annotation and an admission warning). `POST /gate` gives a
//! research pod its scheduling gate ([`super::handoff`], [`Settings::gates`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use tracing::{info, warn};

use super::handoff::Settings;
use super::mutate::{Decision, decide};
use crate::telemetry::{Metrics, OutcomeLabels};
use crate::tls::{
    Deadlines, Limits, ServingCert, TlsConfigs, TlsListener, review, serve as serve_tls,
};

/// Serves the webhook on `addr` with `tls` until the process ends.
pub async fn serve(
    addr: SocketAddr,
    cert: Arc<ServingCert>,
    metrics: Metrics,
    handoff: Option<Settings>,
    drain: u32,
) -> std::io::Result<()> {
    let configs = TlsConfigs::new(cert, None).map_err(std::io::Error::other)?;
    let tcp = tokio::net::TcpListener::bind(addr).await?;
    info!(addr = %addr, "overflow webhook listening");
    // Only the API server calls the webhook: a few connections at most.
    let listener = TlsListener::new(tcp, configs, Limits::new(256));
    serve_tls(
        listener,
        router(metrics, handoff, drain),
        Deadlines::default(),
    )
    .await;
    Ok(())
}

/// What the webhook's handlers share.
#[derive(Clone)]
struct Hooks {
    metrics: Metrics,
    /// The hand-off's settings (which pods are research); none: the hand-off is off.
    handoff: Arc<Option<Settings>>,
    /// Seconds of the `preStop` sleep given to opted-in containers without a hook.
    drain: u32,
}

/// `POST /mutate`, `POST /gate` (research pods, by the hand-off's `handoff` settings; none:
/// the hand-off is off and nothing is gated) and `GET /healthz`.
pub fn router(metrics: Metrics, handoff: Option<Settings>, drain: u32) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/gate", post(gate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Hooks {
            metrics,
            handoff: Arc::new(handoff),
            drain,
        })
}

async fn mutate(
    State(hooks): State<Hooks>,
    Json(review): Json<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let req = match review::pod_request(review) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    Json(answer(&req, &hooks.metrics, hooks.drain).into_review())
}

async fn gate(
    State(hooks): State<Hooks>,
    Json(review): Json<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let req = match review::pod_request(review) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let resp = AdmissionResponse::from(&req);
    let namespace = req.namespace.as_deref().unwrap_or_default();
    let patch = match (hooks.handoff.as_ref(), req.object.as_ref()) {
        (Some(s), Some(pod)) if s.gates(pod, namespace) => super::handoff::gate_patch(pod),
        _ => return Json(resp.into_review()),
    };
    let resp = resp
        .with_patch(patch)
        .unwrap_or_else(|_| AdmissionResponse::from(&req));
    Json(resp.into_review())
}

/// The response to one admission request (allowed, with the patch of the decision).
pub fn answer(req: &AdmissionRequest<Pod>, metrics: &Metrics, drain: u32) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let Some(pod) = req.object.as_ref() else {
        return resp;
    };
    let name = pod
        .metadata
        .name
        .clone()
        .or_else(|| pod.metadata.generate_name.clone())
        .unwrap_or_default();
    let (patch, warning, outcome) = match decide(pod, drain) {
        Decision::Offload(patch) => (patch, None, "offload"),
        Decision::Refuse { why, patch } => {
            info!(namespace = %req.namespace.clone().unwrap_or_default(), pod = %name, why = %why, "overflow refused: the pod stays in-cluster");
            let w = format!(
                "gpu-vk overflow: this pod cannot run on the virtual node and stays in-cluster: {why}"
            );
            (patch, Some(w), "refuse")
        }
    };
    let label = OutcomeLabels {
        outcome: outcome.to_owned(),
    };
    metrics.overflow_admissions.get_or_create(&label).inc();
    let mut resp = match resp.with_patch(patch) {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %e, "overflow webhook could not serialise its patch; admitting the pod unchanged");
            AdmissionResponse::from(req)
        }
    };
    if let Some(w) = warning {
        resp.warnings = Some(vec![w]);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(namespace: &str, class: &str) -> AdmissionReview<Pod> {
        serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace, "operation": "CREATE", "userInfo": {},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "train-"},
                    "spec": {"priorityClassName": class, "containers": [{"name": "t", "image": "t",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
        }))
        .unwrap()
    }

    async fn patched(handoff: Option<Settings>, namespace: &str, class: &str) -> bool {
        let hooks = Hooks {
            metrics: Metrics::new(),
            handoff: Arc::new(handoff),
            drain: 0,
        };
        let Json(out) = gate(State(hooks), Json(review(namespace, class))).await;
        let resp = out.response.expect("a response");
        assert!(resp.allowed, "the gate never refuses");
        resp.patch.is_some()
    }

    /// The webhook gates research by the controller's settings (the namespace the API server
    /// names, the pod's PriorityClass), and nothing when the hand-off is off.
    #[tokio::test]
    async fn the_gate_webhook_patches_research_only() {
        let s = Settings {
            max_delay: std::time::Duration::from_secs(60),
            virtual_node: "vn".into(),
            warm_replicas: 0,
            research_namespaces: vec!["lab".into()],
            research_priority_classes: vec!["research-high".into()],
        };
        assert!(patched(Some(s.clone()), "lab", "research-high").await);
        assert!(!patched(Some(s.clone()), "lab", "serving").await);
        assert!(!patched(Some(s), "prod", "research-high").await);
        assert!(!patched(None, "lab", "research-high").await);
    }
}
