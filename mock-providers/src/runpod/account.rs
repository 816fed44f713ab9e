//! The account behind the key (admin): pool access and the balance, with what RunPod does
//! to running pods at $0.

use super::*;

pub(super) async fn get_account(AxState(s): AxState<State>) -> Response {
    let account = s.engine.lock().runpod.clone();
    json_response(StatusCode::OK, json!(account))
}

/// Sets the account; an exhausted balance ends every active pod as RunPod does at $0: stopped
/// (EXITED) when it has a network volume, terminated (removed) otherwise.
pub(super) async fn put_account(AxState(s): AxState<State>, body: Bytes) -> Response {
    let account: Account = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return problem(StatusCode::BAD_REQUEST, e.to_string(), Vec::new()),
    };
    let now = Instant::now();
    let mut inner = s.engine.lock();
    s.engine.settle(&mut inner, now);
    if account.balance_exhausted {
        let active: Vec<u64> = inner
            .workloads
            .values()
            .filter(|w| s.engine.phase(w, now).is_active())
            .map(|w| w.seq)
            .collect();
        for seq in active {
            let Some(w) = inner.workloads.get_mut(&seq) else {
                continue;
            };
            let network_volume = match &w.extra {
                Extra::RunPod(x) => x.mounts["network"]
                    .as_array()
                    .is_some_and(|m| !m.is_empty()),
                _ => false,
            };
            if network_volume {
                w.logs.push(
                    jiff::Timestamp::now(),
                    LogSource::System,
                    "account balance reached $0: stopping the pod (its network volume is kept)",
                );
                s.engine.stop_locked(&mut inner, seq, StopReason::User);
            } else {
                s.engine.remove_locked(&mut inner, seq);
            }
        }
    }
    let registries = std::mem::take(&mut inner.runpod.registries);
    inner.runpod = Account {
        registries,
        ..account.clone()
    };
    json_response(StatusCode::OK, json!(account))
}
