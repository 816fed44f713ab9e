//! What happens to jobs over time: submission, the lazy time-driven transitions, and the
//! operations of the REST and admin routes (cancel, requeue, suspend, vanish) and of process
//! mode.

use super::*;

impl Jobs {
    /// Submit; an impossible GPU count records a FAILED (BadConstraints) job and answers
    /// 2014, as a real 22.05 does.
    pub fn submit(&mut self, user: &str, spec: NewJob, now: Instant) -> Result<u32, SlurmErr> {
        let partition = match &spec.partition {
            Some(p) if !self.cluster.partitions.contains(p) => {
                return Err(SlurmErr::new(
                    E_INVALID_PARTITION,
                    "Invalid partition name specified",
                    format!("partition {p} does not exist"),
                ));
            }
            Some(p) => p.clone(),
            None => self.cluster.partitions.first().cloned().unwrap_or_default(),
        };
        let impossible = spec.gpus > self.cluster.gpus_per_node;
        let id = self.next_id;
        self.next_id += 1;
        let already_running = spec.already_running;
        let job = Job {
            id,
            partition,
            user: user.to_owned(),
            state: if impossible {
                JobState::Failed
            } else {
                JobState::Pending
            },
            reason: if impossible { "BadConstraints" } else { "None" }.to_owned(),
            exit_raw: i64::from(impossible),
            restart_cnt: 0,
            submit_time: Timestamp::now(),
            start_time: None,
            end_time: impossible.then(Timestamp::now),
            node: None,
            eligible_at: if already_running {
                now
            } else {
                now + self.mode.provision()
            },
            phase_since: now,
            generation: 0,
            kill: None,
            pid: None,
            finished_at: impossible.then_some(now),
            spec,
        };
        self.jobs.insert(id, job);
        if impossible {
            return Err(SlurmErr::new(
                E_NODE_CONFIG_UNAVAILABLE,
                "Requested node configuration is not available",
                "",
            ));
        }
        self.pending.insert(id);
        Ok(id)
    }

