//! The virtual Node: registration, Lease heartbeats, status on change (or every few minutes),
//! re-creation when the Node is deleted, and a clean not-ready on shutdown. Beside the
//! kubelet's own conditions it reports one condition per provider (`gpu-vk.io/provider.<name>`:
//! True while its circuit breaker admits new pods) and, with `capacity.gpus: inventory`, the
//! GPUs the providers' inventories show free as allocatable `nvidia.com/gpu`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{info, warn};

mod address;
mod object;
pub use address::service_address;

use crate::config::Config;
use crate::provider::health::Health;
use crate::telemetry::ErrorChain;

/// `capacity.gpus` value that makes allocatable GPUs follow the providers' inventories.
pub const GPUS_FROM_INVENTORY: &str = "inventory";
/// Node condition type per provider: `gpu-vk.io/provider.<name>`.
pub use crate::vocab::names::PROVIDER_PREFIX as PROVIDER_CONDITION_PREFIX;

/// What the pod pipeline knows that the node reports: each provider's health and the GPUs the
/// inventories show free (providers that give no count add none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderFacts {
    pub health: Vec<(String, Health)>,
    pub free_gpus: u64,
}

impl ProviderFacts {
    /// Equal for the node's purposes: health by state (not by the seconds left), GPUs.
    fn same(&self, o: &Self) -> bool {
        let kinds = |f: &Self| -> Vec<(String, bool)> {
            f.health
                .iter()
                .map(|(n, h)| (n.clone(), h.admits()))
                .collect()
        };
        self.free_gpus == o.free_gpus && kinds(self) == kinds(o)
    }
}

/// Where the node reads [`ProviderFacts`] (the pod pipeline, once it exists).
pub type FactsSource = Arc<dyn Fn() -> ProviderFacts + Send + Sync>;

/// Declared in `status.declaredFeatures` (unless `kubeletApi.declareExtendWebSocketsToKubelet`
/// is false): the kubelet API serves exec over WebSockets, so a 1.36 API server passes
/// `kubectl exec`'s WebSocket through instead of translating it to SPDY. What the API server
/// does with it (`pkg/registry/core/pod/rest/subresources.go`, 1.36.3): with its
/// `TranslateStreamCloseWebsocketRequests` and `ExtendWebSocketsToKubelet` gates on and the
/// feature in the node's list (read from the Node on each request,
/// `pkg/kubelet/client/kubelet_client.go`), exec/attach/portforward are proxied to the
/// kubelet unchanged; otherwise a `v5.channel.k8s.io` WebSocket is translated to SPDY towards
/// the kubelet, and any other request (SPDY, or WebSocket v4) is proxied unchanged.
pub const DECLARED_FEATURES: &[&str] = &["ExtendWebSocketsToKubelet"];
/// Annotation naming the VK (owner tag: cluster id + node name) that registered the Node.
pub use crate::vocab::names::OWNER as OWNER_ANNOTATION;
const LEASE_NS: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;

/// The longest one lease renewal may take: its renewal interval, between 1 s and a quarter
/// of the lease, so several attempts fit in one lease.
fn renew_timeout(interval: Duration) -> Duration {
    interval.clamp(
        Duration::from_secs(1),
        Duration::from_secs(LEASE_SECONDS as u64 / 4),
    )
}

/// Errors keeping the Node object and its lease up to date.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read node {node}")]
    Get {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to create node {node}")]
    Create {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write node status")]
    WriteStatus(#[source] kube::Error),
    #[error("failed to renew lease")]
    RenewLease(#[source] kube::Error),
    #[error("lease renewal took more than {0:?}")]
    RenewLeaseTimeout(Duration),
    #[error(
        "node {node} exists and was not registered by this virtual kubelet ({why}); refusing to \
         take it over, since its pods would be offloaded: delete it, choose another nodeName, \
         or set adoptExistingNode: true"
    )]
    NotOurs { node: String, why: String },
}

/// Whether an existing Node may be managed by the VK with owner tag `tag`: `Err` says why not.
/// Ours: it carries our owner annotation, or (registered before the annotation existed) no
/// owner annotation and the kubelet version this VK reports.
pub fn check_ownership(node: &Node, tag: &str) -> Result<(), String> {
    let owner = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNER_ANNOTATION));
    match owner {
        Some(o) if o == tag => Ok(()),
        Some(o) => Err(format!("it belongs to virtual kubelet {o}")),
        None => {
            let version = node
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.as_str())
                .unwrap_or_default();
            if version.contains("-gpu-vk.") {
                Ok(())
            } else {
                Err(format!(
                    "no {OWNER_ANNOTATION} annotation; kubelet version {version:?}"
                ))
            }
        }
    }
}

