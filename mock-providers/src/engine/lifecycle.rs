//! What happens to a workload: created, stopped, started, restarted, exited, failed, removed,
//! each under the engine's lock.

use super::*;

impl Engine {
    /// Create a workload (GPUs are taken now unless it starts stopped).
    pub fn create_locked(
        &self,
        inner: &mut Inner,
        new: NewWorkload,
        now: Instant,
    ) -> Result<u64, AllocError> {
        self.settle(inner, now);
        // No GPU type: a CPU pod (RunPod), placed outside the GPU inventory.
        let cpu_only = new.gpu_type.is_empty();
        let price = if cpu_only {
            0.0
        } else {
            inner
                .inventory
                .get(&new.gpu_type)
                .map(|t| t.price_per_hour)
                .ok_or_else(|| AllocError::UnknownType(new.gpu_type.clone()))?
        };
        let placement = if new.start_stopped || cpu_only {
            None
        } else {
            Some(
                inner
                    .inventory
                    .allocate(&new.gpu_type, new.gpu_count, new.machine_id)?,
            )
        };
        let machine_id = placement
            .map(|p| p.machine_id)
            .or(new.machine_id)
            .or_else(|| {
                // A stopped workload still belongs to a machine of its type.
                inner
                    .inventory
                    .get(&new.gpu_type)
                    .and_then(|t| t.machines.first())
                    .map(|m| m.id)
            });
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let id = match self.flavor {
            Flavor::RunPod => loop {
                let id = crate::util::pod_id();
                if !inner.by_id.contains_key(&id) {
                    break id;
                }
            },
            Flavor::Vast => {
                let id = inner.next_vast_id;
                inner.next_vast_id += 1;
                id.to_string()
            }
        };
        let created_at = Timestamp::now();
        let disk_gb = match &new.extra {
            Extra::RunPod(x) => Some(x.disk as f64),
            Extra::Vast(x) => Some(x.disk),
            Extra::None => None,
        };
        let pull_error = inner.images.pull(&new.image, new.login.as_ref(), disk_gb);
        let pull_extra = inner.images.pull_time(&new.image);
        let crash = inner.images.crash(&new.image);
        let mut w = Workload {
            seq,
            id: id.clone(),
            name: new.name,
            image: new.image,
            env: new.env,
            gpu_type: new.gpu_type,
            gpu_count: new.gpu_count,
            price_per_gpu_hour: price,
            command: new.command,
            keep_alive: new.keep_alive,
            interruptible: new.interruptible,
            bid_price: new.bid_price,
            machine_id,
            placement,
            created_at,
            running_since: None,
            pod_started: None,
            restarts: 0,
            rerun_for: None,
            run: Run::Stopped {
                at: created_at,
                reason: StopReason::User,
            },
            generation: 0,
            exit_code: None,
            usage_override: None,
            logs: LogBuffer::default(),
            extra: new.extra,
            pull_error,
            pull_extra,
            crash: crash.clone(),
            proc: ProcState::default(),
            announced: 0,
        };
        if new.start_stopped {
            w.logs
                .push(created_at, LogSource::System, "created in stopped state");
        }
        if crash.is_some() {
            // The container dies as it starts (a crash loop on RunPod, exited on Vast).
            w.exit_code = Some(1);
            w.rerun_for = Some(RERUN_MIN);
        }
        inner.workloads.insert(seq, w);
        inner.by_id.insert(id, seq);
        if !new.start_stopped {
            let since = if new.already_running {
                now.checked_sub(self.mode.provision() + self.mode.start())
                    .unwrap_or(now)
            } else {
                now
            };
            self.begin(inner, seq, since);
        }
        Ok(seq)
    }

    /// Stop (user stop or preemption): GPUs are released and any process is killed.
    pub fn stop_locked(&self, inner: &mut Inner, seq: u64, reason: StopReason) {
        let Some(w) = halt(inner, seq) else {
            return;
        };
        let at = Timestamp::now();
        let line = match &reason {
            StopReason::User => "stopped by user".to_owned(),
            StopReason::Preempted { outbid_price } => match outbid_price {
                Some(p) => format!("preempted: outbid at ${p:.4}/hr"),
                None => "preempted: host reclaimed the GPUs".to_owned(),
            },
            StopReason::WaitingForGpus => "waiting for GPUs to become available".to_owned(),
        };
        w.logs.push(at, LogSource::System, line);
        w.run = Run::Stopped { at, reason };
    }

    /// Start a stopped/exited/failed workload again on its machine. `skip_provisioning`
    /// resumes at STARTING (the machine is kept).
    pub fn start_locked(
        &self,
        inner: &mut Inner,
        seq: u64,
        now: Instant,
    ) -> Result<(), AllocError> {
        self.settle(inner, now);
        let Some(w) = inner.workloads.get(&seq) else {
            return Ok(());
        };
        if matches!(w.run, Run::Active { .. }) {
            return Ok(());
        }
        let placement = if w.gpu_type.is_empty() {
            None
        } else {
            Some(
                inner
                    .inventory
                    .allocate(&w.gpu_type, w.gpu_count, w.machine_id)?,
            )
        };
        if let Some(w) = inner.workloads.get_mut(&seq) {
            w.restarts = 0;
            w.rerun_for = None;
            w.pod_started = None;
            w.placement = placement;
            w.machine_id = placement.map(|p| p.machine_id).or(w.machine_id);
            w.logs
                .push(Timestamp::now(), LogSource::System, "start requested");
        }
        let since = now.checked_sub(self.mode.provision()).unwrap_or(now);
        self.begin(inner, seq, since);
        Ok(())
    }