    /// Advances time: expires runs and time limits, starts what fits, forgets old records.
    /// Returns the processes to launch (process mode).
    pub fn settle(&mut self, now: Instant) -> Vec<Launch> {
        let mut launches = Vec::new();
        // Running and configuring jobs.
        let active: Vec<u32> = self.active.iter().copied().collect();
        for id in active {
            let Some(j) = self.jobs.get_mut(&id) else {
                self.active.remove(&id);
                continue;
            };
            let elapsed = now.saturating_duration_since(j.phase_since);
            match j.state {
                JobState::Configuring if elapsed >= self.mode.start() => {
                    j.state = JobState::Running;
                    j.phase_since += self.mode.start();
                    j.start_time = Some(ts_ago(now, j.phase_since));
                    if self.mode.is_process() {
                        launches.push(Launch::of(j));
                    }
                }
                JobState::Running => {
                    let limit = j
                        .spec
                        .time_limit_minutes
                        .map(|m| Duration::from_secs(u64::from(m) * 60));
                    if limit.is_some_and(|l| elapsed >= l) {
                        self.finish(id, JobState::Timeout, "TimeLimit", 15, now);
                    } else if let Some(run) = self.mode.run()
                        && elapsed >= run
                    {
                        self.finish(id, JobState::Completed, "None", 0, now);
                    }
                }
                _ => {}
            }
        }
        // Pending jobs, in submission order, while GPUs last.
        let pending: Vec<u32> = self.pending.iter().copied().collect();
        for id in pending {
            let Some(j) = self.jobs.get(&id) else {
                self.pending.remove(&id);
                continue;
            };
            if now < j.eligible_at {
                continue;
            }
            let gpus = j.spec.gpus;
            let Some(node) = self.node_free.iter().position(|f| *f >= gpus) else {
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.reason = "Resources".into();
                }
                continue;
            };
            self.node_free[node] -= gpus;
            self.pending.remove(&id);
            self.active.insert(id);
            let skip_configuring = self.mode.start().is_zero();
            let Some(j) = self.jobs.get_mut(&id) else {
                continue;
            };
            j.node = Some(node);
            j.reason = "None".into();
            j.generation += 1;
            j.phase_since = now;
            j.end_time = None;
            if skip_configuring || j.spec.already_running {
                j.state = JobState::Running;
                j.start_time = Some(Timestamp::now());
                if self.mode.is_process() {
                    launches.push(Launch::of(j));
                }
            } else {
                j.state = JobState::Configuring;
            }
        }
        // Forget finished jobs older than MinJobAge.
        let old: Vec<u32> = self
            .jobs
            .values()
            .filter(|j| {
                j.finished_at
                    .is_some_and(|f| now.saturating_duration_since(f) >= self.min_job_age)
            })
            .map(|j| j.id)
            .collect();
        for id in old {
            self.jobs.remove(&id);
        }
        launches
    }

    /// Ends a job in `state` with the raw wait status `exit_raw`; frees its GPUs.
    pub fn finish(&mut self, id: u32, state: JobState, reason: &str, exit_raw: i64, now: Instant) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        j.stop_process();
        if j.state.holds_node()
            && let Some(n) = j.node
            && let Some(free) = self.node_free.get_mut(n)
        {
            *free += j.spec.gpus;
        }
        j.state = state;
        j.reason = reason.to_owned();
        j.exit_raw = exit_raw;
        j.end_time = Some(Timestamp::now());
        j.finished_at = Some(now);
        self.pending.remove(&id);
        self.active.remove(&id);
    }

    /// `scancel` / `DELETE`: a finished job is left as it is (200, as 22.05 answers).
    pub fn cancel(&mut self, id: u32, now: Instant) -> Result<(), SlurmErr> {
        let j = self
            .jobs
            .get(&id)
            .ok_or_else(|| SlurmErr::invalid_job(&id.to_string(), "unable to kill "))?;
        if j.state.is_terminal() {
            return Ok(());
        }
        let raw = if j.state.holds_node() { 15 } else { 0 };
        self.finish(id, JobState::Cancelled, "None", raw, now);
        Ok(())
    }

    /// `scontrol requeue`: back to PENDING (reason BeginTime), restart count + 1.
    pub fn requeue(&mut self, id: u32, now: Instant) -> Result<(), String> {
        let state = self.jobs.get(&id).map(|j| j.state).ok_or("no such job")?;
        if state == JobState::Pending {
            return Err("job is pending".into());
        }
        if state.holds_node() {
            self.finish(id, JobState::Pending, "BeginTime", 0, now);
        }
        let delay = self.requeue_delay;
        if let Some(j) = self.jobs.get_mut(&id) {
            j.stop_process();
            j.state = JobState::Pending;
            j.reason = "BeginTime".into();
            j.restart_cnt += 1;
            j.exit_raw = 0;
            j.start_time = None;
            j.end_time = None;
            j.finished_at = None;
            j.node = None;
            j.eligible_at = now + delay;
            j.spec.already_running = false;
        }
        self.active.remove(&id);
        self.pending.insert(id);
        Ok(())
    }

    /// Suspend or resume a running job.
    pub fn suspend(&mut self, id: u32, suspend: bool) -> Result<(), String> {
        let j = self.jobs.get_mut(&id).ok_or("no such job")?;
        match (j.state, suspend) {
            (JobState::Running, true) => j.state = JobState::Suspended,
            (JobState::Suspended, false) => j.state = JobState::Running,
            (s, _) => return Err(format!("job is {}", s.name())),
        }
        Ok(())
    }

    /// Drop a record without a trace.
    pub fn vanish(&mut self, id: u32, now: Instant) -> bool {
        if !self.jobs.contains_key(&id) {
            return false;
        }
        self.finish(id, JobState::Cancelled, "None", 0, now);
        self.jobs.remove(&id);
        true
    }

    /// A process started (process mode); false when the job moved on meanwhile.
    pub fn proc_started(
        &mut self,
        id: u32,
        generation: u64,
        pid: Option<u32>,
        kill: tokio::sync::oneshot::Sender<()>,
    ) -> bool {
        match self.jobs.get_mut(&id) {
            Some(j) if j.generation == generation && j.state.holds_node() => {
                j.pid = pid;
                j.kill = Some(kill);
                true
            }
            _ => false,
        }
    }

    /// A process ended with `raw` wait status (process mode).
    pub fn proc_exited(&mut self, id: u32, generation: u64, raw: i64, now: Instant) {
        let current = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.generation == generation && j.state.holds_node());
        if !current {
            return;
        }
        if raw == 0 {
            self.finish(id, JobState::Completed, "None", 0, now);
        } else {
            self.finish(id, JobState::Failed, "NonZeroExitCode", raw, now);
        }
    }
}