/// Manages the Node object of this VK.
pub struct NodeManager {
    client: Client,
    cfg: Arc<Config>,
    provider_names: Vec<String>,
    facts: std::sync::RwLock<Option<FactsSource>>,
}

impl NodeManager {
    pub fn new(client: Client, cfg: Arc<Config>, provider_names: Vec<String>) -> Self {
        Self {
            client,
            cfg,
            provider_names,
            facts: std::sync::RwLock::new(None),
        }
    }

    /// Lets the node report what `source` says of the providers (health, inventory GPUs).
    pub fn report_facts(&self, source: FactsSource) {
        *self.facts.write().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    fn facts(&self) -> ProviderFacts {
        self.facts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|f| f())
            .unwrap_or_default()
    }

    fn api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// The Node object as we want it (metadata and spec).
    pub fn desired(&self) -> Node {
        object::desired(&self.cfg)
    }

    /// The status we report; `ready` false on shutdown.
    pub fn status(&self, ready: bool, now: Timestamp) -> NodeStatus {
        self.status_with(ready, now, &self.facts())
    }

    /// [`Self::status`] with the given provider facts.
    pub fn status_with(&self, ready: bool, now: Timestamp, facts: &ProviderFacts) -> NodeStatus {
        object::status(&self.cfg, &self.provider_names, ready, now, facts)
    }

    /// Creates the Node if missing (or re-creates it) and posts its status. Returns its UID.
    fn owner_tag(&self) -> String {
        crate::naming::Owner::new(&self.cfg.cluster_id, &self.cfg.node_name)
            .tag()
            .to_owned()
    }

    /// Refuses (with [`Error::NotOurs`]) an existing Node of our name that another kubelet or
    /// VK registered, unless `adoptExistingNode` is set. Run once before anything starts.
    pub async fn claim(&self) -> Result<(), Error> {
        let existing = self
            .api()
            .get_opt(&self.cfg.node_name)
            .await
            .map_err(|source| Error::Get {
                node: self.cfg.node_name.clone(),
                source,
            })?;
        match existing {
            Some(n) if !self.cfg.adopt_existing_node => check_ownership(&n, &self.owner_tag())
                .map_err(|why| Error::NotOurs {
                    node: self.cfg.node_name.clone(),
                    why,
                }),
            _ => Ok(()),
        }
    }

