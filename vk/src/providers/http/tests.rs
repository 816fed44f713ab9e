//! Unit tests of the provider HTTP client: Retry-After, status classes, bounded and redacted
//! messages, and the transport bounds (loopback-only http, no redirects, answer size cap).

use super::*;
use reqwest::header::HeaderValue;

fn headers(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
    h
}

#[test]
fn retry_after_seconds_and_dates() {
    assert_eq!(
        parse_retry_after(&headers("12")),
        Some(Duration::from_secs(12))
    );
    assert_eq!(parse_retry_after(&headers(" 0 ")), Some(Duration::ZERO));
    assert_eq!(parse_retry_after(&headers("999999")), Some(MAX_RETRY_AFTER));
    assert_eq!(
        parse_retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")),
        Some(Duration::ZERO)
    );
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
    let date = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&later)
        .unwrap();
    let got = parse_retry_after(&headers(&date)).unwrap();
    assert!(
        got > Duration::from_secs(100) && got <= Duration::from_secs(120),
        "{got:?}"
    );
    assert_eq!(parse_retry_after(&headers("soon")), None);
    assert_eq!(parse_retry_after(&HeaderMap::new()), None);
}

#[test]
fn status_classes() {
    let c = |s: u16| classify_status(StatusCode::from_u16(s).unwrap(), None, "m".into());
    assert!(matches!(c(401), ProviderError::Auth { .. }));
    assert!(matches!(c(403), ProviderError::Auth { .. }));
    assert!(matches!(c(402), ProviderError::Capacity { .. }));
    assert_eq!(c(404), ProviderError::NotFound);
    assert!(matches!(c(409), ProviderError::Invalid { .. }));
    assert!(matches!(c(422), ProviderError::Invalid { .. }));
    assert!(matches!(c(429), ProviderError::Transient { .. }));
    assert!(matches!(c(503), ProviderError::Transient { .. }));
}

#[test]
fn truncate_is_char_safe() {
    let long = "é".repeat(MAX_MESSAGE_CHARS + 5);
    let t = truncate(&long);
    assert!(t.ends_with("..."));
    assert_eq!(t.chars().count(), MAX_MESSAGE_CHARS + 3);
}

#[test]
fn messages_are_bounded_and_redacted() {
    let resp = RawResponse {
        status: StatusCode::BAD_GATEWAY,
        retry_after: None,
        body: Bytes::from_static(b"  echo of key-12345  "),
        secret: Secret::new("key-12345"),
    };
    let detail = resp.detail_or_reason(resp.text_snippet());
    assert_eq!(
        resp.message("Svc", &detail),
        "Svc HTTP 502: echo of <redacted>"
    );
    assert_eq!(resp.detail_or_reason(String::new()), "Bad Gateway");
    let long = resp.message("Svc", &"x".repeat(2 * MAX_MESSAGE_CHARS));
    assert_eq!(long.chars().count(), MAX_MESSAGE_CHARS + 3);
}

fn client(base: &str, allow_insecure_http: bool) -> Result<Client<Bearer>, InitError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let auth = Bearer::new("p", "k3y-very-secret")?;
    Client::new("p", base, auth, Duration::from_secs(5), allow_insecure_http)
}

#[test]
fn plain_http_only_to_loopback_unless_allowed() {
    for ok in [
        "http://127.0.0.1:8080/v2",
        "http://localhost:6820",
        "http://[::1]:9000",
        "https://rest.runpod.io/v1",
        "https://10.0.0.5:6820",
    ] {
        assert!(client(ok, false).is_ok(), "{ok}");
    }
    for refused in [
        "http://10.0.0.5:6820",
        "http://slurmrestd.hpc:6820",
        "http://[::2]:1",
    ] {
        let e = client(refused, false).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("only allowed to loopback")),
            "{refused}: {e:?}"
        );
        assert!(
            client(refused, true).is_ok(),
            "{refused} with allowInsecureHttp"
        );
    }
}

#[tokio::test]
async fn redirects_are_not_followed_so_credentials_stay_home() {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let elsewhere = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .mount(&elsewhere)
        .await;
    let home = MockServer::start().await;
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(302).insert_header("location", elsewhere.uri() + "/steal"),
        )
        .mount(&home)
        .await;
    let c = client(&home.uri(), false).unwrap_or_else(|e| panic!("{e}"));
    let r = c
        .send(Method::GET, c.url(&["pods"], false), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, StatusCode::FOUND);
    let leaked = elsewhere.received_requests().await.unwrap_or_default();
    assert!(leaked.is_empty(), "the redirect was followed: {leaked:?}");
}

#[tokio::test]
async fn an_answer_over_the_bound_is_refused() {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string("x".repeat(4096)))
        .mount(&server)
        .await;
    let c = client(&server.uri(), false)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_max_body(1024);
    let e = c
        .send(Method::GET, c.url(&["pods"], false), None)
        .await
        .err();
    assert!(
        matches!(&e, Some(ProviderError::Transient { message, .. }) if message.contains("larger than 1024 bytes")),
        "{e:?}"
    );
    let roomy = client(&server.uri(), false)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_max_body(4096);
    let ok = roomy
        .send(Method::GET, roomy.url(&["pods"], false), None)
        .await;
    assert_eq!(ok.map(|r| r.body.len()).ok(), Some(4096));
}
