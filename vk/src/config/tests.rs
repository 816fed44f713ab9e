//! Unit tests of the configuration file: defaults, validation and refusals.

use super::*;

fn parse(s: &str) -> Result<Config, Error> {
    let cfg: Config = serde_saphyr::from_str(s).map_err(|source| Error::Parse {
        path: "test".into(),
        source,
    })?;
    cfg.validate()?;
    Ok(cfg)
}

#[test]
fn minimal_config_gets_defaults() {
    let cfg =
        parse("nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n").unwrap();
    assert_eq!(cfg.kubelet_port, 10250);
    assert_eq!(cfg.capacity.gpus, "1000");
    assert!(cfg.taint);
    assert_eq!(cfg.timings.poll_interval_ms, 2000);
    assert_eq!(cfg.kubelet_api.max_connections, 1024);
    assert_eq!(
        cfg.kubelet_api.exec_idle_timeout(),
        Some(Duration::from_secs(14_400))
    );
}

/// A block that sets one field keeps every other at its default (each block's one `Default`),
/// and an unknown field in it is still refused.
#[test]
fn a_partial_block_keeps_the_other_defaults() {
    let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
    let cfg = parse(&format!(
        "{base}timings: {{pollIntervalMs: 500}}\ndispatch: {{breaker: {{failures: 2}}}}\n\
         leaderElection: {{enabled: true}}\ncapacity: {{gpus: inventory}}\n"
    ))
    .unwrap();
    assert_eq!(
        (
            cfg.timings.poll_interval_ms,
            cfg.timings.gc_grace_ms,
            cfg.timings.loss_lists
        ),
        (500, 30_000, 3)
    );
    let b = &cfg.dispatch.breaker;
    assert_eq!((b.failures, b.open_ms, b.slow_call_ms), (2, 30_000, 20_000));
    assert!(cfg.dispatch.pod_policy);
    assert_eq!(cfg.dispatch.inventory_interval_ms, 60_000);
    let l = &cfg.leader_election;
    assert_eq!(
        (
            l.namespace.as_str(),
            l.lease_duration_ms,
            l.renew_deadline_ms,
            l.retry_period_ms
        ),
        ("kube-node-lease", 15_000, 10_000, 2_000)
    );
    assert_eq!(
        (cfg.capacity.gpus.as_str(), cfg.capacity.cpu.as_str()),
        ("inventory", "1000")
    );
    assert!(
        parse(&format!(
            "{base}timings: {{pollIntervalMs: 500, poll: 1}}\n"
        ))
        .is_err()
    );
}

#[test]
fn cluster_networks_are_cidrs() {
    let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
    let cfg = parse(&format!(
        "{base}clusterNetworks: [10.96.0.0/12, \"fd00::/8\"]\n"
    ))
    .unwrap();
    assert_eq!(cfg.cluster_networks.len(), 2);
    assert!(parse(&format!("{base}clusterNetworks: [10.96.0.0]\n")).is_err());
    assert!(parse(&format!("{base}clusterNetworks: [cluster]\n")).is_err());
}

#[test]
fn kubelet_api_limits_are_read_and_checked() {
    let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
    let cfg = parse(&format!(
        "{base}kubeletApi: {{maxConnections: 8, execIdleTimeoutSeconds: 0}}\n"
    ))
    .unwrap();
    assert_eq!(cfg.kubelet_api.max_connections, 8);
    assert_eq!(cfg.kubelet_api.exec_idle_timeout(), None);
    assert!(parse(&format!("{base}kubeletApi: {{maxConnections: 0}}\n")).is_err());
    assert!(parse(&format!("{base}kubeletApi: {{maxConnection: 8}}\n")).is_err());
}

#[test]
fn rejects_duplicate_names_unknown_fields_and_no_providers() {
    assert!(parse("nodeName: vk\nclusterId: c\nproviders: []\n").is_err());
    assert!(
        parse("nodeName: vk\nclusterId: c\nproviders:\n- {name: a, kind: runpod}\n- {name: a, kind: vast}\n")
            .is_err()
    );
    assert!(
        parse("nodeName: vk\nclusterId: c\nbogus: 1\nproviders:\n- {name: a, kind: runpod}\n")
            .is_err()
    );
}

#[test]
fn leader_election_timings_must_let_a_leader_stop_before_a_standby_takes_over() {
    let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n";
    let cfg = parse(base).unwrap();
    assert!(!cfg.leader_election.enabled);
    assert_eq!(cfg.leader_election.lease_duration_seconds(), 15);
    let with = |le: &str| parse(&format!("{base}leaderElection: {le}\n"));
    assert!(
        with("{enabled: true, leaseDurationMs: 4000, renewDeadlineMs: 3000, retryPeriodMs: 500}")
            .is_ok()
    );
    // A renew deadline at or past the duration would let two replicas lead at once.
    let err = with("{enabled: true, leaseDurationMs: 4000, renewDeadlineMs: 4000}").unwrap_err();
    assert!(err.to_string().contains("renewDeadlineMs"), "{err}");
    // 3.5 s is recorded as 4 whole seconds: the deadline compares against that.
    assert!(with("{leaseDurationMs: 3500, renewDeadlineMs: 3800, retryPeriodMs: 500}").is_ok());
    assert!(with("{retryPeriodMs: 0}").is_err());
}

