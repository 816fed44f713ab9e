//! Steps of the overflow feature's hand-off on a realistic provider: the stand-ins take a minute
//! to start and one of them never does, so the virtual kubelet makes it again at its start
//! deadline while the research job waits (make-before-break).

use cucumber::{given, then};

use crate::Vkw;
use crate::overflow::overflow_vk;

#[given(
    expr = "a virtual kubelet with the overflow companion handing off within {int} seconds, settling for {int} seconds, its provider taking {int} seconds to start a workload and never starting its create number {int}, given up after {int} seconds"
)]
async fn vk_with_handoff(
    w: &mut Vkw,
    max_delay: u64,
    settle: u64,
    start: u64,
    stuck: u32,
    deadline: u64,
) {
    // Realistic: minutes to pull and start a multi-GB inference image on a GPU cloud, and a
    // start now and then that never runs (the emulators' realistic profile).
    let half = start * 500;
    crate::setup_provider_stuck(
        w,
        mock_providers::ExecutionMode::simulated(half, half, None),
        stuck,
    )
    .await;
    overflow_vk(w, settle, max_delay, Some(deadline)).await;
}

#[then("no stand-in is left starting at the provider")]
async fn none_left_starting(w: &mut Vkw) {
    // The stand-in whose start never runs is either made again at its start deadline (the VK's
    // retry, `StartRetried`) or deleted before it by the hand-off, when the research job got its
    // GPUs without it; either way nothing is left starting, and billing, at the provider.
    let left = conformance::harness::wait_for(
        std::time::Duration::from_secs(150),
        "every live workload at the provider running",
        || async {
            let live = w.obs().live().await;
            live.iter()
                .all(|x| x["state"] == "RUNNING")
                .then_some(live.len())
        },
    )
    .await;
    let retried = crate::resilience::starts_retried(w).await;
    let how = if retried > 0 {
        "made again at its start deadline"
    } else {
        "deleted by the hand-off before its deadline"
    };
    println!("    the stand-in that never started: {how}; {left} workload(s) running");
}
