//! Kubernetes Events about pods (`events.k8s.io/v1`), with repeats folded into a series.
//!
//! Like the kubelet, the VK remembers a bounded number of recent events (the kubelet's LRU
//! holds 4,096) so that a repeat within [`SERIES_WINDOW`] bumps the first event's series count
//! instead of creating another object. Bounded on purpose: kube-runtime's `Recorder` keeps
//! every event of the last six minutes and scans them all on each publish, which at 10,000
//! pods cost ~23 MiB and serialized every publish behind an O(n) sweep (`make bench`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

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

/// Publishes events about pods as `reporting_controller` / `reporting_instance`.
pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    memory: Mutex<Memory>,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            memory: Mutex::default(),
        }
    }

    /// Records one event about `regarding` (which must carry namespace, name and UID).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key = Key {
            uid: regarding.uid.clone().unwrap_or_default(),
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
        };
        let now = Instant::now();
        let plan = self.lock().plan(&key, now);
        let stamp = Timestamp::now();
        if let Plan::Bump {
            namespace,
            name,
            count,
        } = plan
        {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(stamp) },
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // The earlier event expired or was deleted: start a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => self.lock().forget(&key),
                Err(e) => return Err(e),
            }
        }
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
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await?;
        self.lock().remember(key, namespace, name, now);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
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
