//! A provider's health, as a circuit breaker fed by the outcome and latency of every call the
//! [`super::layer`] makes: after `failures` consecutive failures it opens and dispatch sends
//! the provider no new pods; once `open` has passed it is half-open, and the next call (the
//! observer's list comes every poll interval, a create may come sooner) closes it on success
//! or opens it again on failure.
//!
//! A failure is an answer that says the provider is not working: a transient error (5xx, a
//! timeout, a connection refused, a 429 the adapter could not wait out: a provider refusing
//! our calls cannot take new pods now), an auth error, or any call slower than `slow`. An
//! answer that says no to the request (capacity, invalid, not found, unsupported) shows a
//! working provider and counts as a success.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ProviderError;

/// When the breaker opens and for how long (the `dispatch.breaker` block of the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerRules {
    pub failures: u32,
    pub open: Duration,
    pub slow: Duration,
}

impl Default for BreakerRules {
    fn default() -> Self {
        Self {
            failures: 5,
            open: Duration::from_secs(30),
            slow: Duration::from_secs(20),
        }
    }
}

/// What the breaker says of its provider now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Open: no new pods until `retry_in` has passed (then half-open).
    Unhealthy {
        reason: String,
        retry_in: Duration,
    },
    /// Past the open period, waiting for the next call to tell.
    Probing {
        reason: String,
    },
}

impl Health {
    /// Whether new pods may be sent to the provider.
    pub fn admits(&self) -> bool {
        !matches!(self, Self::Unhealthy { .. })
    }
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant, reason: String },
}

/// One provider's circuit breaker.
#[derive(Debug)]
pub struct Breaker {
    rules: BreakerRules,
    state: Mutex<State>,
}

impl Breaker {
    pub fn new(rules: BreakerRules) -> Self {
        Self {
            rules,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Feeds the outcome of one call that took `took`.
    pub fn record<T>(&self, result: &Result<T, ProviderError>, took: Duration, now: Instant) {
        let failure = match result {
            _ if took >= self.rules.slow => Some(format!(
                "a call took {:.1}s (slow-call limit {}s)",
                took.as_secs_f64(),
                self.rules.slow.as_secs()
            )),
            Err(
                e @ (ProviderError::Transient { .. }
                | ProviderError::Auth { .. }
                | ProviderError::Malformed { .. }),
            ) => Some(e.to_string()),
            _ => None,
        };
        let mut s = self.lock();
        match (failure, &mut *s) {
            (None, _) => *s = State::Closed { failures: 0 },
            (Some(reason), State::Closed { failures }) => {
                *failures += 1;
                if *failures >= self.rules.failures.max(1) {
                    *s = State::Open {
                        until: now + self.rules.open,
                        reason: format!("{} consecutive failed calls, last: {reason}", *failures),
                    };
                }
            }
            // A failure while open or half-open: open (again) for a full period.
            (Some(reason), State::Open { .. }) => {
                *s = State::Open {
                    until: now + self.rules.open,
                    reason: format!("still failing: {reason}"),
                };
            }
        }
    }

    pub fn health(&self, now: Instant) -> Health {
        match &*self.lock() {
            State::Closed { .. } => Health::Healthy,
            State::Open { until, reason } if now < *until => Health::Unhealthy {
                reason: reason.clone(),
                retry_in: *until - now,
            },
            State::Open { reason, .. } => Health::Probing {
                reason: reason.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BreakerRules {
        BreakerRules {
            failures: 3,
            open: Duration::from_secs(10),
            slow: Duration::from_secs(5),
        }
    }

    const FAST: Duration = Duration::from_millis(20);

    fn down() -> Result<(), ProviderError> {
        Err(ProviderError::transient("503"))
    }

    #[test]
    fn opens_after_consecutive_failures_probes_after_the_period_and_closes_on_success() {
        let b = Breaker::new(rules());
        let t0 = Instant::now();
        b.record(&down(), FAST, t0);
        b.record(&down(), FAST, t0);
        assert_eq!(b.health(t0), Health::Healthy, "two of three");
        b.record(&down(), FAST, t0);
        let h = b.health(t0 + Duration::from_secs(1));
        assert!(
            matches!(&h, Health::Unhealthy { reason, retry_in } if reason.contains("3 consecutive") && *retry_in == Duration::from_secs(9)),
            "{h:?}"
        );
        assert!(!h.admits());
        let later = t0 + Duration::from_secs(11);
        assert!(matches!(b.health(later), Health::Probing { .. }));
        assert!(b.health(later).admits());
        // The probe fails: a whole new period.
        b.record(&down(), FAST, later);
        assert!(!b.health(later + Duration::from_secs(9)).admits());
        let probe = later + Duration::from_secs(10);
        b.record(&Ok(()), FAST, probe);
        assert_eq!(b.health(probe), Health::Healthy);
    }

    #[test]
    fn a_success_in_between_resets_the_count_and_refusals_are_not_failures() {
        let b = Breaker::new(rules());
        let t = Instant::now();
        for _ in 0..5 {
            b.record(&down(), FAST, t);
            b.record(&down(), FAST, t);
            b.record::<()>(
                &Err(ProviderError::Capacity {
                    message: "no GPUs".into(),
                }),
                FAST,
                t,
            );
        }
        assert_eq!(b.health(t), Health::Healthy);
        b.record::<()>(
            &Err(ProviderError::Auth {
                message: "401".into(),
            }),
            FAST,
            t,
        );
        b.record(&down(), FAST, t);
        b.record(&down(), FAST, t);
        assert!(!b.health(t).admits(), "auth errors count");
    }

    #[test]
    fn slow_answers_count_as_failures() {
        let b = Breaker::new(rules());
        let t = Instant::now();
        for _ in 0..3 {
            b.record(&Ok(()), Duration::from_secs(6), t);
        }
        assert!(
            matches!(b.health(t), Health::Unhealthy { reason, .. } if reason.contains("slow-call"))
        );
    }
}
