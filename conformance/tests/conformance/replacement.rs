//! Steps of the replacement scenario: the VK is replaced the way Kubernetes replaces a VK pod
//! (deleted, a new one started by its Deployment), and nothing that did not change is touched:
//! no workload created, no pod written.

use std::collections::HashMap;
use std::time::Duration;

use conformance::harness::wait_for;
use cucumber::{then, when};

use super::Vkw;

/// What was true just before the replacement.
#[derive(Debug, Default)]
pub struct Before {
    creates: usize,
    /// resourceVersion of every pod of the scenario.
    versions: HashMap<String, String>,
}

#[when("the virtual kubelet is replaced")]
async fn replaced(w: &mut Vkw) {
    let creates = w.obs().creates(&w.prefix()).await;
    let mut versions = HashMap::new();
    for p in w.pods().list(&Default::default()).await.unwrap() {
        let name = p.metadata.name.clone().unwrap();
        versions.insert(name, p.metadata.resource_version.clone().unwrap());
    }
    w.before_replacement = Some(Before { creates, versions });
    w.vk().replace().await;
}

#[then("the new virtual kubelet has finished its start-up reconcile")]
async fn new_vk_reconciled(w: &mut Vkw) {
    let vk = w.vk.as_ref().expect("a virtual kubelet");
    wait_for(
        Duration::from_secs(90),
        "a second \"start-up reconcile finished\" in the VK's log",
        || async { (vk.log().matches("start-up reconcile finished").count() >= 2).then_some(()) },
    )
    .await;
    // A few provider polls for anything the new VK would still write.
    vk.hold_still("the new VK to write nothing", 6, Duration::ZERO)
        .await;
}

#[then("the provider saw no new create and no pod was written")]
async fn nothing_touched(w: &mut Vkw) {
    let before = w.before_replacement.take().expect("a replacement");
    assert_eq!(
        w.obs().creates(&w.prefix()).await,
        before.creates,
        "the replacement created workloads"
    );
    for p in w.pods().list(&Default::default()).await.unwrap() {
        let name = p.metadata.name.clone().unwrap();
        if let Some(v) = before.versions.get(&name) {
            assert_eq!(
                p.metadata.resource_version.as_ref(),
                Some(v),
                "pod {name} was written after the replacement: {:?}",
                p.status
            );
        }
    }
}