    /// Restart the container of an active workload in place.
    pub fn restart_locked(&self, inner: &mut Inner, seq: u64, now: Instant) {
        if let Some(w) = inner.workloads.get_mut(&seq) {
            w.restarts = 0;
            w.rerun_for = None;
            w.pod_started = None;
            w.logs
                .push(Timestamp::now(), LogSource::System, "restart requested");
        }
        let since = now.checked_sub(self.mode.provision()).unwrap_or(now);
        self.begin(inner, seq, since);
    }

    /// End the container with an exit code (GPUs released). On RunPod the container is
    /// restarted in place instead and the pod stays RUNNING.
    /// A simulated run ends at `due`: with the workload's exit code (0 unless set: an injected
    /// exit, a crash, `pull.rs`), restarted in place on RunPod, exited on Vast.
    pub(super) fn end_simulated_run(&self, inner: &mut Inner, seq: u64, due: Instant) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        let at = match &w.run {
            Run::Active { since, since_wall } => {
                ts_add(*since_wall, due.saturating_duration_since(*since))
            }
            _ => Timestamp::now(),
        };
        let code = w.exit_code.unwrap_or(0);
        let last = match &w.crash {
            Some(why) => why.clone(),
            None => "[emulator] simulated workload finished".to_owned(),
        };
        w.logs.push(at, LogSource::Container, last);
        if self.flavor == Flavor::RunPod {
            self.restart_in_place_locked(inner, seq, code, due);
            return;
        }
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        w.logs.push(
            at,
            LogSource::System,
            format!("container exited with code {code}"),
        );
        w.exit_code = Some(code);
        w.run = Run::Exited { at };
    }

    pub fn exit_locked(&self, inner: &mut Inner, seq: u64, code: i32) {
        if self.flavor == Flavor::RunPod {
            self.restart_in_place_locked(inner, seq, code, Instant::now());
            return;
        }
        let Some(w) = halt(inner, seq) else {
            return;
        };
        let at = Timestamp::now();
        w.exit_code = Some(code);
        w.logs.push(
            at,
            LogSource::System,
            format!("container exited with code {code}"),
        );
        w.run = Run::Exited { at };
    }

    /// RunPod: the container exited with `code` at `at`; it is started again after a
    /// docker-style back-off, on the same GPUs, and the pod stays RUNNING. The pod's
    /// `startedAt` is kept, `runtime.uptime` counts from the new start. Sources:
    /// runpod/runpodctl#149 ("pods restart after the ENTRYPOINT command has ended") and
    /// dstackai/dstack#1142 (a failing start command restarts "endlessly"); the back-off
    /// follows Docker's restart policies (100 ms, doubling), capped here at 10 s.
    pub(super) fn restart_in_place_locked(
        &self,
        inner: &mut Inner,
        seq: u64,
        code: i32,
        at: Instant,
    ) {
        let Some(w) = inner.workloads.get_mut(&seq) else {
            return;
        };
        w.exit_code = Some(code);
        w.restarts = w.restarts.saturating_add(1);
        if !self.mode.is_process()
            && self.mode.run().is_none()
            && let Some(t) = w.running_since
        {
            let ran = Timestamp::now().duration_since(t);
            w.rerun_for = Some(Duration::try_from(ran).unwrap_or_default().max(RERUN_MIN));
        }
        w.pod_started = w.pod_started.or(w.running_since);
        let delay = RESTART_BACKOFF_FIRST
            .saturating_mul(1 << (w.restarts - 1).min(10))
            .min(RESTART_BACKOFF_MAX);
        w.logs.push(
            Timestamp::now(),
            LogSource::System,
            format!(
                "container exited with code {code}; restarting it in {} ms",
                delay.as_millis()
            ),
        );
        let lead = self.mode.provision() + self.mode.start();
        let since = (at + delay).checked_sub(lead).unwrap_or(at);
        self.begin(inner, seq, since);
    }

    /// Put the workload into the error state (GPUs released).
    pub fn fail_locked(&self, inner: &mut Inner, seq: u64, message: String) {
        let Some(w) = halt(inner, seq) else {
            return;
        };
        let at = Timestamp::now();
        w.logs
            .push(at, LogSource::System, format!("error: {message}"));
        w.run = Run::Failed { at, message };
    }

    /// Remove a workload (terminate, destroy, or vanish): GPUs released, process killed.
    pub fn remove_locked(&self, inner: &mut Inner, seq: u64) -> Option<Workload> {
        let mut w = inner.workloads.remove(&seq)?;
        inner.by_id.remove(&w.id);
        // Its published ports stop answering with it.
        self.served.close(&w.id);
        w.proc.kill();
        if let Some(p) = w.placement.take() {
            inner.inventory.release(p);
        }
        Some(w)
    }
}

/// Ends workload `seq`'s process and gives its GPUs back; the timers set for it before are
/// void from now on (a new generation).
fn halt(inner: &mut Inner, seq: u64) -> Option<&mut Workload> {
    let w = inner.workloads.get_mut(&seq)?;
    w.proc.kill();
    w.generation += 1;
    if let Some(p) = w.placement.take() {
        inner.inventory.release(p);
    }
    Some(w)
}
