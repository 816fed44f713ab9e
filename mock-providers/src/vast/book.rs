//! Offer ids, log snapshots and the instance list's label counts, kept between calls.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

use rand::Rng;

use super::MAX_SNAPSHOTS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct OfferKey {
    pub(super) machine_id: u64,
    pub(super) epoch: u64,
    pub(super) num_gpus: u32,
}

/// Offer ids and log snapshots.
#[derive(Debug)]
pub struct Book {
    pub(super) offers: HashMap<u64, OfferKey>,
    pub(super) by_key: HashMap<OfferKey, u64>,
    next_offer_id: u64,
    pub(super) snapshots: HashMap<String, String>,
    snapshot_order: VecDeque<String>,
    /// `label_counts` of the unfiltered instance list.
    pub(super) label_counts: LabelCounts,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            offers: HashMap::new(),
            by_key: HashMap::new(),
            next_offer_id: 20_000_001,
            snapshots: HashMap::new(),
            snapshot_order: VecDeque::new(),
            label_counts: LabelCounts::default(),
        }
    }
}

impl Book {
    /// Forget all offer ids (after an inventory change).
    pub fn clear_offers(&mut self) {
        self.offers.clear();
        self.by_key.clear();
    }

    pub(super) fn offer_id(&mut self, key: OfferKey) -> u64 {
        if let Some(id) = self.by_key.get(&key) {
            return *id;
        }
        let id = self.next_offer_id;
        self.next_offer_id += 1;
        self.by_key.insert(key, id);
        self.offers.insert(id, key);
        id
    }

    pub(super) fn store_snapshot(&mut self, text: String) -> String {
        let token: String = {
            let mut rng = rand::rng();
            (0..32)
                .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
                .collect()
        };
        self.snapshots.insert(token.clone(), text);
        self.snapshot_order.push_back(token.clone());
        while self.snapshot_order.len() > MAX_SNAPSHOTS {
            if let Some(old) = self.snapshot_order.pop_front() {
                self.snapshots.remove(&old);
            }
        }
        token
    }
}

/// `label_counts` of the unfiltered instance list, kept up to date from one call to the next:
/// every page of a 10,000-instance listing (400 calls) reports the labels of all instances.
#[derive(Debug, Default)]
pub(super) struct LabelCounts {
    /// `(seq, label)` of every instance counted, in ascending `seq` order.
    rows: Vec<(u64, String)>,
    counts: BTreeMap<String, u64>,
    /// `counts` as a JSON object.
    json: String,
}

impl LabelCounts {
    /// The counts of `current` (`(seq, label)` in ascending `seq` order) as a JSON object.
    pub(super) fn sync(&mut self, current: &[(u64, &str)]) -> Cow<'_, str> {
        if !current.windows(2).all(|w| w[0].0 < w[1].0) {
            // Not in seq order (never, from a BTreeMap): count from scratch, keep nothing.
            *self = Self::default();
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for (_, name) in current {
                *counts.entry(name).or_default() += 1;
            }
            return Cow::Owned(serde_json::to_string(&counts).unwrap_or_else(|_| "{}".to_owned()));
        }
        let unchanged = self.rows.len() == current.len()
            && self
                .rows
                .iter()
                .zip(current)
                .all(|((seq, name), (s, n))| seq == s && name == n);
        if unchanged && !self.json.is_empty() {
            return Cow::Borrowed(&self.json);
        }
        // Merge the two seq-ordered lists, counting what was removed, added or relabelled.
        let mut old = std::mem::take(&mut self.rows).into_iter().peekable();
        let mut rows = Vec::with_capacity(current.len());
        for &(seq, name) in current {
            while let Some((_, gone)) = old.next_if(|(s, _)| *s < seq) {
                self.remove(&gone);
            }
            match old.next_if(|(s, _)| *s == seq) {
                Some((_, same)) if same == name => rows.push((seq, same)),
                other => {
                    if let Some((_, relabelled)) = other {
                        self.remove(&relabelled);
                    }
                    self.add(name);
                    rows.push((seq, name.to_owned()));
                }
            }
        }
        for (_, gone) in old {
            self.remove(&gone);
        }
        self.rows = rows;
        self.json = serde_json::to_string(&self.counts).unwrap_or_else(|_| "{}".to_owned());
        Cow::Borrowed(&self.json)
    }

    fn add(&mut self, name: &str) {
        match self.counts.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(name.to_owned(), 1);
            }
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(n) = self.counts.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(name);
            }
        }
    }
}

/// Forget the ids of offers whose machine changed since they were listed.
pub(super) fn drop_stale_offers(inner: &mut crate::engine::Inner) {
    let current: HashMap<u64, u64> = inner
        .inventory
        .types()
        .iter()
        .flat_map(|t| t.machines.iter().map(|m| (m.id, m.epoch)))
        .collect();
    let book = &mut inner.vast;
    book.offers.retain(|_, k| {
        let live = current.get(&k.machine_id) == Some(&k.epoch);
        if !live {
            book.by_key.remove(k);
        }
        live
    });
}
