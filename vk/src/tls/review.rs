//! The envelope both webhooks served over this TLS answer (the VK's validating one and the
//! overflow companion's mutating one): an AdmissionReview of a Pod in, an AdmissionReview out.

use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

/// A webhook's answer.
pub type Answer = Json<AdmissionReview<DynamicObject>>;

/// The request inside `review`, or the answer that refuses a body that is not a request.
pub fn pod_request(review: AdmissionReview<Pod>) -> Result<AdmissionRequest<Pod>, Answer> {
    review.try_into().map_err(|_| {
        Json(AdmissionResponse::invalid("not an AdmissionReview request").into_review())
    })
}
