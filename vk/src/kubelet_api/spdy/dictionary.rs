//! The zlib preset dictionary of SPDY/3 header blocks (SPDY Protocol draft 3, section 2.6.10.1):
//! common header names, each as a 4-byte big-endian length and the name, then a run of common
//! values. Both ends prime their header compression with it.

use std::sync::LazyLock;

/// Header names, each written length-prefixed.
const WORDS: &[&str] = &[
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// Common values, written as they are after the names.
const TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The dictionary (1423 bytes; zlib dictionary id `0xe3c6a7c2`, its Adler-32).
pub static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        // The words are short constants: their length always fits.
        d.extend_from_slice(&u32::try_from(w.len()).unwrap_or(0).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_spdy3_dictionary() {
        assert_eq!(DICTIONARY.len(), 1423);
        // Adler-32, as a zlib stream primed with it names it in its header (FDICT).
        let (mut a, mut b) = (1u32, 0u32);
        for &x in DICTIONARY.iter() {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }
}
