//! What the plugin reads, with the user's own kubeconfig and rights: the virtual nodes (when
//! the user may list Nodes), the pods a virtual kubelet of ours serves, and a pod's Events.
//! Nothing is written, and no endpoint but the API server is called.

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use vk::vocab::TYPE_LABEL;
use vk::vocab::names::ANN_ASSIGNED;

use crate::model::Snapshot;

/// Which namespaces' pods.
pub enum Scope {
    Namespace(String),
    All,
}

/// The virtual nodes, or none when the user may not list Nodes (pods are then recognised by
/// the provider the virtual kubelet assigned them alone).
pub async fn virtual_nodes(client: &Client) -> anyhow::Result<Vec<Node>> {
    let lp = ListParams::default().labels(&format!("{}={}", TYPE_LABEL.0, TYPE_LABEL.1));
    match Api::<Node>::all(client.clone()).list(&lp).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// The pods of `scope` bound to one of `nodes` or carrying the provider a virtual kubelet
/// assigned them.
pub async fn pods(client: &Client, scope: &Scope, nodes: &[Node]) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = match scope {
        Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
        Scope::All => Api::all(client.clone()),
    };
    let names: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let ours = |p: &Pod| {
        let on_node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| names.contains(&n));
        let assigned = p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANN_ASSIGNED));
        on_node || assigned
    };
    let listed = api.list(&ListParams::default()).await?;
    Ok(listed.items.into_iter().filter(|p| ours(p)).collect())
}

/// Everything `providers`, `pods` and `spend` show.
pub async fn snapshot(client: &Client, scope: &Scope) -> anyhow::Result<Snapshot> {
    let nodes = virtual_nodes(client).await?;
    let pods = pods(client, scope, &nodes).await?;
    Ok(Snapshot {
        nodes,
        pods,
        now: None,
    })
}

/// The pod `name` of `namespace` and its Events; `None` when it does not exist.
pub async fn pod_and_events(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<(Pod, Vec<Event>)>> {
    let Some(pod) = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
    else {
        return Ok(None);
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let events = match Api::<Event>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
    {
        Ok(l) => l.items,
        // Events are a help, not the answer: without the right to read them, none.
        Err(kube::Error::Api(e)) if e.code == 403 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(Some((pod, events)))
}
