//! Kubernetes Events about pods (`events.k8s.io/v1`), sent in the background, with repeats
//! folded into a series.
//!
//! Like the kubelet, the VK remembers a bounded number of recent events (the kubelet's LRU
//! holds 4,096) so that a repeat within [`SERIES_WINDOW`] bumps the first event's series count
//! instead of creating another object. Bounded on purpose: kube-runtime's `Recorder` keeps
//! every event of the last six minutes and scans them all on each publish, which at 10,000
//! pods cost ~23 MiB and serialized every publish behind an O(n) sweep (`make bench`).
//!
//! Writes are budgeted ([`budget`]): per pod as client-go's spam filter does, for the whole VK
//! as the kubelet's event QPS does, so a flood of failures cannot flood the API server.

mod budget;

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// How long a repeat is folded into the earlier event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Events remembered for folding.
pub const CAPACITY: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    uid: String,
    type_: EventType,
    reason: String,
    action: String,
}

struct Seen {
    namespace: String,
    name: String,
    count: i32,
    at: Instant,
}

/// What a publish has to send.
#[derive(Debug, PartialEq)]
enum Plan {
    Create,
    /// Bump the series of the earlier event `name` to `count`.
    Bump {
        namespace: String,
        name: String,
        count: i32,
    },
}

/// Bounded memory of recent events, oldest forgotten first.
#[derive(Default)]
struct Memory {
    seen: HashMap<Key, Seen>,
    order: VecDeque<(Key, Instant)>,
}

impl Memory {
    fn plan(&mut self, key: &Key, now: Instant) -> Plan {
        match self.seen.get_mut(key) {
            Some(s) if now.duration_since(s.at) < SERIES_WINDOW => {
                s.count += 1;
                Plan::Bump {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    count: s.count,
                }
            }
            _ => Plan::Create,
        }
    }

    fn remember(&mut self, key: Key, namespace: String, name: String, now: Instant) {
        self.order.push_back((key.clone(), now));
        self.seen.insert(
            key,
            Seen {
                namespace,
                name,
                count: 1,
                at: now,
            },
        );
        while self.seen.len() > CAPACITY
            || self
                .order
                .front()
                .is_some_and(|(_, t)| now.duration_since(*t) >= SERIES_WINDOW)
        {
            let Some((k, t)) = self.order.pop_front() else {
                break;
            };
            // Only the entry this queue slot created goes; a newer one for the key stays.
            if self.seen.get(&k).is_some_and(|s| s.at == t) {
                self.seen.remove(&k);
            }
        }
    }

    fn forget(&mut self, key: &Key) {
        self.seen.remove(key);
    }
}

/// One send, prepared when the event was published.
struct Job {
    key: Key,
    /// The event to create (also when a bump finds its earlier event gone).
    event: Event,
    /// Bump the series of an earlier event instead of creating `event`.
    bump: Option<(String, i32)>,
}

/// Lanes that send events; a pod's events always take the same lane, so they stay in order.
const LANES: usize = 32;
/// Events waiting per lane before new ones are dropped (and counted).
const LANE_DEPTH: usize = 256;

/// Publishes events about pods as `reporting_controller` / `reporting_instance`.
///
/// Publishing never waits for the API server: events go to bounded lanes sent in the
/// background, as the kubelet's event broadcaster does, so a reconcile's latency (a pod's
/// create, its status) does not include an event round trip. When the API server falls so far
/// behind that a lane is full, the event is dropped and counted in `dropped`.
pub struct Events {
    controller: String,
    instance: String,
    memory: Arc<Mutex<Memory>>,
    lanes: Vec<mpsc::Sender<Job>>,
    dropped: Counter,
    budgets: Mutex<budget::PodBudgets>,
}

