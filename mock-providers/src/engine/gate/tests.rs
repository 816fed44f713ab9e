//! Tests of the gate: counters, faults, authentication, quota windows and endpoint limits.

use super::*;
use axum::http::{HeaderMap, header};

fn spec(route: &str) -> FaultSpec {
    FaultSpec {
        route: route.into(),
        fail_next: None,
        status: None,
        body: None,
        retry_after_s: None,
        latency_ms: None,
        error_rate: None,
    }
}

#[test]
fn hidden_workloads_are_left_out_of_exactly_their_number_of_lists() {
    let mut g = GateState::default();
    g.hide(HideSpec {
        ids: Some(vec!["a".into()]),
        lists: 2,
    });
    g.hide(HideSpec {
        ids: None,
        lists: 1,
    });
    let first = g.list_mask();
    assert!(first.hides("a") && first.hides("b"));
    let second = g.list_mask();
    assert!(second.hides("a") && !second.hides("b"));
    let third = g.list_mask();
    assert!(!third.hides("a") && !third.hides("b"));
}

#[test]
fn fail_next_counts_down() {
    let mut g = GateState::default();
    g.add_fault(FaultSpec {
        fail_next: Some(2),
        status: Some(500),
        ..spec("create")
    })
    .unwrap();
    assert!(g.observe(RouteKind::List).1.is_none());
    assert!(g.observe(RouteKind::Create).1.is_some());
    assert!(g.observe(RouteKind::Create).1.is_some());
    assert!(g.observe(RouteKind::Create).1.is_none());
    assert_eq!(g.counters()["create"], 3);
    assert_eq!(g.counters()["total"], 4);
}

#[test]
fn status_only_fails_always_and_latency_alone_never_fails() {
    let mut g = GateState::default();
    g.add_fault(FaultSpec {
        latency_ms: Some(5),
        ..spec("any")
    })
    .unwrap();
    let (lat, d) = g.observe(RouteKind::Get);
    assert_eq!(lat, Duration::from_millis(5));
    assert!(d.is_none());
    g.add_fault(FaultSpec {
        status: Some(502),
        ..spec("get")
    })
    .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            g.observe(RouteKind::Get).1,
            Some(Denied::Fault(f)) if f.status == StatusCode::BAD_GATEWAY
        ));
    }
}

#[test]
fn rejects_bad_specs() {
    let mut g = GateState::default();
    assert!(g.add_fault(spec("nope")).is_err());
    assert!(
        g.add_fault(FaultSpec {
            status: Some(42),
            ..spec("any")
        })
        .is_err()
    );
    assert!(
        g.add_fault(FaultSpec {
            error_rate: Some(1.5),
            ..spec("any")
        })
        .is_err()
    );
}

#[test]
fn rate_window() {
    let mut g = GateState::default();
    let now = Instant::now();
    let minute = RateWindows {
        per_minute: Some(2),
        ..RateWindows::default()
    };
    let left = |r: Option<RateInfo>| r.unwrap().windows[0].remaining;
    assert_eq!(left(g.take_rate(&minute, now).unwrap()), 1);
    assert_eq!(left(g.take_rate(&minute, now).unwrap()), 0);
    assert!(matches!(
        g.take_rate(&minute, now),
        Err(Denied::RateLimited {
            retry_after_s: 60,
            window: "minute",
            ..
        })
    ));
    let later = now + Duration::from_secs(61);
    assert!(g.take_rate(&minute, later).is_ok());
    assert_eq!(g.take_rate(&RateWindows::default(), now), Ok(None));
    assert_eq!(g.counters()["rate_limited"], 1);
}

