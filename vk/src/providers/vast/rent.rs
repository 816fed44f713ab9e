//! Offer search and the rent loop: the cheapest matching offers within the price bounds, tried
//! in order under this process's claims (see the module docs of [`super`]).

use std::time::Instant;

use reqwest::Method;
use tracing::{debug, info};

use super::claims::{Claim, OfferClaim};
use super::pace::Endpoint;
use super::plan::Plan;
use super::searches::Found;
use super::wire::{CreateInstanceAnswer, Offer, OfferList, OfferSearch};
use super::{CONTENDED_RETRY, MAX_SEARCH_LIMIT, Vast};
use crate::provider::{ProviderError, Workload};

/// How one search-and-rent attempt ended, when it did not fail.
pub(super) enum Rent {
    Done,
    /// Every matching offer was held by other creates: the error to report if it persists.
    Contended(ProviderError),
}

impl Vast {
    pub(super) async fn search_offers(
        &self,
        search: &OfferSearch,
    ) -> Result<Vec<Offer>, ProviderError> {
        let body = serde_json::to_value(search).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the search: {e}"),
        })?;
        let url = self.api.url(&["api", "v0", "bundles"], true);
        let resp = self
            .call(Endpoint::Search, Method::POST, url, Some(&body))
            .await?;
        if !resp.is_success() {
            return Err(self.error_from(&resp));
        }
        let found: OfferList = resp.json("offer search")?;
        let items = match found.offers {
            serde_json::Value::Array(items) => items,
            one @ serde_json::Value::Object(_) => vec![one],
            serde_json::Value::Null => Vec::new(),
            _ => {
                return Err(ProviderError::transient(
                    "malformed offer search response: offers is not a list",
                ));
            }
        };
        Ok(items
            .into_iter()
            .filter_map(|v| serde_json::from_value::<Offer>(v).ok())
            .filter(|o| o.id.is_some())
            .collect())
    }
    /// The answer to `search` that creates share (see [`super::searches`]): one newer than
    /// `newer_than` when given.
    async fn shared_search(
        &self,
        search: &OfferSearch,
        newer_than: Option<Instant>,
    ) -> Result<Found, ProviderError> {
        self.searches
            .answer(search, newer_than, || self.search_offers(search))
            .await
    }

    /// True when another create of this process holds `offer` (renting it, or rented it or
    /// found it gone a moment ago).
    fn claimed(&self, offer: &Offer) -> bool {
        offer
            .id
            .is_none_or(|id| self.claims.held(id, Instant::now()).is_some())
    }

    /// One search and rent attempt.
    pub(super) async fn rent(&self, w: &Workload, plan: &mut Plan) -> Result<Rent, ProviderError> {
        // From here until the rent ends, other creates widen their search for this one.
        let (_renter, others) = self.claims.enter(Instant::now());
        plan.search.limit = self
            .cfg
            .search_limit
            .saturating_add(u32::try_from(others).unwrap_or(u32::MAX))
            .min(MAX_SEARCH_LIMIT.max(self.cfg.search_limit));
        let mut found = self.shared_search(&plan.search, None).await?;
        if found.shared && affordable(&found.answer.offers, plan).all(|o| self.claimed(o)) {
            // Another create's answer, used up by the creates that shared it: a new one.
            found = self
                .shared_search(&plan.search, Some(found.answer.at))
                .await?;
        }
        let mut offers: Vec<&Offer> = affordable(&found.answer.offers, plan).collect();
        if offers.is_empty() {
            return Err(no_offer(plan));
        }
        offers.sort_by(|a, b| {
            let pa = a.dph_total.unwrap_or(f64::INFINITY);
            let pb = b.dph_total.unwrap_or(f64::INFINITY);
            pa.total_cmp(&pb)
        });

        let (mut tried, mut gone, mut renting_elsewhere) = (0usize, 0usize, 0usize);
        for offer in offers {
            if tried >= self.cfg.max_offers_tried {
                break;
            }
            let Some(offer_id) = offer.id else { continue };
            let claim = match self.claims.claim(offer_id, Instant::now()) {
                Ok(claim) => claim,
                Err(held) => {
                    if held == Claim::Renting {
                        renting_elsewhere += 1;
                    }
                    continue;
                }
            };
            tried += 1;
            match self.rent_offer(w, plan, offer, offer_id, claim).await? {
                Offered::Rented => return Ok(Rent::Done),
                Offered::Gone => gone += 1,
            }
        }
        if tried == 0 || renting_elsewhere > 0 {
            // Offers match, but other creates of this process hold them or just rented them
            // (the search predates the rent): a new search shortly finds what is left.
            return Ok(Rent::Contended(contended(renting_elsewhere, gone)));
        }
        Err(ProviderError::Capacity {
            message: format!("all {gone} Vast offers tried were gone before they could be rented"),
        })
    }

    /// Rents `offer` (claimed by `claim`): rented, gone (the next one may be tried), or the
    /// error that ends this attempt.
    async fn rent_offer(
        &self,
        w: &Workload,
        plan: &Plan,
        offer: &Offer,
        offer_id: u64,
        claim: OfferClaim<'_>,
    ) -> Result<Offered, ProviderError> {
        // From here the rent may happen even if the call fails: a retry looks it up.
        self.note_rented(&w.id);
        let mut request = plan.request.clone();
        request.price = match plan.bid {
            Some(explicit) => explicit.or(offer.min_bid).or(offer.dph_total),
            None => None,
        };
        let body = serde_json::to_value(&request).map_err(|e| ProviderError::Invalid {
            message: format!("cannot encode the request: {e}"),
        })?;
        let url = self
            .api
            .url(&["api", "v0", "asks", &offer_id.to_string()], true);
        let resp = self
            .call(Endpoint::Rent, Method::PUT, url, Some(&body))
            .await?;
        let answer: Option<CreateInstanceAnswer> = serde_json::from_slice(&resp.body).ok();
        if resp.is_success() && answer.as_ref().is_some_and(|a| a.success != Some(false)) {
            claim.keep(Instant::now());
            info!(provider = %self.name, workload = %w.id, offer = offer_id,
                  instance = ?answer.and_then(|a| a.new_contract), "rented Vast instance");
            return Ok(Offered::Rented);
        }
        let code = answer
            .as_ref()
            .and_then(|a| a.error.clone())
            .unwrap_or_default();
        let offer_gone = matches!(resp.status.as_u16(), 404 | 410) || code == "no_such_ask";
        let err = self.error_from(&resp);
        if offer_gone && !matches!(err, ProviderError::Auth { .. }) {
            debug!(provider = %self.name, workload = %w.id, offer = offer_id, "offer is gone; trying the next one");
            claim.keep(Instant::now());
            return Ok(Offered::Gone);
        }
        if resp.is_success() && answer.is_none() {
            // 200 with an unreadable body: the rent may have happened; let the retry's
            // label lookup find out.
            claim.keep(Instant::now());
            return Err(ProviderError::transient(
                "Vast rent answered 2xx with an unreadable body",
            ));
        }
        Err(err)
    }
}

