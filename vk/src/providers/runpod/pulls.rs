//! Failed image pulls of RunPod pods. Nothing in the v2 `Pod` tells a pull that fails: the pod
//! stays PROVISIONING or STARTING while the host retries "about every 15 s", for ever
//! (runpod/runpod-python#165), and the reason shows only in the pod's system log ("error
//! pulling image: Error response from daemon: pull access denied for ...", same thread; "no
//! basic auth credentials", dstackai/dstack#2507). Other clients only give up after a
//! deadline (dstack waits 20 minutes for `runtime`). So the adapter reads the system log's
//! last lines of a pod still starting [`FIRST_CHECK`] after its creation, from the second list
//! that shows it so (a single list costs one request), then every
//! [`CHECK_EVERY`], at most [`IN_FLIGHT`] at a time, in the background (a list never waits for
//! one), and reports the last pull error it saw while the pod has not started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::logs::{FIRST_LINE, QUIET, SseParser, connect};
use crate::providers::http::{Bearer, Client};

/// The first look at a pod still starting, after its creation.
pub const FIRST_CHECK: Duration = Duration::from_secs(10);
/// Later looks, while it is still starting (a RunPod quota is 60 requests a minute).
pub const CHECK_EVERY: Duration = Duration::from_secs(60);
/// Reads of system logs at once.
pub const IN_FLIGHT: usize = 4;
/// The lines read: the host writes one per try.
const TAIL: &str = "20";

/// What the adapter knows of each starting pod's pulls, by pod id.
#[derive(Debug, Default)]
pub struct Pulls {
    pods: HashMap<String, Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Listed starting before this list.
    listed: bool,
    checked: Option<Instant>,
    in_flight: bool,
    failure: Option<String>,
}

/// The pull error a system log's lines end with (`None`: the last pull-related line is not an
/// error, or there is none).
pub fn last_failure<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut last = None;
    for line in lines {
        let lower = line.to_ascii_lowercase();
        if let Some(i) = lower.find("error pulling image") {
            let rest = line[i + "error pulling image".len()..].trim_start_matches([':', ' ']);
            last = Some(rest.to_owned());
        } else if lower.contains("pull access denied")
            || lower.contains("no basic auth credentials")
            || lower.contains("manifest unknown")
            || (lower.contains("unauthorized") && lower.contains("authentication required"))
        {
            last = Some(line.trim().to_owned());
        } else if lower.contains("image") && (lower.contains("ready") || lower.contains("pulled"))
            || lower.contains("container is running")
            || lower.contains("starting container")
        {
            last = None;
        }
    }
    last
}

impl Pulls {
    /// Forgets pods no longer listed.
    pub fn retain(&mut self, ids: &[&str]) {
        self.pods.retain(|id, _| ids.contains(&id.as_str()));
    }

    pub fn failure(&self, id: &str) -> Option<String> {
        self.pods.get(id)?.failure.clone()
    }

    /// Marks and returns the pods among `starting` (id, time since its creation) due for a
    /// look (`now`: the time of the list).
    pub fn due(&mut self, starting: &[(String, Duration)], now: Instant) -> Vec<String> {
        let busy = self.pods.values().filter(|s| s.in_flight).count();
        let mut out = Vec::new();
        for (id, age) in starting {
            let s = self.pods.entry(id.clone()).or_default();
            let listed = std::mem::replace(&mut s.listed, true);
            if busy + out.len() >= IN_FLIGHT {
                continue;
            }
            let due = listed
                && !s.in_flight
                && *age >= FIRST_CHECK
                && s.checked
                    .is_none_or(|t| now.saturating_duration_since(t) >= CHECK_EVERY);
            if due {
                s.in_flight = true;
                out.push(id.clone());
            }
        }
        out
    }

    fn done(&mut self, id: &str, failure: Option<Option<String>>, at: Instant) {
        if let Some(s) = self.pods.get_mut(id) {
            s.in_flight = false;
            s.checked = Some(at);
            if let Some(f) = failure {
                s.failure = f;
            }
        }
    }
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    line: Option<String>,
}

