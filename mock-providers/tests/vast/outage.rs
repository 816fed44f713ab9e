//! The realistic profile's host outages: the host of every Nth rental goes `offline` under it
//! once it has run a while, keeps its GPUs, never comes back, and a destroy still ends it.

use super::*;
use mock_providers::config::{HostOutage, Profile, REALISTIC_OFFLINE_EVERY};

async fn rent_one(emu: &Emu, label: &str) -> u64 {
    let offer = first_offer(emu, "RTX 4090", 1).await;
    let r = rent(emu, offer, json!({"image": "img", "label": label})).await;
    assert_eq!(r.status(), StatusCode::OK, "rent {label}");
    r.json::<Value>().await.unwrap()["new_contract"]
        .as_u64()
        .unwrap()
}

async fn statuses(emu: &Emu, ids: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        out.push(
            show(emu, *id).await["actual_status"]
                .as_str()
                .unwrap_or("null")
                .to_owned(),
        );
    }
    out
}

#[tokio::test]
async fn every_nth_rental_loses_its_host_after_running_a_while_and_stays_offline() {
    let outage = HostOutage {
        every: 2,
        after: Duration::from_millis(400),
    };
    let emu = start_vast(
        vast_config(ExecutionMode::simulated(0, 0, None)).with_host_outage(Some(outage)),
    )
    .await;
    let mut ids = Vec::new();
    for label in ["a", "b", "c", "d"] {
        ids.push(rent_one(&emu, label).await);
    }
    // Running first: the outage comes after `after` of running, not at the start.
    assert_eq!(statuses(&emu, &ids).await, ["running"; 4]);
    let offline = eventually("two hosts offline", Duration::from_secs(5), || async {
        let s = statuses(&emu, &ids).await;
        (s.iter().filter(|s| *s == "offline").count() == 2).then_some(s)
    })
    .await;
    // The first and the third rental (one short of each multiple of 2), the others unharmed.
    assert_eq!(offline, ["offline", "running", "offline", "running"]);
    let lost = show(&emu, ids[0]).await;
    // Vast still means it to run; nothing reachable on it any more.
    assert_eq!(lost["intended_status"], "running");
    assert_eq!(lost["ports"], Value::Null);
    // It never comes back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(statuses(&emu, &ids[..1]).await, ["offline"]);
    // A destroy ends it as any other instance.
    let r = emu
        .delete(&format!("/api/v0/instances/{}/", ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(show(&emu, ids[0]).await, Value::Null);

    // Without the setting every host stays up.
    let emu = start_vast(vast_config(ExecutionMode::simulated(0, 0, None))).await;
    let ids = [rent_one(&emu, "a").await, rent_one(&emu, "b").await];
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(statuses(&emu, &ids).await, ["running"; 2]);
}

#[test]
fn the_realistic_profile_loses_hosts_and_the_fast_one_does_not() {
    let realistic = Profile::Realistic.host_outage().unwrap();
    assert_eq!(realistic.every, REALISTIC_OFFLINE_EVERY);
    assert!(realistic.after >= Duration::from_secs(60), "{realistic:?}");
    assert_eq!(Profile::Fast.host_outage(), None);
}

/// The realistic profile's starts that never run, on Vast: with the first of them placed at
/// the first rental, that one stays `loading` and the next rentals run.
#[tokio::test]
async fn the_first_stuck_rental_stays_loading_and_the_next_ones_run() {
    let emu = start_vast(
        vast_config(ExecutionMode::simulated(0, 0, None))
            .with_stuck_every(Some(20))
            .with_first_stuck(1),
    )
    .await;
    let mut ids = Vec::new();
    for label in ["a", "b", "c"] {
        ids.push(rent_one(&emu, label).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        statuses(&emu, &ids).await,
        ["loading", "running", "running"]
    );
}
