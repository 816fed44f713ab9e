//! Steps of the host-outage scenario: a provider host that stays silent past the adapter's
//! deadline has its workload destroyed and replaced (Vast's docs: an `unknown` or `offline`
//! instance "will never reach running ... destroy the instance and retry").

use std::time::Duration;

use conformance::harness::{phase, wait_for};
use serde_json::json;

use super::Vkw;
use cucumber::{then, when};

#[when(expr = "the host of the workload of pod {string} goes silent")]
async fn host_goes_silent(w: &mut Vkw, name: String) {
    let id = w.workloads[&name].clone();
    // The emulator's `fail`: Vast then lists the instance `unknown` ("no recent heartbeat").
    w.obs().act(&id, "fail", json!({})).await;
}

#[then(expr = "pod {string} runs again on a new workload, its container restarted")]
async fn runs_again_elsewhere(w: &mut Vkw, name: String) {
    let old = w.workloads[&name].clone();
    let uid = w.uids[&name].clone();
    let w = &*w;
    let new = wait_for(
        Duration::from_secs(90),
        &format!("pod {name} Running on one new workload, restarted"),
        || async {
            let p = w.get(&name).await?;
            let restarts = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .restart_count;
            // One live workload, not the silent one: the old instance was destroyed.
            let live = w.live_of(&uid).await;
            let id = live.first()?["id"].as_str()?.to_owned();
            (phase(&p) == "Running" && restarts >= 1 && live.len() == 1 && id != old).then_some(id)
        },
    )
    .await;
    assert_ne!(new, old);
}
