//! `/v2/registries`: the account's container registry credentials (runpod/docs
//! `api-reference-v2/openapi.json`): `POST` takes `name`, `username`, `password` and answers
//! 201 `{id, name}`; the username and password are "write-only, not returned in responses";
//! `GET /v2/registries` answers `{"registries": [{id, name}]}`; `DELETE` answers 204, and is
//! "Rejected if any pod currently uses this credential to pull its image" with 400 "Registry
//! credential is in use by a pod and cannot be deleted". A pod names one by id in its
//! `registry` ("Container registry credential ID (for private images)"). v2 says nothing of
//! duplicate names; v1 says "The name must be unique", which the emulator keeps (400).

use super::*;

/// One credential; its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub id: String,
    pub name: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, {})", self.id, self.name, self.username)
    }
}

fn shown(c: &Credential) -> Value {
    json!({"id": c.id, "name": c.name})
}

pub(super) async fn list(AxState(s): AxState<State>, headers: HeaderMap) -> Response {
    let admission = match s.engine.gate(RouteKind::Registry, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let all: Vec<Value> = s
        .engine
        .lock()
        .runpod
        .registries
        .iter()
        .map(shown)
        .collect();
    admitted(
        json_response(StatusCode::OK, json!({ "registries": all })),
        &admission,
    )
}

pub(super) async fn get(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Registry, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let found = s
        .engine
        .lock()
        .runpod
        .registries
        .iter()
        .find(|c| c.id == id)
        .map(shown);
    let resp = match found {
        Some(c) => json_response(StatusCode::OK, c),
        None => not_found(),
    };
    admitted(resp, &admission)
}

fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "registry credential not found",
        Vec::new(),
    )
}

pub(super) async fn create(
    AxState(s): AxState<State>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Registry, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let req = match validate::parse_registry(&body) {
        Ok(r) => r,
        Err(e) => return admitted(invalid(e), &admission),
    };
    let mut inner = s.engine.lock();
    if inner.runpod.registries.iter().any(|c| c.name == req.name) {
        drop(inner);
        return admitted(
            problem(
                StatusCode::BAD_REQUEST,
                format!("a registry credential named '{}' already exists", req.name),
                Vec::new(),
            ),
            &admission,
        );
    }
    let c = Credential {
        id: crate::util::pod_id(),
        name: req.name,
        username: req.username,
        password: req.password,
    };
    let resp = json_response(StatusCode::CREATED, shown(&c));
    inner.runpod.registries.push(c);
    drop(inner);
    admitted(resp, &admission)
}

pub(super) async fn delete(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Registry, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let mut inner = s.engine.lock();
    let in_use = inner.workloads.values().any(|w| match &w.extra {
        Extra::RunPod(x) => x.registry.as_deref() == Some(id.as_str()),
        _ => false,
    });
    let resp = match inner.runpod.registries.iter().position(|c| c.id == id) {
        None => not_found(),
        Some(_) if in_use => problem(
            StatusCode::BAD_REQUEST,
            "Registry credential is in use by a pod and cannot be deleted",
            Vec::new(),
        ),
        Some(i) => {
            inner.runpod.registries.remove(i);
            StatusCode::NO_CONTENT.into_response()
        }
    };
    drop(inner);
    admitted(resp, &admission)
}

/// The login of credential `id` for a pod's pull; `Err` when the account has none such.
pub(super) fn login(engine: &Engine, id: &str) -> Result<crate::engine::pull::Login, Response> {
    engine
        .lock()
        .runpod
        .registries
        .iter()
        .find(|c| c.id == id)
        .map(|c| crate::engine::pull::Login {
            registry: None,
            username: c.username.clone(),
            password: c.password.clone(),
        })
        .ok_or_else(|| {
            problem(
                StatusCode::BAD_REQUEST,
                format!("registry credential '{id}' not found"),
                vec![format!("$.registry: no registry credential with id '{id}'")],
            )
        })
}
