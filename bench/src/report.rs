//! The bench's results: one record per N, the targets of issue 8 judged against them, and the
//! JSON and markdown renderings written under `target/bench/`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::procs::{CpuPhase, Machine, round3};

/// Percentiles of a sample, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut v: Vec<f64>) -> Self {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        // Nearest rank.
        let at = |q: f64| {
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            round3(v[rank - 1])
        };
        Self {
            count: v.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: round3(v[v.len() - 1]),
        }
    }

    /// Percentiles of a Prometheus histogram given as (upper bound in seconds, cumulative
    /// count) pairs, interpolated linearly inside a bucket as `histogram_quantile` does;
    /// `max` is the upper bound of the highest non-empty bucket.
    pub fn of_histogram(mut buckets: Vec<(f64, f64)>) -> Self {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = buckets.last().map_or(0.0, |b| b.1);
        if total <= 0.0 {
            return Self::default();
        }
        let at = |q: f64| {
            let rank = q * total;
            let mut lower = (0.0, 0.0);
            for &(le, cum) in &buckets {
                if cum >= rank {
                    if le.is_infinite() {
                        return round3(lower.0 * 1000.0);
                    }
                    let width = cum - lower.1;
                    let frac = if width > 0.0 {
                        (rank - lower.1) / width
                    } else {
                        1.0
                    };
                    return round3((lower.0 + (le - lower.0) * frac) * 1000.0);
                }
                lower = (le, cum);
            }
            round3(lower.0 * 1000.0)
        };
        let mut max = 0.0;
        let mut prev = 0.0;
        for &(le, cum) in &buckets {
            if cum > prev {
                max = le;
            }
            prev = cum;
        }
        Self {
            count: total as usize,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: round3(max * 1000.0),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Throughput {
    /// Time to send every create request (bench side, `concurrency` in flight).
    pub create_requests_s: f64,
    /// First pod bound -> every pod Running (as the bench's watch saw it).
    pub all_running_s: Option<f64>,
    pub running: usize,
    /// First delete request -> every pod gone from the API.
    pub all_pods_gone_s: Option<f64>,
    /// First delete request -> pods gone and no live workload at any provider.
    pub all_deleted_s: Option<f64>,
    pub create_errors: usize,
    pub delete_errors: usize,
}

/// Selects one latency figure of a round.
type PickLatency = fn(&Latency) -> &Percentiles;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Bind (create answered with nodeName set, or first seen bound) -> the VK's provider
    /// create call returned (VK log, microsecond timestamps).
    pub bind_to_create_ms: Percentiles,
    /// Provider Running (create + provision + start) -> pod phase Running seen by the watch.
    pub provider_running_to_pod_running_ms: Percentiles,
    /// The VK's own share of bind -> create: from its first sight of the pod (watch event) to
    /// the provider's create answer (`since_seen_ms` in its log).
    pub vk_seen_to_create_ms: Percentiles,
    /// Of that, the provider's create call (`provider_ms` on the same log line): what the
    /// emulator, not the VK, takes.
    pub provider_create_call_ms: Percentiles,
    /// The VK's own share of provider Running -> pod Running: from the list that showed the
    /// change to the status write (its `gpu_vk_pod_status_latency_seconds` histogram,
    /// interpolated within buckets).
    pub vk_list_to_status_ms: Percentiles,
    /// Workloads whose VK create time was more than 1 s from the emulator's `created_at`
    /// (which has 1 s resolution): a cross-check of the VK log times.
    pub created_at_mismatches: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Restart {
    /// SIGKILL -> the new VK reports its start-up reconcile finished.
    pub reconciled_s: Option<f64>,
    /// The VK's own `gpu_vk_startup_reconcile_seconds` (from its start to the end of that
    /// reconcile).
    pub vk_reported_s: Option<f64>,
    pub pods: usize,
    /// Provider create calls during recovery (emulator counters): must be 0.
    pub provider_creates: f64,
    /// Pod status writes by the restarted VK (its counter) until one poll interval after
    /// recovery: 0 when nothing changed.
    pub status_writes: f64,
    /// PATCH pods/status seen by the apiserver over the same window.
    pub apiserver_status_patches: f64,
    /// Reconciles the restarted VK ran.
    pub reconciles: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Footprint {
    /// VK resident memory with N pods Running (the VK that created them).
    pub vk_rss_mib: Option<f64>,
    pub vk_peak_rss_mib: Option<f64>,
    /// VK resident memory after restart recovery with N pods (no history of the ramp-up).
    pub vk_rss_after_restart_mib: Option<f64>,
    /// VK CPU seconds from its start until N pods Running.
    pub vk_cpu_s_to_running: Option<f64>,
    /// VK CPU seconds of the restart recovery.
    pub vk_cpu_s_restart: Option<f64>,
    /// VK CPU seconds during deletion.
    pub vk_cpu_s_delete: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ApiCost {
    /// Pod and event requests the apiserver served over create + delete, per pod, all clients.
    pub pod_and_event_requests_per_pod: f64,
    /// The same without the bench's own creates and deletes: the VK's (and controllers').
    pub vk_requests_per_pod: f64,
    /// VK status writes (its counter) per pod over the lifecycle.
    pub status_writes_per_pod: f64,
    /// Requests by "VERB resource[/subresource][.group]" during create + delete.
    pub breakdown: BTreeMap<String, f64>,
    /// Mean apiserver latency (ms) of pod and event requests during the create phase, from
    /// its `apiserver_request_duration_seconds`.
    pub create_phase_mean_latency_ms: BTreeMap<String, f64>,
    /// Highest VK work-queue depth sampled during the create phase.
    pub vk_max_queue_depth: f64,
    /// API writes on pods and events per pod from the first create to the end of the quiet
    /// window after all Running (so Events the VK's event rate delays count too), by
    /// "VERB resource", the bench's own creates left out: what starting a pod costs.
    pub writes_to_running_per_pod: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ProviderCalls {
    /// Calls per poll interval with N pods Running and nothing changing, by emulator and
    /// route (from the emulators' counters).
    pub per_interval: BTreeMap<String, BTreeMap<String, f64>>,
    /// Calls over the whole create phase by emulator and route.
    pub create_phase: BTreeMap<String, BTreeMap<String, f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Round {
    pub n: usize,
    /// Pods per second when the round was paced (the latency probe); None: as fast as possible.
    pub rate_per_s: Option<f64>,
    pub throughput: Throughput,
    pub latency: Latency,
    pub restart: Restart,
    pub footprint: Footprint,
    pub apiserver: ApiCost,
    pub provider_calls: ProviderCalls,
    /// CPU by process and machine busy share per phase: where the time went.
    pub cpu: BTreeMap<String, CpuPhase>,
    /// The same load on a node kwok simulates (see `crate::kwok`), when kwok was given.
    pub kwok: Option<crate::kwok::KwokRound>,
    /// kwok's time to all Running over ours: 1.0 is as fast as kwok.
    pub vs_kwok: Option<f64>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
}

/// Name of the side-by-side target, and its floor (issue 32).
pub const VS_KWOK: &str = "time to all Running vs kwok";
pub const VS_KWOK_TARGET: f64 = 0.8;
/// API writes a pod may cost from create to Running (the user's create not counted).
pub const WRITES_TO_RUNNING_TARGET: f64 = 3.0;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub started_at: String,
    pub settings: serde_json::Value,
    pub rounds: Vec<Round>,
    pub summary: Vec<Target>,
    /// The cost of one dispatch decision by number of providers (see `crate::dispatch`).
    pub dispatch: Vec<crate::dispatch::DispatchCost>,
}

impl Round {
    pub fn label(&self) -> String {
        match self.rate_per_s {
            Some(r) => format!("N={} at {r}/s", self.n),
            None => format!("N={}", self.n),
        }
    }

    /// Records kwok's figures for the same N (the ratio is taken when judging).
    pub fn set_kwok(&mut self, k: crate::kwok::KwokRound) {
        self.notes.extend(k.notes.iter().cloned());
        self.kwok = Some(k);
    }

    /// API writes per pod from create to Running, all verbs together.
    pub fn writes_to_running(&self) -> f64 {
        round3(self.apiserver.writes_to_running_per_pod.values().sum())
    }

    /// Judges this round against the targets (stated for N = 10,000).
    pub fn judge(&mut self, poll_ms: u64) {
        self.vs_kwok = match (
            self.kwok.as_ref().and_then(|k| k.all_running_s),
            self.throughput.all_running_s,
        ) {
            (Some(theirs), Some(ours)) if ours > 0.0 => Some(round3(theirs / ours)),
            _ => None,
        };
        let mut t = Vec::new();
        let mut push = |name: &str, target: &str, measured: String, met: Option<bool>| {
            t.push(Target {
                name: name.into(),
                target: target.into(),
                measured,
                met,
            })
        };
        let tp = &self.throughput;
        push(
            "all Running",
            "< 60 s from bind",
            fmt_opt(tp.all_running_s, " s"),
            Some(tp.all_running_s.is_some_and(|s| s < 60.0) && tp.running == self.n),
        );
        push(
            "all deleted",
            "< 90 s, provider empty",
            fmt_opt(tp.all_deleted_s, " s"),
            Some(tp.all_deleted_s.is_some_and(|s| s < 90.0)),
        );
        let l = &self.latency;
        push(
            "bind -> create p99",
            "< 100 ms",
            format!("{:.0} ms", l.bind_to_create_ms.p99),
            (l.bind_to_create_ms.count > 0).then_some(l.bind_to_create_ms.p99 < 100.0),
        );
        let limit = poll_ms as f64 + 100.0;
        push(
            "provider Running -> pod Running p99",
            &format!("< {limit:.0} ms (poll + 100 ms)"),
            format!("{:.0} ms", l.provider_running_to_pod_running_ms.p99),
            (l.provider_running_to_pod_running_ms.count > 0)
                .then_some(l.provider_running_to_pod_running_ms.p99 < limit),
        );
        let r = &self.restart;
        push(
            "restart reconciled",
            "< 15 s",
            fmt_opt(r.reconciled_s, " s"),
            Some(r.reconciled_s.is_some_and(|s| s < 15.0)),
        );
        push(
            "restart creates / status writes",
            "0 / 0",
            format!("{} / {}", r.provider_creates, r.status_writes),
            Some(r.provider_creates == 0.0 && r.status_writes == 0.0 && r.reconciled_s.is_some()),
        );
        let f = &self.footprint;
        push(
            "VK resident memory",
            "< 150 MiB",
            fmt_opt(f.vk_rss_mib, " MiB"),
            f.vk_rss_mib.map(|m| m < 150.0),
        );
        push(
            "status writes per pod lifecycle",
            "<= 2",
            format!("{:.3}", self.apiserver.status_writes_per_pod),
            Some(self.apiserver.status_writes_per_pod <= 2.0),
        );
        push(
            VS_KWOK,
            &format!(">= {VS_KWOK_TARGET}x"),
            match (&self.kwok, self.vs_kwok) {
                (Some(k), Some(r)) => format!("{r:.2}x (kwok {})", fmt_opt(k.all_running_s, " s")),
                (Some(_), None) => "kwok or VK did not finish".into(),
                (None, _) => "kwok not run".into(),
            },
            self.kwok
                .as_ref()
                .map(|_| self.vs_kwok.is_some_and(|r| r >= VS_KWOK_TARGET)),
        );
        if self.rate_per_s.is_none() {
            let w = self.writes_to_running();
            push(
                "API writes per pod to Running",
                &format!("<= {WRITES_TO_RUNNING_TARGET}"),
                format!("{w:.2}"),
                (self.throughput.running > 0).then_some(w <= WRITES_TO_RUNNING_TARGET),
            );
        }
        self.targets = t;
    }
}

/// Provider calls per interval must not grow with N: compares the smallest and largest N.
pub fn judge_provider_calls(rounds: &[Round]) -> Vec<Target> {
    let rounds: Vec<&Round> = rounds.iter().filter(|r| r.rate_per_s.is_none()).collect();
    let (Some(first), Some(last)) = (rounds.first().copied(), rounds.last().copied()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (provider, routes) in &last.provider_calls.per_interval {
        let total = |r: &Round| {
            r.provider_calls
                .per_interval
                .get(provider)
                .map_or(0.0, |m| m.get("total").copied().unwrap_or(0.0))
        };
        let (a, b) = (total(first), total(last));
        let met = if rounds.len() < 2 {
            None
        } else {
            Some(b <= a.max(1.0) * 1.5)
        };
        out.push(Target {
            name: format!("{provider} calls per poll interval"),
            target: "independent of N".into(),
            measured: format!(
                "{a:.1} at N={} -> {b:.1} at N={} ({})",
                first.n,
                last.n,
                routes
                    .iter()
                    .filter(|(k, _)| k.as_str() != "total")
                    .map(|(k, v)| format!("{k} {v:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            met,
        });
    }
    out
}

impl Report {
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
        let json = serde_json::to_string_pretty(self)?;
        std::fs::write(dir.join("report.json"), json + "\n")
            .context("failed to write report.json")?;
        std::fs::write(dir.join("report.md"), self.markdown())
            .context("failed to write report.md")?;
        Ok(())
    }
}

mod markdown;

use markdown::fmt_opt;

#[cfg(test)]
mod tests {
    #[test]
    fn histogram_percentiles_interpolate_within_buckets() {
        // 100 samples: 50 in (0, 0.01], 40 in (0.01, 0.1], 10 in (0.1, 1].
        let b = vec![
            (0.01, 50.0),
            (0.1, 90.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        let p = super::Percentiles::of_histogram(b);
        assert_eq!(p.count, 100);
        assert_eq!(p.p50, 10.0);
        assert_eq!(p.p90, 100.0);
        assert_eq!(p.p99, 910.0);
        assert_eq!(p.max, 1000.0);
        assert_eq!(super::Percentiles::of_histogram(vec![]).count, 0);
    }

    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(vec![]).count, 0);
        assert_eq!(Percentiles::of(vec![7.0]).p99, 7.0);
    }

    #[test]
    fn provider_calls_growing_with_n_is_missed() {
        let mk = |n, total| {
            let mut r = Round {
                n,
                ..Default::default()
            };
            r.provider_calls.per_interval.insert(
                "vast".into(),
                [("total".to_owned(), total), ("list".to_owned(), total)].into(),
            );
            r
        };
        let t = judge_provider_calls(&[mk(1000, 20.0), mk(10000, 200.0)]);
        assert_eq!(t[0].met, Some(false));
        let t = judge_provider_calls(&[mk(1000, 1.0), mk(10000, 1.0)]);
        assert_eq!(t[0].met, Some(true));
    }
}
