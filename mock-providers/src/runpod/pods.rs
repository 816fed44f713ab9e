//! The pod routes besides create: list, get, delete (terminate) and actions.

use super::*;

pub(super) async fn list_pods(AxState(s): AxState<State>, headers: HeaderMap) -> Response {
    let admission = match s.engine.gate(RouteKind::List, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let engine = &s.engine;
    let now = Instant::now();
    let pods: Vec<Value> = {
        let mut inner = engine.lock();
        engine.settle(&mut inner, now);
        // Listeners of workloads that are gone close with them.
        engine
            .served
            .retain(&inner.workloads.values().map(|w| w.id.as_str()).collect());
        let mask = inner.gate.list_mask();
        inner
            .workloads
            .values_mut()
            .filter(|w| !mask.hides(&w.id))
            .map(|w| render_pod(engine, w, now))
            .collect()
    };
    admitted(
        json_response(StatusCode::OK, json!({ "pods": pods })),
        &admission,
    )
}

pub(super) async fn get_pod(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Get, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let seq = s.engine.lock().seq_of(&id);
    let resp = match seq.and_then(|seq| pod_json(&s.engine, seq)) {
        Some(pod) => json_response(StatusCode::OK, pod),
        None => pod_not_found(),
    };
    admitted(resp, &admission)
}

pub(super) async fn delete_pod(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Delete, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    let removed = {
        let mut inner = s.engine.lock();
        inner
            .seq_of(&id)
            .and_then(|seq| s.engine.remove_locked(&mut inner, seq))
    };
    let resp = match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => pod_not_found(),
    };
    admitted(resp, &admission)
}

pub(super) async fn pod_action(
    AxState(s): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admission = match s.engine.gate(RouteKind::Action, bearer(&headers)).await {
        Ok(a) => a,
        Err(d) => return denied(d),
    };
    admitted(action_inner(&s.engine, &id, &body), &admission)
}

pub(super) fn action_inner(engine: &Engine, id: &str, body: &[u8]) -> Response {
    let action = match validate::parse_action(body) {
        Ok(a) => a,
        Err(e) => return invalid(e),
    };
    let now = Instant::now();
    let seq = {
        let mut inner = engine.lock();
        engine.settle(&mut inner, now);
        let Some(seq) = inner.seq_of(id) else {
            return pod_not_found();
        };
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return pod_not_found();
        };
        let phase = engine.observe(w, now);
        if !allowed_actions(phase).contains(&action) {
            return problem(
                StatusCode::CONFLICT,
                format!(
                    "action '{}' is not valid for a pod in status {}",
                    action.as_str(),
                    status_name(phase)
                ),
                Vec::new(),
            );
        }
        match action {
            PodAction::Terminate => {
                engine.remove_locked(&mut inner, seq);
                return StatusCode::NO_CONTENT.into_response();
            }
            PodAction::Stop => engine.stop_locked(&mut inner, seq, StopReason::User),
            PodAction::Restart => engine.restart_locked(&mut inner, seq, now),
            PodAction::Start => {
                if engine.start_locked(&mut inner, seq, now).is_err() {
                    return problem(StatusCode::BAD_REQUEST, CAPACITY_DETAIL, Vec::new());
                }
            }
        }
        seq
    };
    match pod_json(engine, seq) {
        Some(pod) => json_response(StatusCode::OK, pod),
        None => pod_not_found(),
    }
}
