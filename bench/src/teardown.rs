//! The end of a round: the VK killed and restarted, the pods deleted, the API server's
//! cost read, and everything stopped.

use super::*;

impl Bench<'_> {
    /// SIGKILLs the VK with every pod Running and starts it again: how long its start-up
    /// reconcile takes and what it costs (provider creates, status writes, CPU).
    pub(crate) async fn restart_after_sigkill(
        &self,
        live: &Live,
        round: &mut Round,
    ) -> anyhow::Result<()> {
        let (http, metrics_port, emu) = (&live.http, live.metrics_port, &live.emu);
        log(format!(
            "restart: SIGKILL the VK with {} pods Running",
            round.throughput.running
        ));
        let cpu_r0 = CpuSnapshot::take(&self.pids());
        let api_r0 = ApiCounts::scrape(&self.client).await?;
        let emu_r0 = emu.counters().await?;
        let t_kill = Instant::now();
        self.children().kill9("vk").await;
        let restart_log = self.logs.join(format!("vk-{}-restart.log", self.label));
        let _ = std::fs::remove_file(&restart_log);
        self.spawn_vk(&live.config, &restart_log)?;
        match self
            .vk_reconciled(http, metrics_port, Duration::from_secs(120))
            .await
        {
            Some((at, own)) => {
                round.restart.reconciled_s = Some(round3(at.duration_since(t_kill).as_secs_f64()));
                round.restart.vk_reported_s = Some(round3(own));
            }
            None => round
                .notes
                .push("the restarted VK did not finish its start-up reconcile in 120 s".into()),
        }
        // Anything the restart would write shows up within a poll interval.
        tokio::time::sleep(self.poll() + Duration::from_millis(500)).await;
        let vk2 = self
            .vk_metrics(http, metrics_port)
            .await
            .unwrap_or_default();
        let emu_r1 = emu.counters().await?;
        let api_r1 = ApiCounts::scrape(&self.client).await?;
        let mut cpu_restart = cpu_r0.until(&CpuSnapshot::take(&self.pids()));
        round.restart.pods = live
            .tracker
            .count(|t| t.running.is_some() && t.gone.is_none());
        round.restart.provider_creates = emu_r1
            .values()
            .zip(emu_r0.values())
            .map(|(b, a)| {
                b.get("create").copied().unwrap_or(0.0) - a.get("create").copied().unwrap_or(0.0)
            })
            .sum();
        round.restart.status_writes = metric(&vk2, "gpu_vk_pod_status_writes_total", &[]);
        round.restart.reconciles = metric(&vk2, "gpu_vk_reconciles_total", &[]);
        round.restart.apiserver_status_patches = api_r0
            .until(&api_r1)
            .get("PATCH pods/status")
            .copied()
            .unwrap_or(0.0);
        if let Some(pid) = self.children().pid("vk") {
            round.footprint.vk_rss_after_restart_mib = procs::rss_mib(pid).map(|m| round3(m.0));
            round.footprint.vk_cpu_s_restart = procs::cpu_seconds(pid).map(round3);
            if let Some(c) = round.footprint.vk_cpu_s_restart {
                cpu_restart.cpu_s.insert("vk".into(), c);
            }
        }
        round.cpu.insert("restart".into(), cpu_restart);
        log(format!(
            "restart: reconciled in {} s, {} creates, {} status writes",
            round
                .restart
                .reconciled_s
                .map_or("—".into(), |s| format!("{s:.2}")),
            round.restart.provider_creates,
            round.restart.status_writes
        ));
        Ok(())
    }

    /// Deletes every pod of the round and waits until the pods are gone from the API and the
    /// providers hold no live workload.
    pub(crate) async fn delete_pods(
        &self,
        live: &Live,
        round: &mut Round,
        times: &HashMap<String, PodTimes>,
    ) -> anyhow::Result<Deleted> {
        let (tracker, emu) = (&live.tracker, &live.emu);
        let wait_limit = self.wait_limit();
        let vk2_cpu0 = self.children().pid("vk").and_then(procs::cpu_seconds);
        let cpu_d0 = CpuSnapshot::take(&self.pids());
        let api_d0 = ApiCounts::scrape(&self.client).await?;
        log(format!("deleting {} pods", self.n));
        let t_delete = Instant::now();
        let ts_delete = Timestamp::now();
        let delete_attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let names: Vec<String> = times.keys().cloned().collect();
        let del_errors = futures::stream::iter(names.into_iter().map(|name| {
            let pods = live.pods.clone();
            let tracker = tracker.clone();
            let attempts = delete_attempts.clone();
            async move {
                let dp = DeleteParams::default();
                let r = cluster::with_retries(|| {
                    attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    pods.delete(&name, &dp)
                })
                .await;
                let now = Timestamp::now();
                match r {
                    Ok(_) => {
                        tracker.update(&name, |t| t.delete_requested = Some(now));
                        0usize
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => 0,
                    Err(e) => {
                        log(format!("delete {name} failed: {e}"));
                        1
                    }
                }
            }
        }))
        .buffer_unordered(self.args.concurrency.max(1))
        .fold(0usize, |acc, e| async move { acc + e })
        .await;
        round.throughput.delete_errors = del_errors;
        log(format!(
            "delete requests done in {:.1} s; waiting for pods and workloads to be gone",
            t_delete.elapsed().as_secs_f64()
        ));
        let total = times.len();
        let mut last_report = Instant::now();
        let gone_at = wait_until(wait_limit, Duration::from_millis(100), || {
            let c = tracker.count(|t| t.gone.is_some());
            if last_report.elapsed() > Duration::from_secs(10) {
                log(format!("  {c}/{total} gone"));
                last_report = Instant::now();
            }
            async move { c >= total }
        })
        .await;
        let empty_at = wait_until(wait_limit, Duration::from_millis(250), || async {
            emu.live().await.is_ok_and(|l| l == 0)
        })
        .await;
        let cpu_d1 = CpuSnapshot::take(&self.pids());
        let api_d1 = ApiCounts::scrape(&self.client).await?;
        round.cpu.insert("delete".into(), cpu_d0.until(&cpu_d1));
        if let (Some(a), Some(b)) = (
            vk2_cpu0,
            self.children().pid("vk").and_then(procs::cpu_seconds),
        ) {
            round.footprint.vk_cpu_s_delete = Some(round3(b - a));
        }
        let last_gone = tracker.snapshot().values().filter_map(|t| t.gone).max();
        if let (Some(_), Some(g)) = (gone_at, last_gone) {
            round.throughput.all_pods_gone_s = Some(round3(ms_between(ts_delete, g) / 1000.0));
        }
        match (gone_at, empty_at) {
            (Some(g), Some(e)) => {
                let end = g.max(e);
                round.throughput.all_deleted_s =
                    Some(round3(end.duration_since(t_delete).as_secs_f64()));
            }
            _ => round.notes.push(format!(
                "deletion timed out: {} pods left, provider {}",
                total - tracker.count(|t| t.gone.is_some()),
                match emu.live().await {
                    Ok(l) => format!("{l} live workloads"),
                    Err(e) => format!("unreadable: {e}"),
                }
            )),
        }
        log(format!(
            "deleted: pods gone in {} s, provider empty after {} s",
            round
                .throughput
                .all_pods_gone_s
                .map_or("—".into(), |s| format!("{s:.1}")),
            round
                .throughput
                .all_deleted_s
                .map_or("—".into(), |s| format!("{s:.1}"))
        ));
        Ok(Deleted {
            attempts: delete_attempts.load(std::sync::atomic::Ordering::Relaxed),
            api_requests: api_d0.until(&api_d1),
        })
    }

    /// The API server's cost per pod lifecycle: pod and event requests of the create and
    /// delete phases, less the bench's own, and the VK's status writes (`quiet_status_writes`
    /// from before the restart, the rest counted by the restarted VK).
    pub(crate) async fn measure_apiserver_cost(
        &self,
        live: &Live,
        round: &mut Round,
        running: &Running,
        deleted: &Deleted,
        quiet_status_writes: f64,
    ) {
        let n = self.n;
        let mut breakdown = running.api_requests.clone();
        for (k, v) in &deleted.api_requests {
            *breakdown.entry(k.clone()).or_insert(0.0) += v;
        }
        let pods_and_events = cluster::sum_resources(&breakdown, &["pods", "events"]);
        let bench_own = (running.create_attempts + deleted.attempts) as f64;
        let vk2_end = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let writes = quiet_status_writes + metric(&vk2_end, "gpu_vk_pod_status_writes_total", &[]);
        let per = |x: f64| round3(x / n as f64);
        round.apiserver.pod_and_event_requests_per_pod = per(pods_and_events);
        round.apiserver.vk_requests_per_pod = per(pods_and_events - bench_own);
        round.apiserver.status_writes_per_pod = per(writes);
        round.apiserver.breakdown = breakdown
            .into_iter()
            .filter(|(k, _)| {
                let res = k.split_whitespace().nth(1).unwrap_or_default();
                res.starts_with("pods") || res.starts_with("events")
            })
            .collect();
    }

    /// Stops the watch, the VK and the emulators, removes the namespace, and judges the round
    /// against its targets.
    pub(crate) async fn tear_down(&self, live: Live, round: &mut Round) {
        live.watch.abort();
        self.children().stop("vk", Duration::from_secs(10)).await;
        self.children()
            .stop("mock-providers", Duration::from_secs(5))
            .await;
        cluster::remove_namespace(&self.client, &live.ns).await;
        cluster::wait_namespace_gone(&self.client, &live.ns, Duration::from_secs(120)).await;
        self.cleanup
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|x| x != &live.ns);
        round.judge(self.args.poll_ms);
        for t in &round.targets {
            log(format!(
                "  {:<38} {:<28} {:<14} {}",
                t.name,
                t.target,
                t.measured,
                match t.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "n/a",
                }
            ));
        }
    }
}
