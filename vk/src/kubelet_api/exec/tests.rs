//! Tests of parsing exec options and negotiating the streaming transport.

use super::*;
use axum::http::{HeaderValue, header};

fn pairs(s: &[(&str, &str)]) -> Vec<(String, String)> {
    s.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
}

#[test]
fn options_follow_the_kubelet_rules() {
    // What the API server forwards for `kubectl exec -i`.
    let o = parse_options(
        Kind::Exec,
        &pairs(&[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo $X"),
            ("input", "1"),
            ("output", "1"),
            ("error", "1"),
        ]),
    )
    .unwrap();
    assert_eq!(o.command, ["sh", "-c", "echo $X"]);
    assert!(o.stdin && o.stdout && o.stderr && !o.tty);
    // The subresource's names work too.
    let o = parse_options(
        Kind::Exec,
        &pairs(&[
            ("command", "ls"),
            ("command", "-l"),
            ("stdout", "1"),
            ("stderr", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(o.command, ["ls", "-l"]);
    assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
    // With a TTY stderr is part of the terminal.
    let o = parse_options(
        Kind::Exec,
        &pairs(&[
            ("command", "sh"),
            ("tty", "1"),
            ("output", "1"),
            ("error", "1"),
        ]),
    )
    .unwrap();
    assert!(o.tty && o.stdout && !o.stderr);
    assert!(parse_options(Kind::Exec, &pairs(&[("output", "1")])).is_err());
    assert!(parse_options(Kind::Attach, &pairs(&[])).is_err());
    assert!(parse_options(Kind::Attach, &pairs(&[("tty", "1"), ("error", "1")])).is_err());
    let e = parse_options(Kind::Attach, &pairs(&[("input", "maybe")])).unwrap_err();
    assert!(e.message.contains("input"), "{}", e.message);
}

#[test]
fn negotiates_websocket_subprotocols_and_spots_spdy() {
    let mut h = HeaderMap::new();
    assert_eq!(negotiate(&h), Transport::None);
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    assert_eq!(negotiate(&h), Transport::Spdy);
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static("base64.channel.k8s.io, v4.channel.k8s.io, v5.channel.k8s.io"),
    );
    assert_eq!(
        negotiate(&h),
        Transport::WebSocket("v5.channel.k8s.io".into())
    );
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static("v4.channel.k8s.io"),
    );
    assert_eq!(
        negotiate(&h),
        Transport::WebSocket("v4.channel.k8s.io".into())
    );
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static("bogus"),
    );
    assert_eq!(negotiate(&h), Transport::None);
}
