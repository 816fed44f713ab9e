//! Offer search answers shared by the creates that search for the same thing: one search at a
//! time per search body, and its answer reused while it is fresh.
//!
//! Vast allows 10 offer searches a minute per key (`search_offers.yaml`, `x-rate-limit`; see
//! [`super::pace`]) and rents one offer per create, so a burst of creates that each searched
//! would be bounded by searches (6 s a pod) rather than rents (4.5 s). Concurrent creates
//! already take distinct offers of one answer through [`super::claims`], so a create reuses an
//! answer younger than [`FRESH`] of a search with the same body (the `limit` aside), and waits
//! for a search of that body already in flight instead of sending its own. A create that finds
//! every offer of a shared answer claimed asks for an answer newer than that one (see
//! [`super::rent`]). Offers rented by someone else since the search are found gone at the rent
//! (`no_such_ask`) and the next offer is tried, as with an answer of one's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::wire::{Offer, OfferSearch};

/// How long an offer search answer is reused by other creates.
pub const FRESH: Duration = Duration::from_secs(5);

/// One search's answer.
#[derive(Debug)]
pub(super) struct Answer {
    /// When the search was answered.
    pub(super) at: Instant,
    pub(super) offers: Vec<Offer>,
}

/// The latest answer per search body; each slot's lock is held while its search is in flight.
#[derive(Debug, Default)]
pub(super) struct Searches {
    slots: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Answer>>>>;

/// An answer and whether this create searched for it or reused another's.
pub(super) struct Found {
    pub(super) answer: Arc<Answer>,
    pub(super) shared: bool,
}

impl Searches {
    /// The answer to `search`: a fresh one (answered after `newer_than`, when given) that
    /// another create fetched, else the one `fetch` gets (kept for the creates that follow).
    pub(super) async fn answer<F, Fut, E>(
        &self,
        search: &OfferSearch,
        newer_than: Option<Instant>,
        fetch: F,
    ) -> Result<Found, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Offer>, E>>,
    {
        let slot = self.slot(search);
        let mut latest = slot.lock().await;
        if let Some(answer) = latest
            .as_ref()
            .filter(|a| reusable(a.at, Instant::now(), newer_than))
        {
            return Ok(Found {
                answer: Arc::clone(answer),
                shared: true,
            });
        }
        let answer = Arc::new(Answer {
            offers: fetch().await?,
            at: Instant::now(),
        });
        *latest = Some(Arc::clone(&answer));
        Ok(Found {
            answer,
            shared: false,
        })
    }

    /// The slot of `search`'s body; forgets the slots no create is using whose answer is stale.
    fn slot(&self, search: &OfferSearch) -> Slot {
        let key = key(search);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.retain(|k, slot| {
            k == &key
                || Arc::strong_count(slot) > 1
                || slot.try_lock().is_ok_and(|a| {
                    a.as_ref()
                        .is_some_and(|a| reusable(a.at, Instant::now(), None))
                })
        });
        Arc::clone(slots.entry(key).or_default())
    }
}

/// True when an answer of `at` may be reused at `now` by a create that wants one newer than
/// `newer_than`.
fn reusable(at: Instant, now: Instant, newer_than: Option<Instant>) -> bool {
    now.saturating_duration_since(at) < FRESH && newer_than.is_none_or(|t| at > t)
}

/// The search body without its `limit`, which grows with the creates renting meanwhile.
fn key(search: &OfferSearch) -> String {
    let mut body = serde_json::to_value(search).unwrap_or_default();
    if let Some(o) = body.as_object_mut() {
        o.remove("limit");
    }
    body.to_string()
}

#[cfg(test)]
mod tests {
    use super::super::market;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn offers(ids: &[u64]) -> Vec<Offer> {
        ids.iter()
            .map(|id| serde_json::from_value(serde_json::json!({ "id": id })).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn concurrent_searches_of_one_body_are_one_search_and_a_newer_answer_is_searched_again() {
        let searches = Searches::default();
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, ()>(offers(&[1, 2]))
        };
        let mut wide = market::search(0.9);
        wide.limit = 7;
        let narrow = market::search(0.9);
        let (a, b) = tokio::join!(
            searches.answer(&narrow, None, fetch),
            searches.answer(&wide, None, fetch)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the limit is not part of the body"
        );
        assert_ne!(
            a.shared, b.shared,
            "one searched, the other waited for its answer"
        );
        assert!(Arc::ptr_eq(&a.answer, &b.answer));

        // Asked for an answer newer than the one it had: a new search.
        let c = searches
            .answer(&narrow, Some(a.answer.at), fetch)
            .await
            .unwrap();
        assert!(!c.shared);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(c.answer.at > a.answer.at);

        // Another body is searched on its own.
        let mut other = market::search(0.9);
        other.kind = "bid";
        let d = searches.answer(&other, None, fetch).await.unwrap();
        assert!(!d.shared);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_search_is_not_kept_and_a_stale_answer_is_not_reused() {
        let searches = Searches::default();
        let failed = searches
            .answer(&market::search(0.9), None, || async {
                Err::<Vec<Offer>, _>("down")
            })
            .await;
        assert_eq!(failed.err(), Some("down"));
        let found = searches
            .answer(&market::search(0.9), None, || async {
                Ok::<_, ()>(offers(&[3]))
            })
            .await
            .unwrap();
        assert!(!found.shared, "nothing was kept from the failed search");
        let at = Instant::now();
        assert!(reusable(at, at + FRESH - Duration::from_millis(1), None));
        assert!(
            !reusable(at, at + FRESH, None),
            "an answer is reused while it is fresh"
        );
        assert!(
            !reusable(at, at, Some(at)),
            "only an answer newer than asked"
        );
    }
}
