//! A pod being deleted keeps its workload through its containers' `preStop` sleep: the kubelet
//! runs that hook before it stops the container ("Container Lifecycle Hooks", Sleep action, in
//! the Kubernetes docs), and users write it so that the Service stops sending requests to the
//! pod (its endpoint turns `terminating`) before the server goes. Deleting the workload at once
//! would cut the requests kube-proxy still sends it.

use super::*;

/// How long the workload of a pod being deleted should still run: its longest `preStop` sleep,
/// counted from when the deletion was asked for and at most its grace period; `None` when that
/// time is past or there is no such hook.
pub fn pre_stop_wait(pod: &Pod, now: Timestamp) -> Option<Duration> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .unwrap_or(0)
        .max(0);
    let sleep = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .filter_map(|c| c.lifecycle.as_ref()?.pre_stop.as_ref()?.sleep.as_ref())
        .map(|s| s.seconds)
        .max()?
        .clamp(0, grace);
    // The deletion timestamp is when the grace period ends.
    let asked = deadline
        .checked_sub(jiff::SignedDuration::from_secs(grace))
        .ok()?;
    let until = asked
        .checked_add(jiff::SignedDuration::from_secs(sleep))
        .ok()?;
    let left = until.duration_since(now);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deleting(sleep: Option<i64>, grace: i64, deadline_s: i64) -> Pod {
        let lifecycle = sleep.map(|s| json!({"preStop": {"sleep": {"seconds": s}}}));
        serde_json::from_value(json!({
            "metadata": {"name": "p", "deletionGracePeriodSeconds": grace,
                "deletionTimestamp": Timestamp::from_second(deadline_s).unwrap().to_string()},
            "spec": {"containers": [{"name": "c", "image": "i", "lifecycle": lifecycle}]}
        }))
        .unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn the_workload_outlives_the_deletion_by_the_pre_stop_sleep_only() {
        // Deleted at 1000 with 30 s of grace (deadline 1030), preStop sleep 5 s.
        let p = deleting(Some(5), 30, 1030);
        assert_eq!(pre_stop_wait(&p, at(1000)), Some(Duration::from_secs(5)));
        assert_eq!(pre_stop_wait(&p, at(1003)), Some(Duration::from_secs(2)));
        assert_eq!(pre_stop_wait(&p, at(1005)), None);
        // Never beyond the grace period, and not at all without the hook or with grace 0.
        assert_eq!(
            pre_stop_wait(&deleting(Some(60), 10, 1010), at(1000)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(pre_stop_wait(&deleting(None, 30, 1030), at(1000)), None);
        assert_eq!(pre_stop_wait(&deleting(Some(5), 0, 1000), at(1000)), None);
    }
}
