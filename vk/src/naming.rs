//! Deterministic provider-side names: every workload carries its pod's UID and our ownership
//! marker, so each pod is individually addressable and every workload traces back to its pod.
//!
//! Format: `vk-<owner>-<pod uid>`, where `<owner>` is the first 8 hex digits of
//! SHA-256(`<cluster id>/<node name>`). 48 characters, lowercase, DNS-label safe, so it fits
//! provider name fields (RunPod pod names, Vast labels, Slurm job names).

use std::fmt;

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

const PREFIX: &str = "vk-";
const OWNER_LEN: usize = 8;
const UID_LEN: usize = 36;

/// Which VK (cluster and node) a workload belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    cluster_id: String,
    node: String,
    tag: String,
}

impl Owner {
    pub fn new(cluster_id: &str, node: &str) -> Self {
        let digest = Sha256::digest(format!("{cluster_id}/{node}").as_bytes());
        let tag: String = digest
            .iter()
            .take(OWNER_LEN / 2)
            .map(|b| format!("{b:02x}"))
            .collect();
        Self {
            cluster_id: cluster_id.to_owned(),
            node: node.to_owned(),
            tag,
        }
    }

    /// The short marker embedded in names.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The id of the workload for the pod with this UID.
    pub fn workload_id(&self, pod_uid: &str) -> Option<WorkloadId> {
        WorkloadId::parse(&format!(
            "{PREFIX}{}-{}",
            self.tag,
            pod_uid.to_ascii_lowercase()
        ))
    }

    /// True when this workload was created by this VK (same cluster and node).
    pub fn owns(&self, id: &WorkloadId) -> bool {
        id.owner_tag() == self.tag
    }
}

/// A parsed, valid workload name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadId(String);

impl WorkloadId {
    /// Parses a provider-side name; `None` when it is not one of ours (any VK's).
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix(PREFIX)?;
        if rest.len() != OWNER_LEN + 1 + UID_LEN || rest.as_bytes()[OWNER_LEN] != b'-' {
            return None;
        }
        let (owner, uid) = (&rest[..OWNER_LEN], &rest[OWNER_LEN + 1..]);
        let hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(owner) || !is_uuid(uid) {
            return None;
        }
        Some(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn owner_tag(&self) -> &str {
        &self.0[PREFIX.len()..PREFIX.len() + OWNER_LEN]
    }

    /// The UID of the pod this workload runs.
    pub fn pod_uid(&self) -> &str {
        &self.0[PREFIX.len() + OWNER_LEN + 1..]
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == UID_LEN
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkloadId({})", self.0)
    }
}

impl Serialize for WorkloadId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn owner_tags_differ_per_node_and_cluster() {
        let a = Owner::new("c1", "vk-a");
        assert_ne!(a.tag(), Owner::new("c1", "vk-b").tag());
        assert_ne!(a.tag(), Owner::new("c2", "vk-a").tag());
        assert_eq!(a.tag(), Owner::new("c1", "vk-a").tag());
    }

    #[test]
    fn rejects_foreign_and_malformed_names() {
        for bad in [
            "",
            "vk-",
            "my-pod",
            "vk-0123456z-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b",
            "vk-01234567-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6",
            "vk-01234567_8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6b",
            "vk-01234567-8F1C6A2E-1B7D-4F6E-9A41-0C2D3E4F5A6B",
            "vk-01234567-8f1c6a2e-1b7d-4f6e-9a41-0c2d3e4f5a6bX",
        ] {
            assert_eq!(WorkloadId::parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn names_round_trip(cluster in "[a-z0-9-]{1,20}", node in "[a-z0-9.-]{1,40}", uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}") {
            let owner = Owner::new(&cluster, &node);
            let id = owner.workload_id(&uid).expect("valid uid");
            prop_assert_eq!(id.pod_uid(), uid.as_str());
            prop_assert!(owner.owns(&id));
            let reparsed = WorkloadId::parse(id.as_str()).expect("parses");
            prop_assert_eq!(&reparsed, &id);
            prop_assert!(id.as_str().len() <= 63);
        }

        #[test]
        fn other_owners_do_not_own(uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", n1 in "[a-z]{1,10}", n2 in "[a-z]{1,10}") {
            prop_assume!(n1 != n2);
            let a = Owner::new("c", &n1);
            let b = Owner::new("c", &n2);
            let id = a.workload_id(&uid).expect("valid uid");
            prop_assert!(!b.owns(&id) || a.tag() == b.tag());
        }
    }
}
