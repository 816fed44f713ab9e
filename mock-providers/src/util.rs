//! Small helpers: shell quoting, the `Retry-After` of injected faults, base64 for pagination tokens, random ids, time formatting.

use jiff::Timestamp;
use rand::Rng;

/// Quote one word for a POSIX shell, so `sh -c` sees it as a single literal argument.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_owned();
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for ch in word.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

/// Join words into one shell command line, each word quoted.
pub fn shell_join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `resp` with `Retry-After: secs` when an injected fault sets one.
pub fn with_retry_after(
    mut resp: axum::response::Response,
    secs: Option<u64>,
) -> axum::response::Response {
    if let Some(s) = secs {
        resp.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(s),
        );
    }
    resp
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let idx = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, &v) in idx.iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(B64[v as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decode standard base64 (padding optional); `None` when the input is not base64.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in text.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// A RunPod-style pod id: 14 lowercase letters and digits.
pub fn pod_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..14)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// RFC 3339 with second precision, as the providers print it.
pub fn rfc3339(ts: Timestamp) -> String {
    format!("{:.0}", ts)
}

/// Seconds since the Unix epoch as a float (Vast's `start_date`).
pub fn unix_f64(ts: Timestamp) -> f64 {
    ts.as_millisecond() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_sh() {
        assert_eq!(shell_quote("plain"), "plain");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_join(&["echo", "a b", "$HOME"]), "echo 'a b' '$HOME'");
    }

    #[test]
    fn base64_round_trip() {
        for s in ["", "a", "ab", "abc", "{\"values\": {\"id\": 123}}"] {
            let enc = base64_encode(s.as_bytes());
            assert_eq!(base64_decode(&enc).unwrap(), s.as_bytes());
        }
        assert_eq!(
            base64_encode(b"{\"values\": {\"id\": 123}}"),
            "eyJ2YWx1ZXMiOiB7ImlkIjogMTIzfX0="
        );
        assert!(base64_decode("not base64!").is_none());
    }

    #[test]
    fn pod_ids_look_right() {
        let id = pod_id();
        assert_eq!(id.len(), 14);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }
}
