//! Round trips of the SPDY framing and header compression, split at arbitrary byte boundaries,
//! and what malformed or oversize input yields.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::headers::{Deflater, Inflater, decode_block, encode_block};
use super::*;

fn arb_id() -> impl Strategy<Value = u32> {
    1u32..=0x7fff_ffff
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (arb_id(), any::<bool>(), arb_bytes(300)).prop_map(|(stream_id, fin, data)| Frame::Data {
            stream_id,
            fin,
            data
        }),
        (
            arb_id(),
            0u32..=0x7fff_ffff,
            0u8..8,
            any::<bool>(),
            any::<bool>(),
            arb_bytes(64)
        )
            .prop_map(
                |(stream_id, associated_to, priority, fin, unidirectional, headers)| {
                    Frame::SynStream {
                        stream_id,
                        associated_to,
                        priority,
                        fin,
                        unidirectional,
                        headers,
                    }
                }
            ),
        (arb_id(), any::<bool>(), arb_bytes(64)).prop_map(|(stream_id, fin, headers)| {
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            }
        }),
        (arb_id(), any::<bool>(), arb_bytes(64)).prop_map(|(stream_id, fin, headers)| {
            Frame::Headers {
                stream_id,
                fin,
                headers,
            }
        }),
        (arb_id(), any::<u32>())
            .prop_map(|(stream_id, status)| Frame::RstStream { stream_id, status }),
        (
            any::<bool>(),
            proptest::collection::vec((any::<u8>(), 0u32..0x0100_0000, any::<u32>()), 0..5)
        )
            .prop_map(|(clear, e)| Frame::Settings {
                clear,
                entries: e
                    .into_iter()
                    .map(|(flags, id, value)| Setting { flags, id, value })
                    .collect(),
            }),
        any::<u32>().prop_map(|id| Frame::Ping { id }),
        (0u32..=0x7fff_ffff, any::<u32>()).prop_map(|(last_good_stream_id, status)| {
            Frame::GoAway {
                last_good_stream_id,
                status,
            }
        }),
        (0u32..=0x7fff_ffff, 1u32..=0x7fff_ffff)
            .prop_map(|(stream_id, delta)| Frame::WindowUpdate { stream_id, delta }),
    ]
}

/// Feeds `wire` to a decoder in pieces cut at `cuts`, collecting every frame.
fn decode_in_pieces(wire: &[u8], cuts: &[usize], max: usize) -> Result<Vec<Frame>, FrameError> {
    let d = Decoder::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    points.push(wire.len());
    points.sort_unstable();
    let mut at = 0;
    for p in points {
        buf.extend_from_slice(&wire[at..p]);
        at = p;
        while let Some(f) = d.decode(&mut buf)? {
            out.push(f);
        }
    }
    assert!(buf.is_empty(), "bytes left over");
    Ok(out)
}

