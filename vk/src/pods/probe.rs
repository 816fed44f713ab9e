//! Container probes as the kubelet evaluates them, as pure functions: a probe's settings with
//! the Kubernetes defaults, when it is due, and how consecutive results cross the thresholds.
//!
//! Semantics follow the kubelet's prober worker (`pkg/kubelet/prober/worker.go`): a readiness
//! probe starts from *failure* (not ready until the first success after the container started),
//! a liveness probe from *success*; no probe runs before `initialDelaySeconds` have passed since
//! the container started; then one runs every `periodSeconds`, each bounded by
//! `timeoutSeconds` (a timeout is a failure); the result flips only after `successThreshold`
//! consecutive successes or `failureThreshold` consecutive failures; a probe that could not be
//! run at all (an error of the prober, not of the container) is thrown away. The I/O lives in
//! [`super::prober`].

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Which probe: they differ in their initial result and in what a failure does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Readiness,
    Liveness,
}

impl Kind {
    /// Both kinds, in the order the prober syncs them.
    pub const ALL: [Kind; 2] = [Kind::Readiness, Kind::Liveness];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Readiness => "readiness",
            Self::Liveness => "liveness",
        }
    }

    /// The result before any probe ran (kubelet: readiness `Failure`, liveness `Success`).
    fn initial(self) -> Outcome {
        match self {
            Self::Readiness => Outcome::Failure,
            Self::Liveness => Outcome::Success,
        }
    }
}

/// What one probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// A container port as a probe names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Port {
    Number(u16),
    Name(String),
}

impl Port {
    fn from_k8s(p: &IntOrString) -> Option<Self> {
        match p {
            IntOrString::Int(n) => u16::try_from(*n).ok().filter(|n| *n > 0).map(Self::Number),
            IntOrString::String(s) => Some(match s.parse::<u16>() {
                Ok(n) => Self::Number(n),
                Err(_) => Self::Name(s.clone()),
            }),
        }
    }

    /// The port number, resolving a name against the container's ports as the kubelet does.
    pub fn resolve(&self, container: Option<&Container>) -> Option<u16> {
        match self {
            Self::Number(n) => Some(*n),
            Self::Name(name) => container?
                .ports
                .as_ref()?
                .iter()
                .find(|p| p.name.as_deref() == Some(name))
                .and_then(|p| u16::try_from(p.container_port).ok()),
        }
    }
}

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `httpGet`: a GET; 200..=399 is success.
    Http {
        https: bool,
        /// `host` of the probe, when set (the kubelet then connects there, not to the pod).
        host: Option<String>,
        port: Port,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// `tcpSocket`: success once a connection is accepted.
    Tcp { host: Option<String>, port: Port },
    /// `exec`: success on exit code 0.
    Exec { command: Vec<String> },
    /// A handler this VK does not evaluate (`grpc`, or none given); named for the message.
    Unsupported(&'static str),
}

/// One probe of a container with the Kubernetes defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub kind: Kind,
    pub action: Action,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: u64, min: u64) -> Duration {
    let s = v.and_then(|v| u64::try_from(v).ok()).unwrap_or(default);
    Duration::from_secs(s.max(min))
}

fn count(v: Option<i32>, default: u32) -> u32 {
    v.and_then(|v| u32::try_from(v).ok())
        .unwrap_or(default)
        .max(1)
}

impl Spec {
    /// The probe of `kind` on `container`, if it has one. Defaults as the API documents them:
    /// `periodSeconds` 10, `timeoutSeconds` 1, `successThreshold` 1 (always 1 for liveness),
    /// `failureThreshold` 3, `initialDelaySeconds` 0.
    pub fn of(container: &Container, kind: Kind) -> Option<Self> {
        let p = match kind {
            Kind::Readiness => container.readiness_probe.as_ref(),
            Kind::Liveness => container.liveness_probe.as_ref(),
        }?;
        Some(Self::from_k8s(p, kind))
    }

