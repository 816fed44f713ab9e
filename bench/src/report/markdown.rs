//! The report as markdown: the tables `make bench` prints and writes.

use super::*;

pub(super) fn fmt_opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("—".into(), |x| format!("{x:.1}{unit}"))
}

fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str("# vk-bench\n\n");
        s.push_str(&format!("Machine: {}  \n", self.machine.one_line()));
        s.push_str(&format!("Started: {}  \n", self.started_at));
        s.push_str(&format!("Settings: `{}`\n\n", self.settings));
        if !self.dispatch.is_empty() {
            s.push_str(
                "Dispatch per pod (cheapest policy, a two-type GPU set, one breaker open, one \
                 recent refusal; independent of the pods on the node):\n\n\
                 | providers | ns per pod |\n|---|---|\n",
            );
            for d in &self.dispatch {
                s.push_str(&format!("| {} | {:.0} |\n", d.providers, d.ns_per_pod));
            }
            s.push('\n');
        }
        let ns: Vec<String> = self.rounds.iter().map(Round::label).collect();
        s.push_str(&format!("| figure | {} |\n", ns.join(" | ")));
        s.push_str(&format!("|---|{}\n", "---|".repeat(ns.len())));
        let row = |s: &mut String, name: &str, f: &dyn Fn(&Round) -> String| {
            let cells: Vec<String> = self.rounds.iter().map(f).collect();
            s.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
        };
        row(&mut s, "create requests sent (s)", &|r| {
            format!("{:.1}", r.throughput.create_requests_s)
        });
        row(&mut s, "bind -> all Running (s)", &|r| {
            format!(
                "{} ({}/{})",
                fmt_opt(r.throughput.all_running_s, ""),
                r.throughput.running,
                r.n
            )
        });
        row(
            &mut s,
            "kwok: bind -> all Running (s)",
            &|r| match &r.kwok {
                Some(k) => format!("{} ({}/{})", fmt_opt(k.all_running_s, ""), k.running, r.n),
                None => "—".into(),
            },
        );
        row(&mut s, "ours vs kwok (kwok's time / ours)", &|r| {
            r.vs_kwok.map_or("—".into(), |x| format!("{x:.2}x"))
        });
        row(&mut s, "kwok: create requests sent (s)", &|r| {
            r.kwok
                .as_ref()
                .map_or("—".into(), |k| format!("{:.1}", k.create_requests_s))
        });
        let by_verb = |m: &BTreeMap<String, f64>| {
            let total: f64 = m.values().sum();
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
            format!("{total:.2} ({})", parts.join(", "))
        };
        row(&mut s, "API writes per pod to Running: ours", &|r| {
            by_verb(&r.apiserver.writes_to_running_per_pod)
        });
        row(&mut s, "API writes per pod to Running: kwok", &|r| {
            r.kwok
                .as_ref()
                .map_or("—".into(), |k| by_verb(&k.writes_per_pod))
        });
        row(&mut s, "delete -> pods gone (s)", &|r| {
            fmt_opt(r.throughput.all_pods_gone_s, "")
        });
        row(&mut s, "delete -> gone + provider empty (s)", &|r| {
            fmt_opt(r.throughput.all_deleted_s, "")
        });
        let latencies: [(&str, PickLatency); 5] = [
            ("bind -> provider create", |l| &l.bind_to_create_ms),
            ("VK's own: first seen -> create", |l| {
                &l.vk_seen_to_create_ms
            }),
            ("of which the provider create call", |l| {
                &l.provider_create_call_ms
            }),
            ("provider Running -> pod Running", |l| {
                &l.provider_running_to_pod_running_ms
            }),
            ("VK's own: list -> status write", |l| {
                &l.vk_list_to_status_ms
            }),
        ];
        for (name, pick) in latencies {
            row(&mut s, &format!("{name} p50/p90/p99 (ms)"), &|r| {
                let p = pick(&r.latency);
                format!("{:.0} / {:.0} / {:.0}", p.p50, p.p90, p.p99)
            });
        }
        row(&mut s, "restart: reconciled after SIGKILL (s)", &|r| {
            fmt_opt(r.restart.reconciled_s, "")
        });
        row(&mut s, "restart: provider creates / status writes", &|r| {
            format!(
                "{} / {}",
                r.restart.provider_creates, r.restart.status_writes
            )
        });
        row(&mut s, "VK RSS at N Running (MiB)", &|r| {
            fmt_opt(r.footprint.vk_rss_mib, "")
        });
        row(&mut s, "VK RSS after restart (MiB)", &|r| {
            fmt_opt(r.footprint.vk_rss_after_restart_mib, "")
        });
        row(&mut s, "VK CPU s: to Running / restart / delete", &|r| {
            format!(
                "{} / {} / {}",
                fmt_opt(r.footprint.vk_cpu_s_to_running, ""),
                fmt_opt(r.footprint.vk_cpu_s_restart, ""),
                fmt_opt(r.footprint.vk_cpu_s_delete, "")
            )
        });
        row(
            &mut s,
            "apiserver pod+event requests per pod (all / VK)",
            &|r| {
                format!(
                    "{:.2} / {:.2}",
                    r.apiserver.pod_and_event_requests_per_pod, r.apiserver.vk_requests_per_pod
                )
            },
        );
        row(&mut s, "apiserver mean latency in create (ms)", &|r| {
            r.apiserver
                .create_phase_mean_latency_ms
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        row(&mut s, "VK max queue depth in create", &|r| {
            format!("{:.0}", r.apiserver.vk_max_queue_depth)
        });
        row(&mut s, "status writes per pod", &|r| {
            format!("{:.3}", r.apiserver.status_writes_per_pod)
        });
        row(&mut s, "provider calls per poll interval", &|r| {
            r.provider_calls
                .per_interval
                .iter()
                .map(|(p, m)| format!("{p} {:.1}", m.get("total").copied().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(", ")
        });
        for phase in ["create", "restart", "delete"] {
            row(&mut s, &format!("CPU s in {phase} (busy %)"), &|r| {
                r.cpu.get(phase).map_or("—".into(), |c| {
                    let top: Vec<String> = c
                        .cpu_s
                        .iter()
                        .filter(|(_, v)| **v >= 0.5)
                        .map(|(k, v)| format!("{k} {v:.1}"))
                        .collect();
                    format!(
                        "{}; other work on the host {:.1} ({:.0}% busy)",
                        top.join(", "),
                        c.other_processes_s,
                        c.machine_busy_pct
                    )
                })
            });
        }
        s.push_str("\nTargets (stated for N = 10,000 on 2 cores):\n\n");
        s.push_str("| round | target | goal | measured | |\n|---|---|---|---|---|\n");
        for r in &self.rounds {
            for t in &r.targets {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    r.label(),
                    t.name,
                    t.target,
                    t.measured,
                    mark(t.met)
                ));
            }
        }
        for t in &self.summary {
            s.push_str(&format!(
                "| all | {} | {} | {} | {} |\n",
                t.name,
                t.target,
                t.measured,
                mark(t.met)
            ));
        }
        let notes: Vec<String> = self
            .rounds
            .iter()
            .flat_map(|r| r.notes.iter().map(move |n| format!("- {}: {n}", r.label())))
            .collect();
        if !notes.is_empty() {
            s.push_str("\nNotes:\n\n");
            s.push_str(&notes.join("\n"));
            s.push('\n');
        }
        s
    }
}
