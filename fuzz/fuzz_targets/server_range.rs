//! The server's byte selection for an RDMA GET (`server/src/rdma/selection.rs`) after s3s parses
//! the `Range` header, against an RFC 9110 model (single byte range, section 14.1.2).
//!
//! Input: byte 0 = flags (bit 0: object size below 4096, bit 1: buffer below 4096, bit 2: no
//! Range header), bytes 1..9 = object size, 9..17 = buffer length (little-endian), the rest = the
//! header value (UTF-8). Like `server_token_header`, the server file is compiled in from its
//! source, so only s3s (not the server's HTTP stack) joins the build; the target needs the
//! `server-range` feature.
//!
//! Properties: s3s's parse agrees with the RFC grammar `bytes=` (first `-` [last] | `-` suffix)
//! for positions up to i64::MAX, with one known leniency (`bytes=-` parses as a zero suffix,
//! which the selection then rejects as unsatisfiable); the selection equals the model's: the
//! clamped range, 416 when it selects nothing, 400 when it is longer than the buffer; an
//! accepted selection lies within the object and is empty only for an empty object.
#![no_main]

#[path = "../../server/src/rdma/selection.rs"]
mod selection;

use hipobj_fuzz::model::{self, ByteRange, Selection};
use libfuzzer_sys::fuzz_target;
use s3s::dto::Range;
use selection::{select_bytes, SelectionError};

fn to_model(r: &Range) -> ByteRange {
    match *r {
        Range::Int { first, last } => ByteRange::From { first, last },
        Range::Suffix { length } => ByteRange::Suffix { length },
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let flags = data[0];
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let mut size = word(&data[1..9]);
    let mut buffer = word(&data[9..17]);
    if flags & 1 != 0 {
        size %= 4096;
    }
    if flags & 2 != 0 {
        buffer %= 4096;
    }
    let Ok(header) = std::str::from_utf8(&data[17..]) else {
        return;
    };

    let range = if flags & 4 != 0 {
        None
    } else {
        let parsed = Range::parse(header).ok();
        let want = model::parse_byte_range(header);
        match (&parsed, want) {
            (Some(r), Some(w)) => assert_eq!(to_model(r), w, "header {header:?}"),
            (None, None) => {}
            (Some(Range::Suffix { length: 0 }), None) if header == "bytes=-" => {}
            (None, Some(w)) if w.max_position() > i64::MAX as u64 => {}
            _ => panic!("s3s {parsed:?}, model {want:?}, header {header:?}"),
        }
        match parsed {
            Some(r) => Some(r),
            None => return,
        }
    };

    let got = select_bytes(range.as_ref(), size, buffer);
    let want = model::select(range.as_ref().map(to_model), size, buffer);
    match (&got, &want) {
        (Ok(r), Selection::Bytes(w)) => {
            assert_eq!(r, w, "size {size}, buffer {buffer}, range {range:?}");
            assert!(r.start <= r.end && r.end <= size);
            assert!(r.start < r.end || size == 0);
            assert!(r.end - r.start <= buffer);
        }
        (Err(SelectionError::NotSatisfiable), Selection::NotSatisfiable) => {}
        (
            Err(SelectionError::BufferTooSmall {
                selected,
                buffer: b,
            }),
            Selection::TooLong(n),
        ) => {
            assert_eq!((*selected, *b), (*n, buffer));
        }
        _ => panic!("server {got:?}, model {want:?}: size {size}, buffer {buffer}, {range:?}"),
    }
});