    pub async fn register(&self) -> Result<String, Error> {
        let api = self.api();
        let node = match api
            .get_opt(&self.cfg.node_name)
            .await
            .map_err(|source| Error::Get {
                node: self.cfg.node_name.clone(),
                source,
            })? {
            Some(n) => {
                // Keep labels and taints as configured (server-side apply owns only our fields).
                let pp = PatchParams::apply("gpu-vk").force();
                let mut desired = self.desired();
                desired.metadata.managed_fields = None;
                let body = serde_json::json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": desired.metadata, "spec": desired.spec,
                });
                api.patch(&self.cfg.node_name, &pp, &Patch::Apply(&body))
                    .await
                    .unwrap_or(n)
            }
            None => {
                info!(node = %self.cfg.node_name, "registering node");
                api.create(&PostParams::default(), &self.desired())
                    .await
                    .map_err(|source| Error::Create {
                        node: self.cfg.node_name.clone(),
                        source,
                    })?
            }
        };
        self.post_status(true).await?;
        Ok(node.metadata.uid.unwrap_or_default())
    }

    pub async fn post_status(&self, ready: bool) -> Result<(), Error> {
        let patch = serde_json::json!({ "status": self.status(ready, Timestamp::now()) });
        self.api()
            .patch_status(
                &self.cfg.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error::WriteStatus)?;
        Ok(())
    }

    async fn renew_lease(&self, node_uid: &str) -> Result<(), Error> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NS);
        let name = &self.cfg.node_name;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(LEASE_NS.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.clone(),
                    uid: node_uid.to_owned(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(LEASE_SECONDS),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..Default::default()
            }),
        };
        let pp = PatchParams::apply("gpu-vk").force();
        let mut body = serde_json::to_value(&lease).unwrap_or_default();
        body["apiVersion"] = "coordination.k8s.io/v1".into();
        body["kind"] = "Lease".into();
        // Its own deadline: a renewal stuck behind a slow API server must not hold the loop
        // that also writes the node's status, nor outlive the lease it renews.
        let limit = renew_timeout(Duration::from_millis(self.cfg.timings.lease_renew_ms));
        tokio::time::timeout(limit, api.patch(name, &pp, &Patch::Apply(&body)))
            .await
            .map_err(|_| Error::RenewLeaseTimeout(limit))?
            .map_err(Error::RenewLease)?;
        Ok(())
    }

    /// Keeps the node registered, its lease renewed and its status fresh until `shutdown`,
    /// then marks it not ready (unless another replica is to take over: leader election).
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let renew = Duration::from_millis(self.cfg.timings.lease_renew_ms);
        let status_every = Duration::from_millis(self.cfg.timings.node_status_ms);
        let (deleted_tx, mut deleted_rx) = tokio::sync::mpsc::channel::<()>(1);
        let watch = {
            let me = self.clone();
            tokio::spawn(async move {
                let wc = watcher::Config::default()
                    .fields(&format!("metadata.name={}", me.cfg.node_name));
                let mut s = watcher(me.api(), wc).default_backoff().boxed();
                while let Some(ev) = s.next().await {
                    if let Ok(watcher::Event::Delete(_)) = ev {
                        let _ = deleted_tx.try_send(());
                    }
                }
            })
        };
        let main = async {
            let mut uid = String::new();
            let mut last_status = None::<Instant>;
            let mut last_facts = self.facts();
            loop {
                if uid.is_empty() {
                    match self.register().await {
                        Ok(u) => {
                            uid = u;
                            last_status = Some(Instant::now());
                            info!(node = %self.cfg.node_name, "node registered and ready");
                        }
                        Err(e) => {
                            warn!(error = %ErrorChain(&e), "node registration failed; retrying")
                        }
                    }
                }
                if !uid.is_empty() {
                    if let Err(e) = self.renew_lease(&uid).await {
                        warn!(error = %ErrorChain(&e), "lease renewal failed");
                    }
                    let facts = self.facts();
                    if last_status.is_none_or(|t| t.elapsed() >= status_every)
                        || !facts.same(&last_facts)
                    {
                        match self.post_status(true).await {
                            Ok(()) => {
                                last_status = Some(Instant::now());
                                last_facts = facts;
                            }
                            Err(e) => warn!(error = %ErrorChain(&e), "node status update failed"),
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(if uid.is_empty() { Duration::from_secs(1) } else { renew }) => {}
                    Some(()) = deleted_rx.recv() => {
                        warn!(node = %self.cfg.node_name, "node object deleted; re-creating it");
                        uid.clear();
                    }
                }
            }
        };
        tokio::select! {
            _ = main => {}
            _ = shutdown => {}
        }
        watch.abort();
        if self.cfg.leader_election.enabled {
            // Another replica takes over (the leader lease is released next): a not-ready blip
            // would only taint the node and unsettle its pods.
            info!(node = %self.cfg.node_name, "leaving the node to the next leader");
            return;
        }
        match self.post_status(false).await {
            Ok(()) => info!(node = %self.cfg.node_name, "node marked not ready"),
            Err(e) => warn!(error = %ErrorChain(&e), "failed to mark node not ready on shutdown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSystemInfo;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn node(owner: Option<&str>, kubelet_version: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("gpu-0".into()),
                annotations: owner
                    .map(|o| BTreeMap::from([(OWNER_ANNOTATION.to_owned(), o.to_owned())])),
                ..Default::default()
            },
            spec: None,
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    kubelet_version: kubelet_version.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_node_of_a_real_kubelet_or_another_vk_is_not_ours() {
        let real = check_ownership(&node(None, "v1.36.3"), "abc123").unwrap_err();
        assert!(real.contains("no gpu-vk.io/owner annotation"), "{real}");
        let other =
            check_ownership(&node(Some("zzz999"), "v1.36.0-gpu-vk.0.1.0"), "abc123").unwrap_err();
        assert!(other.contains("zzz999"), "{other}");
    }

    #[test]
    fn our_node_and_one_registered_before_the_annotation_existed_are_ours() {
        assert_eq!(
            check_ownership(&node(Some("abc123"), "v1.36.3"), "abc123"),
            Ok(())
        );
        assert_eq!(
            check_ownership(&node(None, "v1.36.0-gpu-vk.0.1.0"), "abc123"),
            Ok(())
        );
    }

    #[test]
    fn the_node_carries_the_highest_cuda_version_its_providers_declare() {
        let cfg: Config = serde_saphyr::from_str(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod, settings: {maxCudaVersion: '12.10'}}\n- {name: v, kind: vast, settings: {maxCudaVersion: '12.8'}}\n- {name: s, kind: slurm}\n",
        )
        .unwrap();
        let labels = object::desired(&cfg).metadata.labels.unwrap();
        assert_eq!(labels[crate::vocab::CUDA_DRIVER_MAJOR], "12");
        assert_eq!(
            labels[crate::vocab::CUDA_DRIVER_MINOR],
            "10",
            "12.10 is above 12.8"
        );
        let none: Config = serde_saphyr::from_str(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: s, kind: slurm}\n",
        )
        .unwrap();
        let labels = object::desired(&none).metadata.labels.unwrap();
        assert!(!labels.contains_key(crate::vocab::CUDA_DRIVER_MAJOR));
    }

    #[tokio::test]
    async fn provider_health_is_a_condition_each_and_inventory_mode_reports_free_gpus() {
        let kube = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(kube).unwrap();
        let cfg: Config = serde_saphyr::from_str(
            "nodeName: vk\nclusterId: c\ncapacity: {gpus: inventory}\nproviders:\n- {name: rp, kind: runpod}\n- {name: v, kind: vast}\n",
        )
        .unwrap();
        let nm = NodeManager::new(client, Arc::new(cfg), vec!["rp".into(), "v".into()]);
        let facts = ProviderFacts {
            health: vec![
                ("rp".into(), Health::Healthy),
                (
                    "v".into(),
                    Health::Unhealthy {
                        reason: "5 consecutive failed calls".into(),
                        retry_in: Duration::from_secs(12),
                    },
                ),
            ],
            free_gpus: 37,
        };
        let st = nm.status_with(true, Timestamp::now(), &facts);
        let conds = st.conditions.unwrap();
        let of = |t: &str| conds.iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!(of("gpu-vk.io/provider.rp").status, "True");
        let v = of("gpu-vk.io/provider.v");
        assert_eq!(
            (v.status.as_str(), v.reason.as_deref()),
            ("False", Some("CircuitOpen"))
        );
        assert!(v.message.unwrap().contains("12s"));
        assert_eq!(
            of("Ready").status,
            "True",
            "a provider's health never makes the node NotReady"
        );
        assert_eq!(
            st.allocatable.unwrap()[crate::pods::spec::GPU_RESOURCE],
            Quantity("37".into())
        );
        // Only a change of state (not the seconds left) is worth a status write.
        let mut later = facts.clone();
        later.health[1].1 = Health::Unhealthy {
            reason: "x".into(),
            retry_in: Duration::from_secs(2),
        };
        assert!(facts.same(&later));
        later.health[1].1 = Health::Healthy;
        assert!(!facts.same(&later));
    }
}