impl Events {
    /// Starts the sending lanes on the current Tokio runtime.
    pub fn new(client: Client, controller: &str, instance: &str, dropped: Counter) -> Self {
        let memory: Arc<Mutex<Memory>> = Arc::default();
        let rate = Arc::new(Mutex::new(budget::Bucket::full(
            budget::VK_BURST,
            Instant::now(),
        )));
        let lanes = (0..LANES)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Job>(LANE_DEPTH);
                let (client, memory, rate) = (client.clone(), memory.clone(), rate.clone());
                tokio::spawn(async move {
                    while let Some(job) = rx.recv().await {
                        wait_turn(&rate).await;
                        send(&client, &memory, job).await;
                    }
                });
                tx
            })
            .collect();
        Self {
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            memory,
            lanes,
            dropped,
            budgets: Mutex::default(),
        }
    }

    /// Queues one event about `regarding` (which must carry namespace, name and UID).
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let uid = regarding.uid.clone().unwrap_or_default();
        if !self
            .budgets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(&uid, Instant::now())
        {
            self.dropped.inc();
            debug!(reason, "the pod's event budget is spent; event dropped");
            return;
        }
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key = Key {
            uid,
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
        };
        let stamp = Timestamp::now();
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            stamp.as_nanosecond()
        );
        let mut note = note.to_owned();
        if note.len() > 1000 {
            let mut end = 1000;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(stamp)),
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(type_.as_str().to_owned()),
            ..Default::default()
        };
        let bump = {
            let now = Instant::now();
            let mut m = lock(&self.memory);
            match m.plan(&key, now) {
                Plan::Bump { name, count, .. } => Some((name, count)),
                Plan::Create => {
                    m.remember(key.clone(), namespace, name, now);
                    None
                }
            }
        };
        let lane = lane(&key.uid);
        let job = Job { key, event, bump };
        if let Err(mpsc::error::TrySendError::Full(job)) = self.lanes[lane].try_send(job) {
            self.dropped.inc();
            debug!(
                reason = job.event.reason.as_deref().unwrap_or_default(),
                "event lane full; event dropped"
            );
        }
    }
}

/// The lane of a pod's events.
fn lane(uid: &str) -> usize {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    (h.finish() % LANES as u64) as usize
}

fn lock(m: &Mutex<Memory>) -> std::sync::MutexGuard<'_, Memory> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the VK's event rate allows one more write.
async fn wait_turn(rate: &Mutex<budget::Bucket>) {
    loop {
        let wait = rate.lock().unwrap_or_else(|e| e.into_inner()).wait(
            budget::VK_PER_SECOND,
            budget::VK_BURST,
            Instant::now(),
        );
        match wait {
            None => return,
            Some(d) => tokio::time::sleep(d).await,
        }
    }
}