/// Reads the last system log lines of pod `id` and records what they say.
pub async fn check(
    api: Arc<Client<Bearer>>,
    pulls: Arc<Mutex<Pulls>>,
    id: String,
    timeout: Duration,
) {
    let lines = read_system_tail(&api, &id, timeout).await;
    let failure = lines.map(|l| last_failure(l.iter().map(String::as_str)));
    pulls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .done(&id, failure, Instant::now());
}

async fn read_system_tail(
    api: &Client<Bearer>,
    id: &str,
    timeout: Duration,
) -> Option<Vec<String>> {
    let mut url = api.url(&["pods", id, "logs"], false);
    url.query_pairs_mut()
        .append_pair("source", "system")
        .append_pair("tail", TAIL);
    let mut resp = connect(api, &url, None, timeout).await.ok()?;
    let opened = Instant::now();
    let mut last_line: Option<Instant> = None;
    let mut parser = SseParser::default();
    let mut lines = Vec::new();
    loop {
        let until = last_line.map_or(opened + FIRST_LINE, |t| t + QUIET);
        let wait = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(wait, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                for e in parser.push(&bytes) {
                    let line = serde_json::from_str::<Entry>(&e.data)
                        .ok()
                        .and_then(|e| e.line)
                        .unwrap_or(e.data);
                    lines.push(line);
                    last_line = Some(Instant::now());
                }
            }
            Ok(Ok(None)) | Err(_) => return Some(lines),
            Ok(Err(_)) => return None,
        }
        if lines.len() > 200 || opened.elapsed() > Duration::from_secs(10) {
            return Some(lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_pull_line_decides() {
        let denied = "error pulling image: Error response from daemon: pull access denied for acme/app, repository does not exist or may require 'docker login'";
        assert_eq!(
            last_failure(["allocated 1 x A100 on machine 3", denied]).as_deref(),
            Some(
                "Error response from daemon: pull access denied for acme/app, repository does not exist or may require 'docker login'"
            )
        );
        // A pull that later worked is no failure.
        assert_eq!(
            last_failure([denied, "image acme/app ready, starting container"]),
            None
        );
        assert_eq!(last_failure(["allocated 1 x A100"]), None);
        let ecr =
            "Head \"https://1.dkr.ecr.example/v2/app/manifests/latest\": no basic auth credentials";
        assert_eq!(last_failure([ecr]).as_deref(), Some(ecr));
    }

    #[test]
    fn pods_are_looked_at_after_a_while_then_rarely_and_a_few_at_a_time() {
        let mut p = Pulls::default();
        let t0 = Instant::now();
        let young = [("y".to_owned(), Duration::from_secs(3))];
        assert!(p.due(&young, t0).is_empty());
        assert!(p.due(&young, t0).is_empty(), "too young");
        let ids: Vec<(String, Duration)> = (0..6).map(|i| (format!("p{i}"), FIRST_CHECK)).collect();
        // First sighting: not yet (a single list costs one request).
        assert!(p.due(&ids, t0).is_empty());
        let later = t0 + Duration::from_secs(1);
        let first = p.due(&ids, later);
        assert_eq!(first.len(), IN_FLIGHT);
        // In flight: not again, and no room for more.
        assert!(p.due(&ids, later).is_empty());
        p.done("p0", Some(Some("denied".into())), later);
        assert_eq!(p.failure("p0").as_deref(), Some("denied"));
        // One slot free: the next pod not yet looked at, not p0 again.
        assert_eq!(p.due(&ids, later), ["p4"]);
        p.done("p1", Some(None), later);
        // Three in flight: one slot, for p0, looked at again once CHECK_EVERY passed (before
        // p1, checked as long ago, and p5, never checked).
        assert_eq!(p.due(&ids, later + CHECK_EVERY), ["p0"]);
        p.retain(&["p1"]);
        assert_eq!(p.failure("p0"), None);
    }
}
