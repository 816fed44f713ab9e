//! The plugin as a user runs it, against the local control plane in `KUBECONFIG` (started by
//! `make test`): its exit codes, its structured output and its completion script. What it shows
//! of a running virtual kubelet is checked by the conformance suite (dispatch.feature).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn plugin(args: &[&str]) -> Output {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: run through scripts/testbed/with (make test does)"
    );
    Command::new(env!("CARGO_BIN_EXE_kubectl-gpu_vk"))
        .args(args)
        .output()
        .expect("the plugin runs")
}

#[test]
fn usage_errors_exit_2_and_a_missing_pod_exits_3() {
    let bad = plugin(&["pods", "--period", "year"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let missing = plugin(&["why", "no-such-pod", "-n", "default"]);
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    let text = String::from_utf8_lossy(&missing.stdout);
    assert!(
        text.contains("default/no-such-pod does not exist"),
        "{text}"
    );
}

#[test]
fn structured_output_parses_and_an_empty_cluster_lists_nothing() {
    let json = plugin(&["pods", "-A", "-o", "json"]);
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert!(v.is_array(), "{v}");
    let yaml = plugin(&["providers", "-o", "yaml"]);
    assert_eq!(yaml.status.code(), Some(0), "{yaml:?}");
    let v: serde_json::Value = serde_saphyr::from_slice(&yaml.stdout).expect("YAML");
    assert!(v.is_array(), "{v:?}");
    let table = plugin(&["spend", "-A", "--period", "week", "--tz", "Europe/Berlin"]);
    assert_eq!(table.status.code(), Some(0), "{table:?}");
    assert!(String::from_utf8_lossy(&table.stdout).starts_with("NAMESPACE"));
}

#[test]
fn a_completion_script_is_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = plugin(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("providers") && text.contains("why"),
            "{shell}: {text}"
        );
    }
}

#[test]
fn an_unknown_time_zone_is_an_error_not_a_guess() {
    let out = plugin(&["spend", "-A", "--tz", "Mars/Olympus"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Mars/Olympus"));
}
