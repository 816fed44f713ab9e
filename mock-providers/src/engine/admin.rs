//! What the admin API (`/_admin`) can see and do: list, inject, preempt, exit, fail, set
//! usage, add logs, vanish, restock, reset, and read logs.

use super::*;

impl Engine {
    pub(super) fn state_name(&self, phase: Phase) -> String {
        match self.flavor {
            Flavor::RunPod => crate::runpod::status_name(phase).to_owned(),
            Flavor::Vast => crate::vast::actual_status(phase)
                .unwrap_or("scheduling")
                .to_owned(),
        }
    }

    /// Every workload as the admin API shows it.
    pub fn admin_list(&self) -> Vec<AdminWorkload> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let mut out = Vec::with_capacity(inner.workloads.len());
        for w in inner.workloads.values_mut() {
            let phase = self.observe(w, now);
            let usage = self.usage(w, phase, now);
            out.push(AdminWorkload {
                id: w.id.clone(),
                name: w.name.clone(),
                state: self.state_name(phase),
                phase,
                gpu_type: w.gpu_type.clone(),
                gpu_count: w.gpu_count,
                image: w.image.clone(),
                env: w.env.clone(),
                exit_code: w.exit_code,
                restarts: w.restarts,
                cpu_millis: usage.cpu_millis,
                memory_bytes: usage.memory_bytes,
                interruptible: w.interruptible,
                command: w.command.clone(),
                machine_id: w.machine_id,
                pid: w.proc.pid,
                created_at: crate::util::rfc3339(w.created_at),
                address: self
                    .served
                    .listed_address(&crate::serve::workload_address(w.seq)),
            });
        }
        out
    }

    /// Inject a running workload (GPUs are taken; fails when none are free).
    pub fn inject(&self, new: NewWorkload) -> Result<String, AllocError> {
        let mut inner = self.lock();
        let seq = self.create_locked(
            &mut inner,
            NewWorkload {
                already_running: true,
                ..new
            },
            Instant::now(),
        )?;
        Ok(inner
            .workloads
            .get(&seq)
            .map(|w| w.id.clone())
            .unwrap_or_default())
    }

    pub(super) fn with_active<T>(
        &self,
        id: &str,
        f: impl FnOnce(&Self, &mut Inner, u64, Phase) -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let seq = inner
            .seq_of(id)
            .ok_or_else(|| AdminError::NotFound(id.to_owned()))?;
        let phase = match inner.workloads.get_mut(&seq) {
            Some(w) => self.observe(w, now),
            None => return Err(AdminError::NotFound(id.to_owned())),
        };
        f(self, &mut inner, seq, phase)
    }

    /// Preempt: RunPod moves the pod to EXITED (host reclaimed, no spot market in v2); Vast
    /// stops an interruptible instance as if outbid (`stopped`, intended `running`).
    pub fn preempt(&self, id: &str, outbid_price: Option<f64>) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, phase| {
            if !phase.is_active() {
                return Err(AdminError::Conflict(format!(
                    "workload {id} is not running (phase {phase:?})"
                )));
            }
            if engine.flavor == Flavor::Vast {
                let interruptible = inner.workloads.get(&seq).is_some_and(|w| w.interruptible);
                if !interruptible {
                    return Err(AdminError::Conflict(format!(
                        "instance {id} is on-demand, only interruptible (bid) instances can be outbid"
                    )));
                }
            }
            engine.stop_locked(inner, seq, StopReason::Preempted { outbid_price });
            Ok(())
        })
    }

    /// End the workload with `code`.
    pub fn admin_exit(&self, id: &str, code: i32) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, phase| {
            if !phase.is_active() {
                return Err(AdminError::Conflict(format!(
                    "workload {id} is not running (phase {phase:?})"
                )));
            }
            engine.exit_locked(inner, seq, code);
            Ok(())
        })
    }

    /// Put the workload into the error state.
    pub fn admin_fail(&self, id: &str, message: String) -> Result<(), AdminError> {
        self.with_active(id, |engine, inner, seq, _| {
            engine.fail_locked(inner, seq, message);
            Ok(())
        })
    }

    /// Override the reported usage.
    pub fn set_usage(&self, id: &str, usage: Usage) -> Result<(), AdminError> {
        self.with_active(id, |_, inner, seq, _| {
            if let Some(w) = inner.workloads.get_mut(&seq) {
                w.usage_override = Some(usage);
            }
            Ok(())
        })
    }

    /// Append container log lines.
    pub fn add_logs(
        &self,
        id: &str,
        source: LogSource,
        lines: Vec<String>,
    ) -> Result<(), AdminError> {
        self.with_active(id, |_, inner, seq, _| {
            if let Some(w) = inner.workloads.get_mut(&seq) {
                let now = Timestamp::now();
                for line in lines {
                    w.logs.push(now, source, line);
                }
            }
            Ok(())
        })
    }

    /// Make a workload vanish without a trace (the provider lost it).
    pub fn vanish(&self, id: &str) -> Result<(), AdminError> {
        let mut inner = self.lock();
        let seq = inner
            .seq_of(id)
            .ok_or_else(|| AdminError::NotFound(id.to_owned()))?;
        self.remove_locked(&mut inner, seq);
        Ok(())
    }

    /// Replace the GPU stock (live workloads keep their GPUs).
    pub fn set_inventory(&self, stock: &[GpuStock]) {
        let mut inner = self.lock();
        inner.inventory.replace(stock);
        let placements: Vec<Placement> = inner
            .workloads
            .values()
            .filter_map(|w| w.placement)
            .collect();
        for p in placements {
            inner.inventory.reserve(p);
        }
        inner.vast.clear_offers();
    }

    /// The GPU stock with free counts.
    pub fn inventory_lines(&self) -> Vec<InventoryLine> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        inner.inventory.lines()
    }

    /// Forget all workloads (processes killed), counters, faults and the rate window.
    pub fn reset(&self) {
        let mut inner = self.lock();
        for w in inner.workloads.values_mut() {
            w.proc.kill();
        }
        inner.workloads.clear();
        inner.by_id.clear();
        inner.exits.clear();
        inner.inventory.release_all();
        inner.gate.reset();
        inner.vast = crate::vast::Book::default();
        inner.runpod = crate::runpod::Account::default();
        inner.images.clear();
        self.served.set(crate::serve::SetAnswer::default());
    }

    /// Log lines of workload `id` after `after`, and its phase; `None` when it is gone.
    pub fn logs(
        &self,
        id: &str,
        after: u64,
        source: Option<LogSource>,
        tail: Option<usize>,
    ) -> Option<(Vec<LogLine>, Phase)> {
        let now = Instant::now();
        let mut inner = self.lock();
        self.settle(&mut inner, now);
        let seq = inner.seq_of(id)?;
        let w = inner.workloads.get_mut(&seq)?;
        let phase = self.observe(w, now);
        Some((w.logs.after(after, source, tail), phase))
    }
}