#[test]
fn secret_env_defaults_by_kind_and_is_overridden() {
    let cfg = parse(
        "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n\
         - {name: v, kind: vast}\n- {name: hpc, kind: slurm, sharedSlurmUser: true}\n\
         - {name: rp2, kind: runpod, secretEnv: allow}\n- {name: hpc2, kind: slurm, secretEnv: deny, sharedSlurmUser: true}\n",
    )
    .unwrap();
    let got = |ns: &[String]| -> Vec<SecretEnv> {
        cfg.providers.iter().map(|p| p.secret_env(ns)).collect()
    };
    use SecretEnv::{Allow, Deny};
    // Slurm: its jobs share one Slurm user, so Secrets only for a single tenant.
    assert_eq!(got(&[]), [Deny, Deny, Deny, Allow, Deny]);
    assert_eq!(
        got(&["a".into(), "b".into()]),
        [Deny, Deny, Deny, Allow, Deny]
    );
    assert_eq!(got(&["ml".into()]), [Deny, Deny, Allow, Allow, Deny]);
    assert_eq!(cfg.shared_slurm_secret_warnings(), Vec::<String>::new());
    let shared = parse(
        "nodeName: vk\nclusterId: c\nproviders:\n- {name: hpc, kind: slurm, secretEnv: allow, sharedSlurmUser: true}\n",
    )
    .unwrap();
    let w = shared.shared_slurm_secret_warnings();
    assert!(w.len() == 1 && w[0].contains("provider hpc"), "{w:?}");
    assert!(!cfg.secret_failover);
    let on = parse(
        "nodeName: vk\nclusterId: c\nsecretFailover: true\nproviders:\n- {name: a, kind: runpod}\n",
    )
    .unwrap();
    assert!(on.secret_failover);
    assert!(
        parse(
            "nodeName: vk\nclusterId: c\nproviders:\n- {name: a, kind: runpod, secretEnv: maybe}\n"
        )
        .is_err()
    );
}

#[test]
fn dispatch_and_limits_are_read_and_checked() {
    let base = "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod, limits: {maxWorkloads: 3}}\n";
    let cfg = parse(base).unwrap();
    assert_eq!(cfg.dispatch.policy, DispatchPolicy::Preference);
    assert!(cfg.dispatch.pod_policy);
    assert_eq!(cfg.providers[0].limits.max_workloads, Some(3));
    assert_eq!(cfg.limits, Limits::default());
    let cfg = parse(&format!(
        "{base}dispatch: {{policy: cheapest, breaker: {{failures: 2}}}}\nlimits: {{maxSpendPerHour: 2.5}}\n"
    ))
    .unwrap();
    assert_eq!(cfg.dispatch.policy, DispatchPolicy::Cheapest);
    assert_eq!(cfg.dispatch.breaker.failures, 2);
    assert_eq!(cfg.limits.max_spend_per_hour, Some(2.5));
    assert!(parse(&format!("{base}dispatch: {{policy: random}}\n")).is_err());
    assert!(parse(&format!("{base}limits: {{maxSpendPerHour: -1}}\n")).is_err());
    assert!(parse(&format!("{base}dispatch: {{breaker: {{failures: 0}}}}\n")).is_err());
}

#[test]
fn start_deadlines_default_by_kind_and_are_overridden() {
    let cfg = parse(
        "nodeName: vk\nclusterId: c\nproviders:\n- {name: rp, kind: runpod}\n\
         - {name: hpc, kind: slurm, sharedSlurmUser: true}\n- {name: v, kind: vast, startDeadlineSeconds: 0}\n\
         - {name: hpc2, kind: slurm, sharedSlurmUser: true, startDeadlineSeconds: 600, maxStartDeadlineSeconds: 3600, startAttempts: 1}\n",
    )
    .unwrap();
    let d: Vec<StartDeadline> = cfg.providers.iter().map(|p| p.start_deadline()).collect();
    let s = |n| Some(Duration::from_secs(n));
    assert_eq!(
        d[0],
        StartDeadline {
            default: s(1800),
            max: s(1800),
            attempts: 2,
        }
    );
    let none = StartDeadline {
        attempts: 2,
        ..StartDeadline::default()
    };
    assert_eq!(d[1], none, "a Slurm queue wait is normal");
    assert_eq!(d[2], none, "0 turns it off");
    assert_eq!(
        d[3],
        StartDeadline {
            default: s(600),
            max: s(3600),
            attempts: 1,
        }
    );
}

#[test]
fn secret_debug_is_redacted() {
    let s = Secret::new("hunter2");
    assert!(!format!("{s:?}").contains("hunter2"));
    assert_eq!(s.expose(), "hunter2");
}

#[test]
fn a_slurm_provider_serves_one_namespace_unless_its_user_is_shared_on_purpose() {
    let base = "nodeName: vk\nclusterId: c\n";
    let slurm = "providers:\n- {name: hpc, kind: slurm}\n";
    for ns in ["", "allowedNamespaces: [a, b]\n"] {
        let err = parse(&format!("{base}{ns}{slurm}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("provider hpc")
                && err.contains("srun --jobid")
                && err.contains("sharedSlurmUser"),
            "{err}"
        );
    }
    assert!(parse(&format!("{base}allowedNamespaces: [a]\n{slurm}")).is_ok());
    let shared = "providers:\n- {name: hpc, kind: slurm, sharedSlurmUser: true}\n";
    assert!(parse(&format!("{base}{shared}")).is_ok());
}
