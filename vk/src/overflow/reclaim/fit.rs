//! Whether a replica's replacement would fit an in-cluster node, judged as the scheduler's
//! filters judge it ("Scheduling Framework" filter plugins: NodeResourcesFit, TaintToleration,
//! NodeAffinity with the pod's nodeSelector): requested GPUs, CPU and memory against what the
//! node has free, `NoSchedule`/`NoExecute` taints against the pod's tolerations, and the pod's
//! node selector and required node affinity against the node's labels. Pod (anti-)affinity and
//! topology spread are not judged: a move they defeat is a failed move, which the controller
//! counts ([`super::State`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::overflow::GPU;
use crate::vocab::quantity::{parse_cpu, parse_memory};
use crate::vocab::tolerates;

/// Amounts of the resources reclaim weighs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Amounts {
    pub gpus: i64,
    pub milli_cpu: i64,
    pub memory: i64,
}

impl Amounts {
    fn of(m: Option<&BTreeMap<String, Quantity>>) -> Self {
        let get = |k: &str| m.and_then(|m| m.get(k)).map(|q| q.0.as_str());
        Amounts {
            gpus: get(GPU).and_then(|q| q.parse().ok()).unwrap_or(0),
            milli_cpu: get("cpu").and_then(|q| parse_cpu(q).ok()).unwrap_or(0) as i64,
            memory: get("memory")
                .and_then(|q| parse_memory(q).ok())
                .unwrap_or(0) as i64,
        }
    }

    fn max(self, o: Self) -> Self {
        Amounts {
            gpus: self.gpus.max(o.gpus),
            milli_cpu: self.milli_cpu.max(o.milli_cpu),
            memory: self.memory.max(o.memory),
        }
    }

    fn plus(self, o: Self) -> Self {
        Amounts {
            gpus: self.gpus + o.gpus,
            milli_cpu: self.milli_cpu + o.milli_cpu,
            memory: self.memory + o.memory,
        }
    }

    pub fn minus(self, o: Self) -> Self {
        Amounts {
            gpus: self.gpus - o.gpus,
            milli_cpu: self.milli_cpu - o.milli_cpu,
            memory: self.memory - o.memory,
        }
    }

    /// The first resource of `self` that `room` has too little of.
    fn short_of(&self, room: &Amounts) -> Option<&'static str> {
        [
            (self.gpus > room.gpus, GPU),
            (self.milli_cpu > room.milli_cpu, "cpu"),
            (self.memory > room.memory, "memory"),
        ]
        .into_iter()
        .find_map(|(short, name)| short.then_some(name))
    }
}

/// What a pod requests of its node, as the scheduler counts it: the larger of its containers'
/// sum and its largest init container, plus the pod overhead. A container's request defaults to
/// its limit (the API server's defaulting, needed for extended resources such as GPUs).
pub fn requests(pod: &Pod) -> Amounts {
    let Some(spec) = pod.spec.as_ref() else {
        return Amounts::default();
    };
    let one = |c: &k8s_openapi::api::core::v1::Container| {
        let r = c.resources.as_ref();
        let limits = Amounts::of(r.and_then(|r| r.limits.as_ref()));
        let req = r.and_then(|r| r.requests.as_ref());
        let asked = Amounts::of(req);
        // Absent from requests: the limit stands in.
        let has = |k: &str| req.is_some_and(|m| m.contains_key(k));
        Amounts {
            gpus: if has(GPU) { asked.gpus } else { limits.gpus },
            milli_cpu: if has("cpu") {
                asked.milli_cpu
            } else {
                limits.milli_cpu
            },
            memory: if has("memory") {
                asked.memory
            } else {
                limits.memory
            },
        }
    };
    let sum = spec
        .containers
        .iter()
        .map(one)
        .fold(Amounts::default(), Amounts::plus);
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(one)
        .fold(Amounts::default(), Amounts::max);
    sum.max(init).plus(Amounts::of(spec.overhead.as_ref()))
}

/// What a replica needs of an in-cluster node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needs {
    pub amounts: Amounts,
    node_selector: BTreeMap<String, String>,
    /// Required node affinity; `None`: any node.
    required: Option<Vec<NodeSelectorTerm>>,
    tolerations: Vec<Toleration>,
}

impl Needs {
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        Needs {
            amounts: requests(pod),
            node_selector: spec
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            required: spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| r.node_selector_terms.clone()),
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
        }
    }

    /// Why the pod could never run on `room`, whatever else runs there; `None`: it could.
    pub fn never_on(&self, room: &Room) -> Option<String> {
        if let Some((k, v)) = self
            .node_selector
            .iter()
            .find(|(k, v)| room.labels.get(*k) != Some(*v))
        {
            return Some(format!("node selector {k}={v} does not match"));
        }
        if let Some(terms) = &self.required
            && !terms.iter().any(|t| term_matches(t, room))
        {
            return Some("required node affinity does not match".into());
        }
        if let Some(t) = room.taints.iter().find(|t| {
            matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                && !self.tolerations.iter().any(|tol| tolerates(tol, t))
        }) {
            let value = t.value.as_deref().unwrap_or_default();
            return Some(format!("untolerated taint {}={value}:{}", t.key, t.effect));
        }
        self.amounts
            .short_of(&room.allocatable)
            .map(|r| format!("{r} requested exceeds the node's allocatable"))
    }

    /// Why the pod does not fit `room` now; `None`: it fits.
    pub fn misfit(&self, room: &Room) -> Option<String> {
        self.never_on(room).or_else(|| {
            self.amounts
                .short_of(&room.free)
                .map(|r| format!("insufficient {r}"))
        })
    }
}

/// An in-cluster GPU node as reclaim sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Room {
    labels: BTreeMap<String, String>,
    /// The node's name, for `matchFields` on `metadata.name`.
    name: String,
    taints: Vec<Taint>,
    pub allocatable: Amounts,
    /// Allocatable less what the live pods bound there request.
    pub free: Amounts,
}

impl Room {
    pub fn of(node: &Node) -> Self {
        let allocatable = Amounts::of(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        Room {
            labels: node.metadata.labels.clone().unwrap_or_default(),
            name: node.metadata.name.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
            allocatable,
            free: allocatable,
        }
    }
}

/// A node selector term matches when all its expressions and fields do; a term with neither
/// matches nothing (as in the scheduler).
fn term_matches(t: &NodeSelectorTerm, room: &Room) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement(r, room.labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let v = (r.key == "metadata.name").then_some(room.name.as_str());
            requirement(r, v)
        })
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    let compare = |f: fn(i64, i64) -> bool| match (value.and_then(number), values.first()) {
        (Some(v), Some(w)) => number(w).is_some_and(|w| f(v, w)),
        _ => false,
    };
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|w| w == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|w| w == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(|v, w| v > w),
        "Lt" => compare(|v, w| v < w),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
