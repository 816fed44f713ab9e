//! The kubelet API's serving certificate requested from the cluster as a kubelet-serving CSR.

use super::*;

/// A VK configured with `tls: {csr: true, csrAutoApprove: true}`, run outside the harness
/// (whose configuration has no TLS block): it serves a certificate signed by the cluster CA.
#[tokio::test]
async fn serving_certificate_from_a_kubelet_serving_csr() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

    let c = client().await;
    let rp = Emulator::runpod(ExecutionMode::simulated(200, 200, None), gpus()).await;
    let node = unique("vk-csr");
    let dir = std::env::temp_dir().join(&node);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let config = format!(
        "nodeName: {node}\nclusterId: test-cluster\nkubeletPort: {port}\nmetricsAddr: 127.0.0.1:{}\n\
         tls:\n  csr: true\n  csrAutoApprove: true\n  csrExpirationSeconds: 3600\n\
         providers:\n- name: runpod\n  kind: runpod\n  apiKeyEnv: TEST_PROVIDER_KEY\n  settings:\n    baseUrl: {}\n    defaultGpuType: {}\n",
        free_port(),
        rp.base_url(),
        rp.default_gpu,
    );
    std::fs::write(dir.join("config.yaml"), config).unwrap();
    let log = std::fs::File::create(dir.join("vk.log")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vk"))
        .args(["run", "--config"])
        .arg(dir.join("config.yaml"))
        .env("TEST_PROVIDER_KEY", API_KEY)
        .env("RUST_LOG", "info,vk=debug")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Trust only the testbed CA and present the API server's kubelet client certificate: the
    // handshake succeeds once the VK serves the cluster-signed certificate for 127.0.0.1.
    let ca = std::fs::read(testbed_env("TESTBED_CA_CERT").expect("testbed env file")).unwrap();
    let cert = testbed_env("TESTBED_KUBELET_CLIENT_CERT").unwrap();
    let key = testbed_env("TESTBED_KUBELET_CLIENT_KEY").unwrap();
    let mut pem = std::fs::read(cert).unwrap();
    pem.extend(std::fs::read(key).unwrap());
    let strict = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/healthz");
    let body = wait_for(
        Duration::from_secs(60),
        "a cluster-signed serving certificate",
        || async { strict.get(&url).send().await.ok()?.text().await.ok() },
    )
    .await;
    assert_eq!(body, "ok");

    let csrs: Api<CertificateSigningRequest> = Api::all(c.clone());
    let ours: Vec<_> = csrs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("gpu-vk-serving-{node}-")))
        })
        .collect();
    assert!(!ours.is_empty());
    assert_eq!(ours[0].spec.signer_name, "kubernetes.io/kubelet-serving");
    for r in &ours {
        if let Some(name) = r.metadata.name.as_deref() {
            let _ = csrs.delete(name, &Default::default()).await;
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = Api::<Node>::all(c.clone())
        .delete(&node, &Default::default())
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}
