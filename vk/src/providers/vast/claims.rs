//! The offers this process's creates are renting, or rented (or found gone) a moment ago, so
//! that concurrent creates spread over the offers instead of racing for the cheapest one; and
//! the end of each rent, which creates that found every offer claimed wait for.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::CLAIM_TTL;

/// Offers claimed by this adapter's creates (see the module docs), and how many creates are
/// between their offer search and the end of their rent.
#[derive(Debug, Default)]
pub(super) struct Claims {
    state: Mutex<ClaimState>,
    /// Woken when a rent ends (its claim kept or released).
    ended: Notify,
}

#[derive(Debug, Default)]
struct ClaimState {
    offers: HashMap<u64, Claim>,
    renters: usize,
    /// Rents ended so far.
    ends: u64,
}

impl ClaimState {
    /// Who holds `offer` at `now` (an expired `Taken` holds nothing).
    fn holder(&self, offer: u64, now: Instant) -> Option<Claim> {
        match self.offers.get(&offer) {
            Some(Claim::Taken { until }) if *until <= now => None,
            held => held.copied(),
        }
    }
}

/// Why an offer is claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// A create of this process is renting it.
    Renting,
    /// Rented, or found gone: skipped until `until`.
    Taken { until: Instant },
}

impl Claims {
    fn lock(&self) -> MutexGuard<'_, ClaimState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a create about to search and rent (until the guard drops); returns it with
    /// the number of other creates doing so. Forgets expired claims.
    pub(super) fn enter(&self, now: Instant) -> (Renter<'_>, usize) {
        let mut state = self.lock();
        state.offers.retain(|_, c| match c {
            Claim::Renting => true,
            Claim::Taken { until } => *until > now,
        });
        let others = state.renters;
        state.renters += 1;
        (Renter { claims: self }, others)
    }

    /// Rents ended so far: what [`Claims::rent_ended_since`] compares against.
    pub(super) fn ends(&self) -> u64 {
        self.lock().ends
    }

    /// Waits up to `limit` for a rent to end after `ends` (a value of [`Claims::ends`]);
    /// true when one did.
    pub(super) async fn rent_ended_since(&self, ends: u64, limit: Duration) -> bool {
        let notified = self.ended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.ends() != ends {
            return true;
        }
        tokio::time::timeout(limit, notified).await.is_ok()
    }

    /// Counts a rent's end and wakes the creates waiting for one.
    fn end_rent(&self, state: &mut ClaimState) {
        state.ends += 1;
        self.ended.notify_waiters();
    }

    /// Who holds `offer`, if anyone.
    pub(super) fn held(&self, offer: u64, now: Instant) -> Option<Claim> {
        self.lock().holder(offer, now)
    }

    /// Claims `offer` for a rent, or says who holds it.
    pub(super) fn claim(&self, offer: u64, now: Instant) -> Result<OfferClaim<'_>, Claim> {
        let mut state = self.lock();
        if let Some(held) = state.holder(offer, now) {
            return Err(held);
        }
        state.offers.insert(offer, Claim::Renting);
        Ok(OfferClaim {
            claims: self,
            offer,
            kept: false,
        })
    }
}

/// A create between its offer search and the end of its rent.
pub(super) struct Renter<'a> {
    claims: &'a Claims,
}

impl Drop for Renter<'_> {
    fn drop(&mut self) {
        let mut state = self.claims.lock();
        state.renters = state.renters.saturating_sub(1);
    }
}

/// The claim of a rent in flight: released when dropped unless kept.
pub(super) struct OfferClaim<'a> {
    claims: &'a Claims,
    offer: u64,
    kept: bool,
}

impl OfferClaim<'_> {
    /// The offer was rented or is gone: other creates skip it for [`CLAIM_TTL`].
    pub(super) fn keep(mut self, now: Instant) {
        self.kept = true;
        let mut state = self.claims.lock();
        state.offers.insert(
            self.offer,
            Claim::Taken {
                until: now + CLAIM_TTL,
            },
        );
        self.claims.end_rent(&mut state);
    }
}

impl Drop for OfferClaim<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut state = self.claims.lock();
        if state.offers.get(&self.offer) == Some(&Claim::Renting) {
            state.offers.remove(&self.offer);
        }
        self.claims.end_rent(&mut state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    #[test]
    fn claims_are_exclusive_released_on_drop_and_expire() {
        let claims = Claims::default();
        let t0 = Instant::now();
        let first = claims.claim(1, t0).unwrap();
        assert_eq!(claims.claim(1, t0).err(), Some(Claim::Renting));
        assert_eq!(claims.held(1, t0), Some(Claim::Renting));
        assert_eq!(claims.held(2, t0), None);
        let other = claims.claim(2, t0).unwrap();
        // A rent that fails (or is cancelled) frees the offer.
        drop(other);
        let again = claims.claim(2, t0).unwrap();
        // Rented (or gone): skipped for the TTL, then claimable again.
        first.keep(t0);
        assert!(matches!(claims.claim(1, t0), Err(Claim::Taken { .. })));
        let almost = t0 + CLAIM_TTL - Duration::from_millis(1);
        assert!(matches!(claims.claim(1, almost), Err(Claim::Taken { .. })));
        let later = t0 + CLAIM_TTL;
        assert!(matches!(claims.held(1, almost), Some(Claim::Taken { .. })));
        assert_eq!(claims.held(1, later), None);
        assert!(claims.claim(1, later).is_ok(), "expired claims are free");
        // Expired claims are forgotten; rents in flight are not.
        again.keep(t0);
        drop(claims.claim(3, t0).unwrap());
        let held = claims.claim(4, t0).unwrap();
        let (renter, others) = claims.enter(t0 + CLAIM_TTL * 2);
        assert_eq!(others, 0);
        assert_eq!(
            claims.lock().offers.keys().copied().collect::<Vec<_>>(),
            [4],
            "only the rent in flight is left"
        );
        drop(held);
        assert!(claims.lock().offers.is_empty());
        // Creates between search and rent are counted while their guard lives.
        let (second, others) = claims.enter(t0);
        assert_eq!(others, 1);
        drop(renter);
        drop(second);
        assert_eq!(claims.enter(t0).1, 0);
    }
}
