//! Starting a round: the emulators, the VK's config and process, and waiting for its node.

use super::*;

impl Bench<'_> {
    pub(crate) async fn start_emulators(&self) -> anyhow::Result<Emulators> {
        let share = f64::from(self.args.vast_percent.max(100 - self.args.vast_percent)) / 100.0;
        let gpus = (self.n as f64 * share * 1.1).ceil() as usize + 16;
        let (rp, vp) = (procs::free_port()?, procs::free_port()?);
        let args: Vec<String> = [
            "--runpod",
            &format!("127.0.0.1:{rp}"),
            "--vast",
            &format!("127.0.0.1:{vp}"),
            "--gpus",
            &format!("{GPU_TYPE}={gpus}@1.89"),
            // Vast's search matches exact names: the adapter maps A100-80GB to the A100 names.
            "--vast-gpus",
            &format!("A100 SXM4={gpus}@1.89"),
            "--mode",
            "simulated",
            // The bench measures the VK's own cost: every start succeeds, no quota.
            "--profile",
            "fast",
            // The bench measures the VK, not Vast's per-endpoint minimum intervals (one rent
            // per 4.5 s per key would make 500 Vast pods take 37 minutes): both sides off.
            "--vast-rate-limit-scale",
            "0",
            "--provision-ms",
            &self.args.provision_ms.to_string(),
            "--start-ms",
            &self.args.start_ms.to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        self.children().spawn(
            "mock-providers",
            &self.mock_bin,
            &args,
            &[("MOCK_API_KEY", API_KEY), ("RUST_LOG", "warn")],
            &self.logs.join(format!("mock-providers-{}.log", self.label)),
        )?;
        let emu = Emulators {
            runpod: format!("127.0.0.1:{rp}"),
            vast: format!("127.0.0.1:{vp}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        };
        let up = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { emu.counters().await.is_ok() },
        )
        .await;
        if up.is_none() {
            bail!(
                "the emulators did not answer within 30 s (log in {})",
                self.logs.display()
            );
        }
        Ok(emu)
    }

    pub(crate) fn write_vk_config(&self, emu: &Emulators) -> anyhow::Result<(PathBuf, u16)> {
        let metrics_port = procs::free_port()?;
        let config = json!({
            "nodeName": self.args.node,
            "clusterId": CLUSTER_ID,
            "kubeletPort": procs::free_port()?,
            "metricsAddr": format!("127.0.0.1:{metrics_port}"),
            "workers": self.args.workers,
            "capacity": {"pods": "1000000", "gpus": "1000000"},
            "timings": {"pollIntervalMs": self.args.poll_ms, "gcGraceMs": 30000},
            "providers": [
                {"name": "runpod", "kind": "runpod", "apiKeyEnv": "VK_BENCH_PROVIDER_KEY",
                 "settings": {"baseUrl": format!("http://{}/v2", emu.runpod), "defaultGpuType": GPU_TYPE}},
                {"name": "vast", "kind": "vast", "apiKeyEnv": "VK_BENCH_PROVIDER_KEY",
                 "settings": {"baseUrl": format!("http://{}", emu.vast), "defaultGpuType": GPU_TYPE,
                              "rateLimits": {"list": 0, "search": 0, "rent": 0, "destroy": 0, "logs": 0}}},
            ],
        });
        let path = self.logs.join(format!("vk-{}.yaml", self.label));
        // JSON is YAML.
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)
            .with_context(|| format!("failed to write {}", path.display()))?;
        Ok((path, metrics_port))
    }

    pub(crate) fn spawn_vk(&self, config: &Path, log: &Path) -> anyhow::Result<u32> {
        let args = vec![
            "--log-json".to_owned(),
            "run".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        let mut env = vec![
            ("VK_BENCH_PROVIDER_KEY", API_KEY),
            ("RUST_LOG", self.args.vk_log.as_str()),
        ];
        for kv in &self.args.vk_env {
            match kv.split_once('=') {
                Some((k, v)) if !k.is_empty() => env.push((k, v)),
                _ => bail!("--vk-env wants KEY=VALUE, got {kv:?}"),
            }
        }
        self.children().spawn("vk", &self.vk_bin, &args, &env, log)
    }

    pub(crate) async fn vk_metrics(&self, http: &reqwest::Client, port: u16) -> Option<String> {
        http.get(format!("http://127.0.0.1:{port}/metrics"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    /// Waits until the VK finished its start-up reconcile; its own figure, seconds.
    pub(crate) async fn vk_reconciled(
        &self,
        http: &reqwest::Client,
        port: u16,
        timeout: Duration,
    ) -> Option<(Instant, f64)> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.children().alive("vk") {
                return None;
            }
            if let Some(text) = self.vk_metrics(http, port).await {
                let s = metric(&text, "gpu_vk_startup_reconcile_seconds", &[]);
                if s > 0.0 {
                    return Some((Instant::now(), s));
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// What the API and the providers say about a few pods the watch never saw Running.
    pub(crate) async fn diagnose_not_running(
        &self,
        tracker: &Tracker,
        pods: &Api<Pod>,
        emu: &Emulators,
    ) -> Vec<String> {
        let stuck: Vec<(String, Option<String>)> = tracker
            .snapshot()
            .into_iter()
            .filter(|(_, t)| t.running.is_none())
            .map(|(n, t)| (n, t.uid))
            .take(5)
            .collect();
        let workloads = emu.workloads().await.unwrap_or_default();
        let mut out = Vec::new();
        for (name, uid) in stuck {
            let api = match pods.get_opt(&name).await {
                Ok(Some(p)) => {
                    let st = p.status.unwrap_or_default();
                    let cs = st
                        .container_statuses
                        .and_then(|c| c.into_iter().next())
                        .map(|c| serde_json::to_string(&c.state).unwrap_or_default())
                        .unwrap_or_default();
                    format!(
                        "phase {:?}, reason {:?}, message {:?}, container {cs}, annotations {:?}",
                        st.phase, st.reason, st.message, p.metadata.annotations
                    )
                }
                Ok(None) => "gone from the API".into(),
                Err(e) => format!("unreadable: {e}"),
            };
            let provider: Vec<String> = workloads
                .iter()
                .filter(|w| {
                    uid.as_deref()
                        .is_some_and(|u| w["name"].as_str().is_some_and(|n| n.ends_with(u)))
                })
                .map(|w| format!("{} {} {}", w["id"], w["state"], w["phase"]))
                .collect();
            out.push(format!(
                "not Running: {name}: API {api}; provider workloads: [{}]",
                provider.join("; ")
            ));
        }
        out
    }

    /// How long the round waits for all pods to be Running, and for all to be gone.
    pub(crate) fn wait_limit(&self) -> Duration {
        Duration::from_secs(60) + Duration::from_millis(25 * self.n as u64)
    }

    pub(crate) fn poll(&self) -> Duration {
        Duration::from_millis(self.args.poll_ms)
    }

    /// One round: start, create, wait for Running, measure, restart, delete, tear down;
    /// judged beside kwok's figures for the same N when there are some.
    pub(crate) async fn round(&self, kwok: Option<kwok::KwokRound>) -> anyhow::Result<Round> {
        let mut round = Round {
            n: self.n,
            rate_per_s: (self.rate > 0.0).then_some(self.rate),
            ..Default::default()
        };
        if let Some(k) = kwok {
            round.set_kwok(k);
        }
        let live = self.start().await?;
        let created = self.create_pods(&live, &mut round).await?;
        let running = self.wait_running(&live, &mut round, &created).await?;
        let quiet = self.footprint_and_quiet_window(&live, &mut round).await?;
        // Writes until the quiet window ended: Events the VK's event rate sent late count too.
        let api = ApiCounts::scrape(&self.client).await?;
        round.apiserver.writes_to_running_per_pod =
            load::writes_per_pod(&created.before.api.until(&api), created.attempts, self.n);
        self.measure_latency(&live, &mut round, &running.times, &quiet.vk_metrics_end)
            .await;
        self.restart_after_sigkill(&live, &mut round).await?;
        let deleted = self.delete_pods(&live, &mut round, &running.times).await?;
        self.measure_apiserver_cost(&live, &mut round, &running, &deleted, quiet.status_writes)
            .await;
        self.tear_down(live, &mut round).await;
        Ok(round)
    }

    /// Starts the emulators and the VK, waits for the node to be Ready, and creates the
    /// round's namespace with a watch on its pods.
    pub(crate) async fn start(&self) -> anyhow::Result<Live> {
        log(format!(
            "=== N = {}{}: starting emulators and the VK",
            self.n,
            if self.rate > 0.0 {
                format!(" at {} pods/s (latency probe)", self.rate)
            } else {
                String::new()
            }
        ));
        let emu = self.start_emulators().await?;
        let (config, metrics_port) = self.write_vk_config(&emu)?;
        let vk_log = self.logs.join(format!("vk-{}.log", self.label));
        let _ = std::fs::remove_file(&vk_log);
        self.spawn_vk(&config, &vk_log)?;
        let http = reqwest::Client::new();
        if self
            .vk_reconciled(&http, metrics_port, Duration::from_secs(60))
            .await
            .is_none()
        {
            bail!(
                "the VK did not become ready within 60 s (log: {})",
                vk_log.display()
            );
        }
        let node = self.args.node.clone();
        let client = self.client.clone();
        if wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
            cluster::node_ready(&client, &node)
        })
        .await
        .is_none()
        {
            bail!("node {} is not Ready after 60 s", self.args.node);
        }

        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let ns = format!("vk-bench-{}-{}", self.label, &suffix[..6]);
        self.cleanup
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ns.clone());
        cluster::create_namespace(&self.client, &ns).await?;
        let tracker = Tracker::default();
        let watch = tracker.watch(&self.client, &ns);
        // Let the watch's initial list finish before the clock starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        Ok(Live {
            emu,
            config,
            metrics_port,
            vk_log,
            http,
            ns,
            pods,
            tracker,
            watch,
        })
    }
}