/// How renting one offer ended, when it did not fail.
enum Offered {
    Rented,
    /// Rented by someone else or withdrawn since the search.
    Gone,
}

/// The offers within the plan's price bounds (the bid's, for an interruptible rent).
fn affordable<'a>(offers: &'a [Offer], plan: &'a Plan) -> impl Iterator<Item = &'a Offer> {
    offers.iter().filter(|o| {
        let price = if plan.bid.is_some() {
            o.min_bid.or(o.dph_total)
        } else {
            o.dph_total
        };
        let within_max = match (plan.max_price, price) {
            (Some(max), Some(p)) => p <= max,
            _ => true,
        };
        let bid_ok = match (plan.bid, o.min_bid) {
            (Some(Some(bid)), Some(min)) => bid >= min,
            _ => true,
        };
        within_max && bid_ok
    })
}

/// The error when no offer matches the plan: what was searched for, at what price.
fn no_offer(plan: &Plan) -> ProviderError {
    ProviderError::Capacity {
        message: format!(
            "no Vast offer matches {} x {} ({}){}",
            plan.search.num_gpus.eq.unwrap_or_default(),
            plan.search
                .gpu_name
                .as_ref()
                .and_then(|f| f.one_of.as_ref())
                .map_or("any GPU".to_owned(), |v| v.join("|")),
            plan.search.kind,
            plan.max_price
                .map_or(String::new(), |p| format!(" at or below ${p}/h")),
        ),
    }
}

/// The error when the matching offers are held by other creates of this process.
fn contended(renting_elsewhere: usize, gone: usize) -> ProviderError {
    ProviderError::Transient {
        message: format!(
            "the matching Vast offers are taken by other creates ({renting_elsewhere} \
             being rented){}",
            if gone > 0 {
                format!("; the {gone} tried were gone")
            } else {
                String::new()
            }
        ),
        retry_after: Some(CONTENDED_RETRY),
    }
}