proptest! {
    #[test]
    fn frames_round_trip_split_anywhere(
        frames in proptest::collection::vec(arb_frame(), 1..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut wire = BytesMut::new();
        for f in &frames {
            encode(f, &mut wire);
        }
        let got = decode_in_pieces(&wire, &cuts, MAX_LENGTH).unwrap();
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn garbage_is_an_error_or_frames_never_a_panic(
        wire in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let d = Decoder::new(1024);
        let mut buf = BytesMut::new();
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        points.push(wire.len());
        points.sort_unstable();
        let mut at = 0;
        'outer: for p in points {
            buf.extend_from_slice(&wire[at..p]);
            at = p;
            loop {
                match d.decode(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'outer,
                }
            }
        }
    }

    #[test]
    fn header_blocks_round_trip_through_one_stream_per_direction(
        blocks in proptest::collection::vec(
            proptest::collection::vec(("[a-z][a-z0-9-]{0,20}", "[ -~]{0,40}"), 0..6),
            1..6,
        ),
    ) {
        let mut tx = Deflater::new().unwrap();
        let mut rx = Inflater::new(1 << 20);
        for block in &blocks {
            let h: Vec<(String, String)> = block.clone();
            let compressed = tx.compress(&h).unwrap();
            prop_assert_eq!(rx.decompress(&compressed).unwrap(), h);
        }
    }

    #[test]
    fn corrupt_header_blocks_are_errors(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        let mut rx = Inflater::new(1 << 16);
        let _ = rx.decompress(&bytes);
        let _ = decode_block(&bytes);
    }
}

#[test]
fn the_dictionary_is_used_and_the_stream_is_shared() {
    let mut tx = Deflater::new().unwrap();
    let h = vec![("streamtype".to_owned(), "stdout".to_owned())];
    let first = tx.compress(&h).unwrap();
    // A zlib header with FDICT set, naming the SPDY/3 dictionary.
    assert_eq!(first[1] & 0x20, 0x20, "{first:02x?}");
    assert_eq!(&first[2..6], &0xe3c6_a7c2u32.to_be_bytes());
    let second = tx.compress(&h).unwrap();
    // The second block continues the stream: no zlib header again, and shorter.
    assert!(second.len() < first.len());
    let mut rx = Inflater::new(1 << 20);
    assert_eq!(rx.decompress(&first).unwrap(), h);
    assert_eq!(rx.decompress(&second).unwrap(), h);
    // A fresh decompressor cannot read the second block alone: it is not a stream of its own.
    assert!(Inflater::new(1 << 20).decompress(&second).is_err());
}

#[test]
fn a_block_compressed_without_the_dictionary_is_refused() {
    use flate2::{Compress, Compression, FlushCompress};
    let raw = encode_block(&[("a".into(), "b".into())]);
    let mut z = Compress::new(Compression::default(), true);
    z.set_dictionary(b"some other dictionary").unwrap();
    let mut out = Vec::with_capacity(256);
    z.compress_vec(&raw, &mut out, FlushCompress::Sync).unwrap();
    assert!(Inflater::new(1 << 20).decompress(&out).is_err());
}

#[test]
fn oversize_frames_are_refused_from_their_header() {
    let d = Decoder::new(1024);
    let mut wire = BytesMut::new();
    encode(
        &Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from(vec![0u8; 1025]),
        },
        &mut wire,
    );
    // Only the 8-byte header is there: refused already.
    let mut head = BytesMut::from(&wire[..8]);
    assert_eq!(
        d.decode(&mut head),
        Err(FrameError::TooLarge {
            length: 1025,
            limit: 1024
        })
    );
    let mut ok = BytesMut::new();
    encode(
        &Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::from(vec![7u8; 1024]),
        },
        &mut ok,
    );
    assert!(matches!(
        d.decode(&mut ok),
        Ok(Some(Frame::Data { fin: true, .. }))
    ));
}

#[test]
fn malformed_frames_are_errors() {
    let d = Decoder::new(1 << 20);
    let cases: &[&[u8]] = &[
        // PING with 3 bytes
        &[0x80, 3, 0, 6, 0, 0, 0, 3, 1, 2, 3],
        // RST_STREAM for stream 0
        &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1],
        // SYN_STREAM too short
        &[0x80, 3, 0, 1, 0, 0, 0, 4, 0, 0, 0, 1],
        // SETTINGS claiming 2 entries with room for 1
        &[
            0x80, 3, 0, 4, 0, 0, 0, 12, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 1, 0,
        ],
        // WINDOW_UPDATE with delta 0
        &[0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0],
        // version 2
        &[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1],
        // DATA on stream 0
        &[0, 0, 0, 0, 0, 0, 0, 1, 9],
    ];
    for c in cases {
        assert!(d.decode(&mut BytesMut::from(*c)).is_err(), "{c:02x?}");
    }
    // An unknown control type is skipped, not an error.
    assert_eq!(
        d.decode(&mut BytesMut::from(
            &[0x80, 3, 0, 0x42, 0, 0, 0, 2, 1, 2][..]
        )),
        Ok(Some(Frame::Unknown { kind: 0x42 }))
    );
}

#[test]
fn header_blocks_are_checked() {
    let block = encode_block(&[
        ("StreamType".into(), "error".into()),
        ("x".into(), "a\0b".into()),
    ]);
    assert_eq!(
        decode_block(&block).unwrap(),
        vec![
            ("streamtype".to_owned(), "error".to_owned()),
            ("x".to_owned(), "a\0b".to_owned())
        ]
    );
    assert!(decode_block(&block[..block.len() - 1]).is_err());
    let mut longer = block.clone();
    longer.push(0);
    assert!(decode_block(&longer).is_err());
    // A count that cannot fit is refused before any allocation.
    assert!(decode_block(&[0xff, 0xff, 0xff, 0xff]).is_err());
    // An empty name.
    assert!(decode_block(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
}

#[test]
fn a_header_bomb_is_refused() {
    let mut tx = Deflater::new().unwrap();
    let big = vec![("x".to_owned(), "a".repeat(100_000))];
    let compressed = tx.compress(&big).unwrap();
    assert!(compressed.len() < 2000);
    assert!(Inflater::new(10_000).decompress(&compressed).is_err());
}