    pub fn from_k8s(p: &Probe, kind: Kind) -> Self {
        let action = if let Some(h) = &p.http_get {
            match Port::from_k8s(&h.port) {
                Some(port) => Action::Http {
                    https: h
                        .scheme
                        .as_deref()
                        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
                    host: h.host.clone().filter(|h| !h.is_empty()),
                    port,
                    path: h
                        .path
                        .clone()
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "/".into()),
                    headers: h
                        .http_headers
                        .iter()
                        .flatten()
                        .map(|h| (h.name.clone(), h.value.clone()))
                        .collect(),
                },
                None => Action::Unsupported("httpGet with an invalid port"),
            }
        } else if let Some(t) = &p.tcp_socket {
            match Port::from_k8s(&t.port) {
                Some(port) => Action::Tcp {
                    host: t.host.clone().filter(|h| !h.is_empty()),
                    port,
                },
                None => Action::Unsupported("tcpSocket with an invalid port"),
            }
        } else if let Some(e) = &p.exec {
            Action::Exec {
                command: e.command.clone().unwrap_or_default(),
            }
        } else if p.grpc.is_some() {
            Action::Unsupported("grpc")
        } else {
            Action::Unsupported("a probe without a handler")
        };
        Self {
            kind,
            action,
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: match kind {
                Kind::Liveness => 1,
                Kind::Readiness => count(p.success_threshold, 1),
            },
            failure_threshold: count(p.failure_threshold, 3),
        }
    }
}

/// The state of one probe of one container (one workload): the published result and the run
/// of identical outcomes that may flip it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    success_threshold: u32,
    failure_threshold: u32,
    result: Outcome,
    last: Option<Outcome>,
    run: u32,
    /// Probes run so far (the first one is due after the initial delay, the next ones one
    /// period apart).
    probes: u64,
}

impl Tracker {
    /// A tracker for a container that just started (or a new workload after a restart).
    pub fn new(spec: &Spec) -> Self {
        Self {
            success_threshold: spec.success_threshold,
            failure_threshold: spec.failure_threshold,
            result: spec.kind.initial(),
            last: None,
            run: 0,
            probes: 0,
        }
    }

    /// The published result.
    pub fn result(&self) -> Outcome {
        self.result
    }

