//! The measured phases of a round: creating the pods, waiting for them to run, the quiet
//! window and the latency probes.

use super::*;

impl Bench<'_> {
    /// Creates the round's pods (paced when the round has a rate), spread over the providers.
    pub(crate) async fn create_pods(
        &self,
        live: &Live,
        round: &mut Round,
    ) -> anyhow::Result<Created> {
        let n = self.n;
        let before = Snapshots {
            cpu: CpuSnapshot::take(&self.pids()),
            api: ApiCounts::scrape(&self.client).await?,
            emu: live.emu.counters().await?,
        };
        log(format!(
            "creating {n} pods in {} ({} in flight)",
            live.ns, self.args.concurrency
        ));
        let vast_percent = self.args.vast_percent as usize;
        // Spread evenly: pod i goes to Vast when the running share crosses a whole pod.
        let names: Vec<(String, &'static str)> = (0..n)
            .map(|i| {
                let provider = if (i + 1) * vast_percent / 100 > i * vast_percent / 100 {
                    "vast"
                } else {
                    "runpod"
                };
                (format!("b-{i:05}"), provider)
            })
            .collect();
        let sent = load::create_all(
            &live.pods,
            &live.tracker,
            names,
            &self.args.node,
            self.args.bind,
            self.args.concurrency,
            self.rate,
        )
        .await;
        let errors = sent.errors;
        round.throughput.create_requests_s = round3(sent.secs);
        round.throughput.create_errors = errors;
        log(format!(
            "create requests done in {:.1} s ({errors} errors); waiting for Running",
            round.throughput.create_requests_s
        ));
        Ok(Created {
            before,
            errors,
            attempts: sent.attempts,
        })
    }

    /// Waits until every created pod is Running, sampling the VK's queue depth meanwhile, and
    /// records the create phase's throughput, CPU and API and provider calls.
    pub(crate) async fn wait_running(
        &self,
        live: &Live,
        round: &mut Round,
        created: &Created,
    ) -> anyhow::Result<Running> {
        let n = self.n;
        let tracker = &live.tracker;
        // Samples the VK's queue depth while pods are coming in.
        let max_depth = Arc::new(Mutex::new(0.0f64));
        let sampler = {
            let max_depth = max_depth.clone();
            let http = live.http.clone();
            let metrics_port = live.metrics_port;
            tokio::spawn(async move {
                loop {
                    if let Ok(r) = http
                        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
                        .timeout(Duration::from_secs(2))
                        .send()
                        .await
                        && let Ok(text) = r.text().await
                    {
                        let d = metric(&text, "gpu_vk_queue_depth", &[]);
                        let mut m = max_depth.lock().unwrap_or_else(|e| e.into_inner());
                        *m = m.max(d);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let expected = n - created.errors;
        let mut last_report = Instant::now();
        let running_at = wait_until(self.wait_limit(), Duration::from_millis(100), || {
            let c = tracker.count(|t| t.running.is_some());
            if last_report.elapsed() > Duration::from_secs(10) {
                log(format!("  {c}/{expected} Running"));
                last_report = Instant::now();
            }
            async move { c >= expected }
        })
        .await;
        sampler.abort();
        round.apiserver.vk_max_queue_depth = *max_depth.lock().unwrap_or_else(|e| e.into_inner());
        let cpu1 = CpuSnapshot::take(&self.pids());
        let api1 = ApiCounts::scrape(&self.client).await?;
        let before = &created.before;
        round.apiserver.create_phase_mean_latency_ms = before
            .api
            .mean_latency_ms(&api1)
            .into_iter()
            .filter(|(k, _)| {
                let res = k.split_whitespace().nth(1).unwrap_or_default();
                res.starts_with("pods") || res.starts_with("events")
            })
            .collect();
        let emu1 = live.emu.counters().await?;
        round.cpu.insert("create".into(), before.cpu.until(&cpu1));
        round.provider_calls.create_phase = counter_delta(&before.emu, &emu1, 1.0);
        round.throughput.running = tracker.count(|t| t.running.is_some());
        if running_at.is_none() {
            round.notes.push(format!(
                "timed out after {:.0} s with {}/{n} Running",
                self.wait_limit().as_secs_f64(),
                round.throughput.running
            ));
            round.notes.extend(
                self.diagnose_not_running(tracker, &live.pods, &live.emu)
                    .await,
            );
        }
        let times = tracker.snapshot();
        let first_bind = times
            .values()
            .filter_map(|t| bind_time(self.args.bind, t))
            .min();
        let last_running = times.values().filter_map(|t| t.running).max();
        if let (Some(a), Some(b), Some(_)) = (first_bind, last_running, running_at) {
            round.throughput.all_running_s = Some(round3(ms_between(a, b) / 1000.0));
        }
        log(format!(
            "{}/{n} Running, {} s after the first bind",
            round.throughput.running,
            round
                .throughput
                .all_running_s
                .map_or("—".into(), |s| format!("{s:.1}"))
        ));
        Ok(Running {
            times,
            api_requests: before.api.until(&api1),
            create_attempts: created.attempts,
        })
    }

    /// The VK's memory and CPU with every pod Running, then three poll intervals in which
    /// nothing changes: the provider calls per interval and any status writes.
    pub(crate) async fn footprint_and_quiet_window(
        &self,
        live: &Live,
        round: &mut Round,
    ) -> anyhow::Result<QuietWindow> {
        if let Some(pid) = self.children().pid("vk") {
            if let Some((rss, hwm)) = procs::rss_mib(pid) {
                round.footprint.vk_rss_mib = Some(round3(rss));
                round.footprint.vk_peak_rss_mib = Some(round3(hwm));
            }
            round.footprint.vk_cpu_s_to_running = procs::cpu_seconds(pid).map(round3);
        }
        let poll = self.poll();
        let vk1_metrics = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let quiet0 = live.emu.counters().await?;
        let tq = Instant::now();
        tokio::time::sleep(poll * 3).await;
        let quiet1 = live.emu.counters().await?;
        let intervals = tq.elapsed().as_secs_f64() / poll.as_secs_f64();
        round.provider_calls.per_interval = counter_delta(&quiet0, &quiet1, 1.0 / intervals);
        let vk1_end = self
            .vk_metrics(&live.http, live.metrics_port)
            .await
            .unwrap_or_default();
        let vk1_writes = metric(&vk1_end, "gpu_vk_pod_status_writes_total", &[]);
        let quiet_writes = vk1_writes - metric(&vk1_metrics, "gpu_vk_pod_status_writes_total", &[]);
        if quiet_writes > 0.0 {
            round.notes.push(format!(
                "{quiet_writes} status writes during the quiet window with nothing changing"
            ));
        }
        Ok(QuietWindow {
            status_writes: vk1_writes,
            vk_metrics_end: vk1_end,
        })
    }

    /// Latencies from the VK's log, the emulators' workloads, the pod watch and the VK's
    /// status latency histogram (`vk_metrics`).
    pub(crate) async fn measure_latency(
        &self,
        live: &Live,
        round: &mut Round,
        times: &HashMap<String, PodTimes>,
        vk_metrics: &str,
    ) {
        let create_lines = vk_creates(&live.vk_log);
        let mut creates: HashMap<String, Timestamp> = HashMap::new();
        for c in &create_lines {
            creates.entry(c.uid.clone()).or_insert(c.at);
        }
        let workloads = live.emu.workloads().await.unwrap_or_default();
        let emu_created: HashMap<String, Timestamp> = workloads
            .iter()
            .filter_map(|w| {
                // Workload names end with the pod UID (36 characters).
                let name = w["name"].as_str()?;
                let uid = name.get(name.len().checked_sub(36)?..)?;
                let at = w["created_at"].as_str()?.parse::<Timestamp>().ok()?;
                Some((uid.to_owned(), at))
            })
            .collect();
        let lifecycle_ms = (self.args.provision_ms + self.args.start_ms) as i64;
        let mut to_create = Vec::new();
        let mut to_running = Vec::new();
        let mut mismatches = 0;
        for t in times.values() {
            let Some(uid) = &t.uid else { continue };
            let Some(created) = creates.get(uid) else {
                continue;
            };
            if let Some(b) = bind_time(self.args.bind, t) {
                to_create.push(ms_between(b, *created));
            }
            if let Some(e) = emu_created.get(uid) {
                let d = ms_between(*e, *created);
                if !(-500.0..=1500.0).contains(&d) {
                    mismatches += 1;
                }
            }
            if let Some(r) = t.running {
                let provider_running = created
                    .checked_add(jiff::SignedDuration::from_millis(lifecycle_ms))
                    .unwrap_or(*created);
                to_running.push(ms_between(provider_running, r));
            }
        }
        round.latency.bind_to_create_ms = Percentiles::of(to_create);
        round.latency.provider_running_to_pod_running_ms = Percentiles::of(to_running);
        round.latency.created_at_mismatches = mismatches;
        round.latency.vk_seen_to_create_ms = Percentiles::of(
            create_lines
                .iter()
                .filter_map(|c| c.since_seen_ms)
                .collect(),
        );
        round.latency.provider_create_call_ms =
            Percentiles::of(create_lines.iter().filter_map(|c| c.provider_ms).collect());
        round.latency.vk_list_to_status_ms =
            Percentiles::of_histogram(histogram(vk_metrics, "gpu_vk_pod_status_latency_seconds"));
    }
}
