//! Steps that run `kubectl gpu-vk` (the workspace's kubectl plugin) as a user would, with the
//! suite's kubeconfig, against the scenario's running virtual kubelet: what it shows must be what
//! the virtual kubelet decided.

use std::process::Command;

use cucumber::then;

use super::Vkw;

/// Runs the plugin (built beside the `vk` binary) with `args`: its stdout and exit code.
fn plugin(args: &[&str]) -> (String, i32) {
    let bin = conformance::harness::vk_binary().with_file_name("kubectl-gpu_vk");
    let out = Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build -p kubectl-gpu-vk)", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text, out.status.code().unwrap_or(-1))
}

#[then(expr = "kubectl gpu-vk pods lists pod {string} on provider {string} at {string}")]
async fn lists_pod(w: &mut Vkw, name: String, provider: String, price: String) {
    let (json, code) = plugin(&["pods", "-n", &w.ns, "-o", "json"]);
    assert_eq!(code, 0, "{json}");
    let rows: serde_json::Value = serde_json::from_str(&json).expect("JSON rows");
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name.as_str()))
        .unwrap_or_else(|| panic!("no row for {name}: {json}"));
    assert_eq!(row["provider"], provider.as_str(), "{row}");
    let want: f64 = price
        .trim_start_matches('$')
        .trim_end_matches("/h")
        .parse()
        .unwrap();
    assert_eq!(row["price_per_hour"].as_f64(), Some(want), "{row}");
    let pod = w.get(&name).await.expect("the pod");
    let decision = pod
        .metadata
        .annotations
        .and_then(|a| a.get("gpu-vk.io/dispatch").cloned());
    assert_eq!(
        row["chosen"].as_str(),
        decision.as_deref(),
        "the choice shown is the pod's"
    );
    let (table, code) = plugin(&["pods", "-n", &w.ns]);
    assert_eq!(code, 0);
    let line = table.lines().find(|l| l.contains(&name)).expect("its line");
    assert!(line.contains(&provider) && line.contains(&price), "{table}");
    println!(
        "    kubectl gpu-vk pods:\n    {}",
        table.trim_end().replace('\n', "\n    ")
    );
}

#[then(expr = "kubectl gpu-vk providers shows provider {string} unhealthy")]
async fn shows_unhealthy(w: &mut Vkw, provider: String) {
    let (table, code) = plugin(&["providers"]);
    assert_eq!(code, 0, "{table}");
    let node = w.node();
    let line = table
        .lines()
        .find(|l| {
            l.starts_with(&format!("{node} ")) && l.split_whitespace().nth(1) == Some(&provider)
        })
        .unwrap_or_else(|| panic!("no line for {node}/{provider}: {table}"));
    assert!(line.contains("unhealthy (CircuitOpen)"), "{line}");
}

#[then(expr = "kubectl gpu-vk why {string} exits {int} naming {string}")]
async fn why_exits(w: &mut Vkw, name: String, want: i32, naming: String) {
    let (text, code) = plugin(&["why", &name, "-n", &w.ns]);
    assert_eq!(code, want, "{text}");
    assert!(text.contains(&naming), "{text}");
    println!(
        "    kubectl gpu-vk why {name} (exit {code}):\n    {}",
        text.trim_end().replace('\n', "\n    ")
    );
}
