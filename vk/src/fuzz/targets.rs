//! Fuzz targets for what a kubelet API client sends: SPDY header blocks and WebSocket channel
//! messages.

use bytes::Bytes;
use proptest::prelude::*;

use crate::kubelet_api::exec::channel::{self, Incoming};
use crate::kubelet_api::spdy::headers::{Deflater, Inflater};

/// The header block bound the SPDY sessions use.
const MAX_BLOCK: usize = 64 * 1024;

fn header() -> impl Strategy<Value = (String, String)> {
    ("[a-z:-]{1,16}", ".{0,64}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::cases()))]

    /// Any bytes as a compressed header block: headers or an error, never more than the bound.
    #[test]
    fn arbitrary_header_blocks_decode_or_fail_within_the_bound(
        block in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut inflater = Inflater::new(MAX_BLOCK);
        if let Ok(headers) = inflater.decompress(&block) {
            let size: usize = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
            prop_assert!(size <= MAX_BLOCK);
        }
    }

    /// A valid block with bytes flipped: still headers or an error, and the stream goes on.
    #[test]
    fn corrupted_header_blocks_decode_or_fail(
        headers in proptest::collection::vec(header(), 0..8),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    ) {
        let mut deflater = Deflater::new().unwrap();
        let mut block = deflater.compress(&headers).unwrap();
        if flips.is_empty() {
            prop_assert!(Inflater::new(MAX_BLOCK).decompress(&block).is_ok());
        } else if !block.is_empty() {
            for (at, x) in flips {
                let i = at % block.len();
                block[i] ^= x;
            }
            let mut inflater = Inflater::new(MAX_BLOCK);
            let _ = inflater.decompress(&block);
            let _ = inflater.decompress(&block);
        }
    }

    /// Any client message on the channel protocol, v4 or v5: one meaning, never a panic; stdin
    /// is the message minus its channel byte.
    #[test]
    fn channel_messages_always_mean_something(
        msg in proptest::collection::vec(any::<u8>(), 0..64),
        v5 in any::<bool>(),
    ) {
        let got = channel::parse(&Bytes::from(msg.clone()), v5);
        match got {
            Incoming::Stdin(b) => {
                prop_assert_eq!(msg.first(), Some(&channel::STDIN));
                prop_assert_eq!(&b[..], &msg[1..]);
            }
            Incoming::Close(c) => {
                prop_assert!(v5);
                prop_assert_eq!(&msg[..], &[channel::CLOSE, c][..]);
            }
            Incoming::Resize(_) => prop_assert_eq!(msg.first(), Some(&channel::RESIZE)),
            Incoming::Ignored => {}
        }
    }
}
