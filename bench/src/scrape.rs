//! Figures read from Prometheus text and from the VK's log.

use super::*;

pub(crate) fn counter_delta(
    a: &BTreeMap<String, BTreeMap<String, f64>>,
    b: &BTreeMap<String, BTreeMap<String, f64>>,
    scale: f64,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    b.iter()
        .map(|(p, m)| {
            let routes = m
                .iter()
                .map(|(k, v)| {
                    let d = v - a.get(p).and_then(|x| x.get(k)).copied().unwrap_or(0.0);
                    (k.clone(), round3(d * scale))
                })
                .filter(|(k, v)| *v != 0.0 || k == "total")
                .collect();
            (p.clone(), routes)
        })
        .collect()
}

/// Sum of a VK metric's samples whose label text contains every `labels` item.
pub(crate) fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let base = key.split('{').next()?;
            (base == name && labels.iter().all(|x| key.contains(x)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// (upper bound, cumulative count) pairs of a histogram in Prometheus text.
pub(crate) fn histogram(text: &str, name: &str) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&bucket)?;
            let (le, rest) = rest.split_once('"')?;
            let count = rest.rsplit(' ').next()?.parse::<f64>().ok()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count))
        })
        .collect()
}

/// One "created workload" line of the VK's JSON log.
pub(crate) struct CreateLine {
    pub(crate) uid: String,
    pub(crate) at: Timestamp,
    /// `since_seen_ms`: the VK's first sight of the pod to the provider's answer.
    pub(crate) since_seen_ms: Option<f64>,
    /// `provider_ms`: the provider's create call.
    pub(crate) provider_ms: Option<f64>,
}

/// Every "created workload" line of the VK's JSON log, read once.
pub(crate) fn vk_creates(log: &Path) -> Vec<CreateLine> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("created workload"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "created workload")
        .filter_map(|v| {
            let f = &v["fields"];
            Some(CreateLine {
                uid: f["uid"].as_str()?.to_owned(),
                at: v["timestamp"].as_str()?.parse().ok()?,
                since_seen_ms: f["since_seen_ms"].as_f64(),
                provider_ms: f["provider_ms"].as_f64(),
            })
        })
        .collect()
}

pub(crate) fn ms_between(a: Timestamp, b: Timestamp) -> f64 {
    b.duration_since(a).as_secs_f64() * 1000.0
}

/// Polls `f` every `every` until it is true; the instant it was, or None at the deadline.
pub(crate) async fn wait_until<F, Fut>(
    timeout: Duration,
    every: Duration,
    mut f: F,
) -> Option<Instant>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}