    /// Records one probe's outcome; true when the published result changed.
    pub fn record(&mut self, o: Outcome) -> bool {
        self.probes += 1;
        if self.last == Some(o) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(o);
            self.run = 1;
        }
        let threshold = match o {
            Outcome::Success => self.success_threshold,
            Outcome::Failure => self.failure_threshold,
        };
        if self.run < threshold || self.result == o {
            return false;
        }
        self.result = o;
        true
    }

    /// A probe that could not be run (the prober's own error): thrown away, as the kubelet
    /// does, but the schedule moves on.
    pub fn skip(&mut self) {
        self.probes += 1;
    }

    /// How long to wait before the next probe, given how long the container has been running:
    /// the first one waits out the initial delay, each later one a period after the previous
    /// one began (a container adopted long after it started is probed at once, not caught up).
    pub fn wait(&self, spec: &Spec, running_for: Duration) -> Duration {
        if self.probes == 0 {
            spec.initial_delay.saturating_sub(running_for)
        } else {
            spec.period
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, TCPSocketAction};

    fn probe(f: impl FnOnce(&mut Probe)) -> Probe {
        let mut p = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(8080),
                path: Some("/ready".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        f(&mut p);
        p
    }

    /// A fake clock: runs the tracker's schedule, answering each probe with `answer(t)`, and
    /// returns the times (seconds since the container started) at which the result flipped.
    fn run(spec: &Spec, until: u64, answer: impl Fn(u64) -> Outcome) -> Vec<(u64, Outcome)> {
        let mut t = Tracker::new(spec);
        let mut now = Duration::ZERO;
        assert_eq!(
            t.wait(spec, Duration::from_secs(60)),
            Duration::ZERO,
            "adopted late"
        );
        let mut flips = Vec::new();
        loop {
            now += t.wait(spec, now);
            if now.as_secs() > until {
                return flips;
            }
            if t.record(answer(now.as_secs())) {
                flips.push((now.as_secs(), t.result()));
            }
        }
    }

    #[test]
    fn defaults_are_the_kubernetes_ones() {
        let s = Spec::from_k8s(&probe(|_| {}), Kind::Readiness);
        assert_eq!(s.initial_delay, Duration::ZERO);
        assert_eq!(s.period, Duration::from_secs(10));
        assert_eq!(s.timeout, Duration::from_secs(1));
        assert_eq!((s.success_threshold, s.failure_threshold), (1, 3));
        let live = Spec::from_k8s(&probe(|p| p.success_threshold = Some(5)), Kind::Liveness);
        assert_eq!(
            live.success_threshold, 1,
            "liveness successThreshold is always 1"
        );
        let zero = Spec::from_k8s(&probe(|p| p.period_seconds = Some(0)), Kind::Readiness);
        assert_eq!(
            zero.period,
            Duration::from_secs(1),
            "the minimum period is 1 s"
        );
    }

    #[test]
    fn readiness_starts_failed_and_turns_ready_on_the_first_success_after_the_delay() {
        let s = Spec::from_k8s(
            &probe(|p| {
                p.initial_delay_seconds = Some(5);
                p.period_seconds = Some(2);
            }),
            Kind::Readiness,
        );
        assert_eq!(Tracker::new(&s).result(), Outcome::Failure);
        // Serving from t=0, but the first probe waits for the initial delay.
        assert_eq!(run(&s, 30, |_| Outcome::Success), [(5, Outcome::Success)]);
        // Serving from t=10: probes at 5, 7, 9 fail (no flip, already failed), 11 succeeds.
        let flips = run(&s, 30, |t| {
            if t >= 10 {
                Outcome::Success
            } else {
                Outcome::Failure
            }
        });
        assert_eq!(flips, [(11, Outcome::Success)]);
    }

    #[test]
    fn thresholds_need_consecutive_results() {
        let s = Spec::from_k8s(
            &probe(|p| {
                p.period_seconds = Some(1);
                p.success_threshold = Some(2);
                p.failure_threshold = Some(3);
            }),
            Kind::Readiness,
        );
        // Up at 0..=9, down at 10..=19, one blip at 14 does not reset the failed state,
        // a single success at 22 between failures does not make it ready.
        let flips = run(&s, 40, |t| match t {
            0..=9 => Outcome::Success,
            14 => Outcome::Success,
            22 => Outcome::Success,
            10..=29 => Outcome::Failure,
            _ => Outcome::Success,
        });
        assert_eq!(
            flips,
            [
                (1, Outcome::Success),
                (12, Outcome::Failure),
                (31, Outcome::Success)
            ]
        );
    }

    #[test]
    fn liveness_starts_alive_and_fails_after_the_threshold() {
        let s = Spec::from_k8s(&probe(|p| p.period_seconds = Some(3)), Kind::Liveness);
        let mut t = Tracker::new(&s);
        assert_eq!(t.result(), Outcome::Success);
        assert!(!t.record(Outcome::Failure));
        assert!(!t.record(Outcome::Failure));
        assert!(t.record(Outcome::Failure));
        assert_eq!(t.result(), Outcome::Failure);
        assert_eq!(t.wait(&s, Duration::from_secs(4)), Duration::from_secs(3));
    }

    #[test]
    fn a_skipped_probe_keeps_the_schedule_and_the_result() {
        let s = Spec::from_k8s(&probe(|_| {}), Kind::Readiness);
        let mut t = Tracker::new(&s);
        t.skip();
        assert_eq!(t.result(), Outcome::Failure);
        assert_eq!(t.wait(&s, Duration::from_secs(3)), Duration::from_secs(10));
    }

    #[test]
    fn handlers_and_ports() {
        let c = Container {
            name: "main".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let named = Spec::from_k8s(
            &probe(|p| {
                p.http_get = None;
                p.tcp_socket = Some(TCPSocketAction {
                    port: IntOrString::String("http".into()),
                    host: None,
                });
            }),
            Kind::Readiness,
        );
        let Action::Tcp { port, .. } = &named.action else {
            panic!("{:?}", named.action)
        };
        assert_eq!(port.resolve(Some(&c)), Some(8080));
        assert_eq!(Port::Name("metrics".into()).resolve(Some(&c)), None);
        let https = Spec::from_k8s(
            &probe(|p| p.http_get.as_mut().unwrap().scheme = Some("HTTPS".into())),
            Kind::Readiness,
        );
        assert!(matches!(https.action, Action::Http { https: true, .. }));
        let grpc = Spec::from_k8s(
            &probe(|p| {
                p.http_get = None;
                p.grpc = Some(Default::default());
            }),
            Kind::Readiness,
        );
        assert_eq!(grpc.action, Action::Unsupported("grpc"));
    }
}
