//! Steps of `private_images.feature`: a private image on the provider's registry (the
//! emulators' `/_admin/images`), a pod pulling it with its `imagePullSecrets`, the
//! kubelet's reasons and Events while the Secret is missing, and no trace of the password.

use base64::Engine as _;

use super::*;

/// The registry host the emulators' private images live on.
const REGISTRY: &str = "registry.example.com";
const USER: &str = "acme-robot";

/// The scenario's private repository and its login's password (unique per scenario, so a
/// search for it finds only this scenario's traces).
fn private(w: &Vkw) -> (String, String) {
    (
        format!("{REGISTRY}/{}/model-server", w.ns),
        format!("pw-{}-3f9c1e", w.ns),
    )
}

#[given(expr = "the provider's registry holds a private image that pulls only with its login")]
async fn private_image(w: &mut Vkw) {
    let (repo, password) = private(w);
    w.obs()
        .image(json!({"repository": repo, "username": USER, "password": password}))
        .await;
}

#[when(expr = "I create a GPU pod {string} of the private image with the pull Secret {string}")]
async fn create_private(w: &mut Vkw, name: String, secret: String) {
    let node = w.node();
    let (repo, _) = private(w);
    let mut p = gpu_pod(&name, &node, 1, &[]);
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].image = Some(format!("{repo}:1"));
    spec.image_pull_secrets = Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
        name: secret,
    }]);
    w.create_pod(p).await;
}

#[then(
    regex = r#"^pod "([^"]+)" waits in "ErrImagePull" or "ImagePullBackOff" saying "([^"]+)" the image$"#
)]
async fn waits_pulling(w: &mut Vkw, name: String, says: String) {
    wait_for(
        Duration::from_secs(90),
        &format!("{name} waiting ErrImagePull or ImagePullBackOff saying {says:?}"),
        || async {
            let p = w.get(&name).await?;
            let image = p.spec.as_ref()?.containers.first()?.image.clone()?;
            let repo = image
                .rsplit_once(':')
                .map_or(image.as_str(), |(r, _)| r)
                .to_owned();
            let cs = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .clone();
            let waiting = cs.state?.waiting?;
            let reason = waiting.reason.unwrap_or_default();
            let message = waiting.message.unwrap_or_default();
            (phase(&p) == "Pending"
                && ["ErrImagePull", "ImagePullBackOff"].contains(&reason.as_str())
                && message.contains(&says)
                && message.contains(&repo))
            .then_some(())
        },
    )
    .await;
}

/// The scenario's public image of a known size.
fn sized(w: &Vkw, gb: u32) -> String {
    format!("{REGISTRY}/{}/weights-{gb}gb", w.ns)
}

#[given(expr = "the provider's registry holds a public image of {int} GB")]
async fn sized_image(w: &mut Vkw, gb: u32) {
    let repo = sized(w, gb);
    w.obs()
        .image(json!({"repository": repo, "size_gb": gb}))
        .await;
}

#[when(expr = "I create a GPU pod {string} of the {int} GB image")]
async fn create_sized(w: &mut Vkw, name: String, gb: u32) {
    create_sized_pod(w, name, gb, None).await;
}

#[when(
    expr = "I create a GPU pod {string} of the {int} GB image asking for {word} of ephemeral-storage"
)]
async fn create_sized_roomy(w: &mut Vkw, name: String, gb: u32, storage: String) {
    create_sized_pod(w, name, gb, Some(storage)).await;
}

async fn create_sized_pod(w: &mut Vkw, name: String, gb: u32, storage: Option<String>) {
    let node = w.node();
    let mut p = gpu_pod(&name, &node, 1, &[]);
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.image = Some(format!("{}:1", sized(w, gb)));
    if let Some(storage) = storage {
        let r = c.resources.get_or_insert_default();
        r.requests.get_or_insert_default().insert(
            "ephemeral-storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(storage),
        );
    }
    w.create_pod(p).await;
}

#[then(expr = "pod {string} has the kubelet's Events of a failed pull")]
async fn pull_events(w: &mut Vkw, name: String) {
    let (c, ns) = (w.c(), w.ns.clone());
    let (repo, _) = private(w);
    let image = format!("{repo}:1");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = events_for(&c, &ns, &name).await;
        let has = |reason: &str, note: &dyn Fn(&str) -> bool| {
            events.iter().any(|(r, n)| r == reason && note(n))
        };
        let failed = has("Failed", &|n| {
            n.starts_with(&format!("Failed to pull image \"{image}\": "))
                && n.contains("pull access denied")
        });
        let err = has("Failed", &|n| n == "Error: ErrImagePull");
        let backoff = has("BackOff", &|n| {
            n == format!("Back-off pulling image \"{image}\"")
        });
        let err_backoff = has("Failed", &|n| n == "Error: ImagePullBackOff");
        if failed && err && backoff && err_backoff {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "the kubelet's pull Events on {name} (Failed to pull, ErrImagePull, BackOff, \
             ImagePullBackOff: {failed} {err} {backoff} {err_backoff}); the pod's Events: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[then(expr = "no workload of pod {string} is left at the provider")]
async fn workload_ended(w: &mut Vkw, name: String) {
    let u = w.uids[&name].clone();
    let obs = w.obs();
    wait_for(
        Duration::from_secs(30),
        &format!("the workload of {name} ended"),
        || async { obs.workloads_of(&u).await.is_empty().then_some(()) },
    )
    .await;
}

#[when(expr = "the pull Secret {string} is created with the image's login")]
async fn create_pull_secret(w: &mut Vkw, name: String) {
    let (_, password) = private(w);
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
    let config =
        json!({"auths": {REGISTRY: {"username": USER, "password": password, "auth": auth}}});
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        string_data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            config.to_string(),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(w.c(), &w.ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

#[then(
    expr = "the login's password appears in no log of the virtual kubelet, no Event, no metric and no workload the provider lists"
)]
async fn password_nowhere(w: &mut Vkw) {
    let (_, password) = private(w);
    let log = w.vk().log();
    assert!(!log.is_empty(), "the virtual kubelet's log is read");
    assert!(
        !log.contains(&password),
        "the VK logged the registry password"
    );
    let events: Vec<String> = Api::<k8s_openapi::api::events::v1::Event>::namespaced(w.c(), &w.ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| e.note.unwrap_or_default())
        .collect();
    assert!(!events.is_empty(), "the scenario's Events are read");
    assert!(
        events.iter().all(|n| !n.contains(&password)),
        "an Event holds the registry password"
    );
    let metrics = w.vk().metrics_text().await;
    assert!(metrics.contains("gpu_vk_"), "the VK's metrics are read");
    assert!(
        !metrics.contains(&password),
        "a metric holds the registry password"
    );
    let listed = serde_json::to_string(&w.obs().workloads().await).unwrap();
    assert!(
        listed.contains(&w.uids["model"]),
        "the provider lists the pod's workload"
    );
    assert!(
        !listed.contains(&password),
        "the provider's workload listing (env, command) holds the registry password"
    );
}
