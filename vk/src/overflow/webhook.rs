//! The mutating admission webhook: `POST /mutate` takes an AdmissionReview of a Pod and answers
//! with the patch of [`super::mutate::decide`]; it never denies a pod (a refusal only keeps the
//! pod in-cluster and says why, in an annotation and an admission warning). `POST /gate` gives a
//! research pod that opts in to the hand-off its scheduling gate ([`super::handoff`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use tracing::{info, warn};

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
) -> std::io::Result<()> {
    let configs = TlsConfigs::new(cert, None).map_err(std::io::Error::other)?;
    let tcp = tokio::net::TcpListener::bind(addr).await?;
    info!(addr = %addr, "overflow webhook listening");
    // Only the API server calls the webhook: a few connections at most.
    let listener = TlsListener::new(tcp, configs, Limits::new(256));
    serve_tls(listener, router(metrics), Deadlines::default()).await;
    Ok(())
}

/// `POST /mutate`, `POST /gate` (research pods that opt in to the hand-off) and `GET /healthz`.
pub fn router(metrics: Metrics) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/gate", post(gate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics)
}

async fn mutate(
    State(metrics): State<Metrics>,
    Json(review): Json<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let req = match review::pod_request(review) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    Json(answer(&req, &metrics).into_review())
}

async fn gate(Json(review): Json<AdmissionReview<Pod>>) -> Json<AdmissionReview<DynamicObject>> {
    let req = match review::pod_request(review) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let resp = AdmissionResponse::from(&req);
    let ops = req
        .object
        .as_ref()
        .map(super::handoff::gate_patch)
        .unwrap_or_default();
    let resp = match serde_json::from_value::<json_patch::Patch>(serde_json::Value::Array(ops)) {
        Ok(p) => resp
            .with_patch(p)
            .unwrap_or_else(|_| AdmissionResponse::from(&req)),
        Err(_) => resp,
    };
    Json(resp.into_review())
}

/// The response to one admission request (allowed, with the patch of the decision).
pub fn answer(req: &AdmissionRequest<Pod>, metrics: &Metrics) -> AdmissionResponse {
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
    let (ops, warning, outcome) = match decide(pod) {
        Decision::Offload(ops) => (ops, None, "offload"),
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
    let patch: json_patch::Patch = match serde_json::from_value(serde_json::Value::Array(ops)) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "overflow webhook built an invalid patch; admitting the pod unchanged");
            return resp;
        }
    };
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
