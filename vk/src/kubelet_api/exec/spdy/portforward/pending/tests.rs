//! Pairing of port-forward streams and the session's bounds on what waits.

use std::time::Duration;

use super::*;

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn stream(kind: &str, rid: &str) -> Vec<(String, String)> {
    h(&[("streamtype", kind), ("port", "8080"), ("requestid", rid)])
}

#[test]
fn streams_pair_by_request_id_in_either_order_with_their_early_data() {
    let mut p = Pending::default();
    let now = Instant::now();
    assert_eq!(
        p.open(3, "data", &stream("data", "7"), now),
        Opened::Waiting
    );
    assert_eq!(p.data(3, Bytes::from_static(b"GET /")), Early::Held);
    assert_eq!(p.early_bytes(), 5);
    assert_eq!(
        p.open(5, "error", &stream("error", "7"), now),
        Opened::Complete {
            error: 5,
            data: 3,
            port: 8080,
            early: vec![Bytes::from_static(b"GET /")]
        }
    );
    assert_eq!(p.waiting(), 0);
    assert_eq!(p.early_bytes(), 0);
}

#[test]
fn old_clients_pair_by_stream_id() {
    let mut p = Pending::default();
    let now = Instant::now();
    let error = h(&[("streamtype", "error"), ("port", "80")]);
    let data = h(&[("streamtype", "data"), ("port", "80")]);
    assert_eq!(p.open(1, "error", &error, now), Opened::Waiting);
    // Data stream 5 would pair with error stream 3: not this one.
    assert_eq!(p.open(5, "data", &data, now), Opened::Waiting);
    assert_eq!(
        p.open(3, "data", &data, now),
        Opened::Complete {
            error: 1,
            data: 3,
            port: 80,
            early: vec![]
        }
    );
}

#[test]
fn bad_streams_are_refused() {
    let mut p = Pending::default();
    let now = Instant::now();
    let cases = [
        ("stdin", h(&[("port", "80")]), "invalid stream type"),
        ("data", h(&[]), "\"port\" header is required"),
        ("data", h(&[("port", "0")]), "invalid port header"),
        ("data", h(&[("port", "70000")]), "invalid port header"),
        ("data", h(&[("port", "http")]), "invalid port header"),
    ];
    for (i, (kind, headers, want)) in cases.into_iter().enumerate() {
        match p.open(2 * i as u32 + 1, kind, &headers, now) {
            Opened::Refused(m) => assert!(m.contains(want), "{m}"),
            o => panic!("{kind} {headers:?}: {o:?}"),
        }
    }
    let twice = stream("data", "1");
    assert_eq!(p.open(21, "data", &twice, now), Opened::Waiting);
    assert!(matches!(
        p.open(23, "data", &twice, now),
        Opened::Refused(_)
    ));
}

#[test]
fn requests_waiting_for_their_pair_are_bounded() {
    let mut p = Pending::default();
    let now = Instant::now();
    for i in 0..MAX_PENDING {
        let rid = i.to_string();
        assert_eq!(
            p.open(2 * i as u32 + 1, "data", &stream("data", &rid), now),
            Opened::Waiting
        );
    }
    // One more request is refused; the second stream of a waiting one still completes it.
    let refused = p.open(9999, "data", &stream("data", "new"), now);
    assert!(
        matches!(&refused, Opened::Refused(m) if m.contains("already waiting")),
        "{refused:?}"
    );
    assert!(matches!(
        p.open(10001, "error", &stream("error", "0"), now),
        Opened::Complete { data: 1, .. }
    ));
    assert_eq!(p.waiting(), MAX_PENDING - 1);
}

#[test]
fn early_data_is_bounded_and_only_kept_for_waiting_streams() {
    let mut p = Pending::default();
    let now = Instant::now();
    // Data on streams nobody opened (the attack: DATA on ids 1, 3, 5, ...) is not kept.
    for id in (1..2001).step_by(2) {
        assert_eq!(p.data(id, Bytes::from(vec![0u8; 1024])), Early::Unknown);
    }
    assert_eq!(p.early_bytes(), 0);
    assert_eq!(
        p.open(3, "data", &stream("data", "a"), now),
        Opened::Waiting
    );
    assert_eq!(
        p.open(5, "error", &stream("error", "b"), now),
        Opened::Waiting
    );
    let chunk = Bytes::from(vec![0u8; 64 * 1024]);
    for _ in 0..MAX_EARLY_BYTES / chunk.len() {
        assert_eq!(p.data(3, chunk.clone()), Early::Held);
    }
    assert_eq!(p.early_bytes(), MAX_EARLY_BYTES);
    // One byte more gives the request up and frees what it held.
    assert_eq!(p.data(3, Bytes::from_static(b"x")), Early::Close(vec![3]));
    assert_eq!(p.early_bytes(), 0);
    assert_eq!(p.waiting(), 1);
    assert_eq!(p.data(3, Bytes::from_static(b"x")), Early::Unknown);
}

#[test]
fn reset_and_expired_requests_free_their_data() {
    let mut p = Pending::default();
    let now = Instant::now();
    assert_eq!(
        p.open(1, "data", &stream("data", "a"), now),
        Opened::Waiting
    );
    assert_eq!(p.data(1, Bytes::from_static(b"abc")), Early::Held);
    p.reset(1);
    assert_eq!((p.waiting(), p.early_bytes()), (0, 0));
    assert_eq!(
        p.open(3, "data", &stream("data", "b"), now),
        Opened::Waiting
    );
    assert_eq!(p.data(3, Bytes::from_static(b"abc")), Early::Held);
    assert!(p.expire(now + Duration::from_secs(1)).is_empty());
    assert_eq!(p.expire(now + STREAM_CREATION_TIMEOUT), vec![3]);
    assert_eq!((p.waiting(), p.early_bytes()), (0, 0));
}