#[test]
fn the_hour_and_day_windows_outlast_the_minute() {
    let mut g = GateState::default();
    let start = Instant::now();
    let w = RateWindows {
        per_minute: Some(3),
        per_hour: Some(5),
        per_day: Some(7),
    };
    // Minute one: 3 calls, the fourth is refused by the minute window.
    for _ in 0..3 {
        g.take_rate(&w, start).unwrap();
    }
    let Err(Denied::RateLimited {
        window, windows, ..
    }) = g.take_rate(&w, start)
    else {
        panic!("the minute window should be exceeded");
    };
    assert_eq!(window, "minute");
    let remaining: Vec<u32> = windows.iter().map(|s| s.remaining).collect();
    assert_eq!(remaining, [0, 2, 4], "nothing taken by the refused call");
    // Minute two: 2 more calls use the hour up; the refusal names the hour and waits
    // for its reset, not the minute's.
    let m2 = start + Duration::from_secs(61);
    let ok = g.take_rate(&w, m2).unwrap().unwrap();
    assert_eq!(ok.windows[0].remaining, 2);
    g.take_rate(&w, m2).unwrap();
    let Err(Denied::RateLimited {
        window,
        retry_after_s,
        ..
    }) = g.take_rate(&w, m2)
    else {
        panic!("the hour window should be exceeded");
    };
    assert_eq!(window, "hour");
    assert_eq!(retry_after_s, 3_600 - 61);
    // Hour two: 2 more calls use the day up.
    let h2 = start + Duration::from_secs(3_601);
    g.take_rate(&w, h2).unwrap();
    g.take_rate(&w, h2).unwrap();
    assert!(matches!(
        g.take_rate(&w, h2),
        Err(Denied::RateLimited {
            window: "day",
            retry_after_s: 82_799,
            ..
        })
    ));
    // The next day everything is back.
    let d2 = start + Duration::from_secs(86_401);
    let fresh = g.take_rate(&w, d2).unwrap().unwrap();
    let remaining: Vec<u32> = fresh.windows.iter().map(|s| s.remaining).collect();
    assert_eq!(remaining, [2, 4, 6]);
}

#[test]
fn endpoint_intervals_and_bursts() {
    let mut g = GateState::default();
    let t0 = Instant::now();
    let rent = EndpointLimit::Interval(Duration::from_millis(4_500));
    assert!(g.take_endpoint("rent", rent, t0).is_ok());
    let too_soon = g.take_endpoint("rent", rent, t0 + Duration::from_secs(1));
    assert_eq!(
        too_soon,
        Err(Denied::TooFrequent {
            threshold_s: Some(4.5)
        })
    );
    // Measured from the last admitted call, not from the refused one.
    assert!(
        g.take_endpoint("rent", rent, t0 + Duration::from_millis(4_500))
            .is_ok()
    );
    // Endpoints are independent.
    assert!(
        g.take_endpoint("destroy", rent, t0 + Duration::from_millis(4_600))
            .is_ok()
    );
    let search = EndpointLimit::Burst {
        n: 2,
        per: Duration::from_secs(60),
    };
    assert!(g.take_endpoint("search", search, t0).is_ok());
    assert!(
        g.take_endpoint("search", search, t0 + Duration::from_secs(1))
            .is_ok()
    );
    assert_eq!(
        g.take_endpoint("search", search, t0 + Duration::from_secs(56)),
        Err(Denied::TooFrequent { threshold_s: None })
    );
    assert!(
        g.take_endpoint("search", search, t0 + Duration::from_secs(60))
            .is_ok()
    );
    let scaled = rent.scaled(0.1);
    assert_eq!(scaled, EndpointLimit::Interval(Duration::from_millis(450)));
    assert_eq!(g.counters()["rate_limited"], 2);
}

#[test]
fn bearer_parsing() {
    let mut h = HeaderMap::new();
    assert_eq!(bearer(&h), Credential::Missing);
    h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
    assert_eq!(bearer(&h), Credential::Key("abc"));
    h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
    assert_eq!(bearer(&h), Credential::Malformed);
    assert!(same_secret("abc", "abc"));
    assert!(!same_secret("abc", "abd"));
    assert!(!same_secret("abc", "abcd"));
}