async fn send(client: &Client, memory: &Mutex<Memory>, job: Job) {
    let namespace = job.event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Some((name, count)) = &job.bump {
        let patch = serde_json::json!({
            "series": EventSeries { count: *count, last_observed_time: job.event.event_time.clone().unwrap_or(MicroTime(Timestamp::now())) },
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            // The earlier event expired or was never stored: this one starts anew.
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let mut m = lock(memory);
                m.forget(&job.key);
                m.remember(
                    job.key.clone(),
                    namespace.clone(),
                    job.event.metadata.name.clone().unwrap_or_default(),
                    Instant::now(),
                );
            }
            Err(e) => {
                warn!(error = %e, "failed to update an event series");
                return;
            }
        }
    }
    if let Err(e) = api.create(&PostParams::default(), &job.event).await {
        warn!(error = %e, reason = job.event.reason.as_deref().unwrap_or_default(), "failed to publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, reason: &str) -> Key {
        Key {
            uid: uid.into(),
            type_: EventType::Warning,
            reason: reason.into(),
            action: "CreateWorkload".into(),
        }
    }

    #[test]
    fn a_repeat_within_the_window_bumps_the_first_event() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        assert_eq!(m.plan(&key("a", "ProviderError"), t0), Plan::Create);
        m.remember(key("a", "ProviderError"), "ns".into(), "p.1".into(), t0);
        assert_eq!(
            m.plan(&key("a", "ProviderError"), t0 + Duration::from_secs(1)),
            Plan::Bump {
                namespace: "ns".into(),
                name: "p.1".into(),
                count: 2
            }
        );
        assert_eq!(
            m.plan(&key("a", "ProviderError"), t0 + Duration::from_secs(2)),
            Plan::Bump {
                namespace: "ns".into(),
                name: "p.1".into(),
                count: 3
            }
        );
        // Another reason or another pod is another event.
        assert_eq!(m.plan(&key("a", "Created"), t0), Plan::Create);
        assert_eq!(m.plan(&key("b", "ProviderError"), t0), Plan::Create);
        // After the window, a new event.
        assert_eq!(
            m.plan(&key("a", "ProviderError"), t0 + SERIES_WINDOW),
            Plan::Create
        );
    }

    #[test]
    fn memory_is_bounded_and_forgets_the_oldest_first() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        for i in 0..CAPACITY + 10 {
            m.remember(
                key(&i.to_string(), "Created"),
                "ns".into(),
                format!("p.{i}"),
                t0,
            );
        }
        assert_eq!(m.seen.len(), CAPACITY);
        assert_eq!(m.order.len(), CAPACITY);
        assert_eq!(m.plan(&key("0", "Created"), t0), Plan::Create);
        assert!(matches!(
            m.plan(&key(&(CAPACITY + 9).to_string(), "Created"), t0),
            Plan::Bump { .. }
        ));
    }

    /// An API server that accepts connections and never answers: sends hang, lanes fill.
    async fn silent_client() -> (Client, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        });
        let cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
        (Client::try_from(cfg).unwrap(), server)
    }

    fn pod(uid: &str) -> ObjectReference {
        ObjectReference {
            name: Some(format!("p-{uid}")),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn publishing_never_waits_and_a_full_lane_drops_and_counts() {
        let (client, server) = silent_client().await;
        let dropped = Counter::default();
        let events = Events::new(client, "gpu-vk", "node-a", dropped.clone());
        // Pods whose events share lane 0, one event each (within every pod's budget).
        let total = LANE_DEPTH + 10;
        let uids: Vec<String> = (0..)
            .map(|i| format!("u-{i}"))
            .filter(|u| lane(u) == 0)
            .take(total)
            .collect();
        let t0 = Instant::now();
        for u in &uids {
            events.publish(&pod(u), EventType::Warning, "R", "Test", "note");
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "publish waited");
        tokio::time::sleep(Duration::from_millis(100)).await;
        // One event may be in flight (taken off the lane), the lane holds LANE_DEPTH.
        let d = dropped.get() as usize;
        assert!(
            (total - LANE_DEPTH - 1..=total - LANE_DEPTH).contains(&d),
            "dropped {d} of {total}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn a_pod_past_its_budget_gets_no_more_events() {
        let (client, server) = silent_client().await;
        let dropped = Counter::default();
        let events = Events::new(client, "gpu-vk", "node-a", dropped.clone());
        for i in 0..40 {
            // Distinct reasons: each would be a new Event object.
            events.publish(
                &pod("u-1"),
                EventType::Warning,
                &format!("R{i}"),
                "Test",
                "note",
            );
        }
        assert_eq!(dropped.get() as f64, 40.0 - budget::POD_BURST);
        // Another pod is not held by the first one's budget.
        events.publish(&pod("u-2"), EventType::Warning, "R", "Test", "note");
        assert_eq!(dropped.get() as f64, 40.0 - budget::POD_BURST);
        server.abort();
    }

    #[test]
    fn expired_entries_are_dropped_when_new_ones_arrive() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        m.remember(key("old", "Created"), "ns".into(), "p.0".into(), t0);
        m.remember(
            key("new", "Created"),
            "ns".into(),
            "p.1".into(),
            t0 + SERIES_WINDOW,
        );
        assert_eq!(m.seen.len(), 1);
        assert_eq!(m.order.len(), 1);
    }
}
