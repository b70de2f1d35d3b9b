//! `Reply::parse` on arbitrary bytes, against the reference grammar checker.
//!
//! Properties: accepted exactly when the model accepts (`ok`, `err`, 3 digits 100..599,
//! `200:`/`428:` + 88 hex digits of a valid token; trailing NUL/CR/LF stripped, nothing else);
//! same code and same token fields; `encode` of an accepted reply parses back to it and is the
//! lowercase of the input's body (`ok` re-encodes as `200`); appending bytes the grammar strips
//! changes nothing.
#![no_main]

use hipobj::reply::Reply;
use hipobj::token::{Token, Transport};
use hipobj_fuzz::model::{self, ReplyModel, TokenFields};
use libfuzzer_sys::fuzz_target;

fn same_token(t: &Token, want: &TokenFields) -> bool {
    let transport = match t.transport {
        Transport::Dc => 0,
        Transport::Rc => 1,
    };
    transport == want.transport
        && t.qp_num == want.qp_num
        && t.gid == want.gid
        && t.rkey == want.rkey
        && t.remote_addr == want.remote_addr
        && t.length == want.length
        && t.port == want.port
        && t.lid == want.lid
}

fuzz_target!(|data: &[u8]| {
    let got = Reply::parse(data);
    let want = model::parse_reply(data);
    match (&got, &want) {
        (Err(_), None) => {}
        (Ok(r), Some(m)) => {
            assert_eq!(r.http_code(), m.http_code(), "input {data:?}");
            match (r, m) {
                (Reply::Code(a), ReplyModel::Code(b)) => assert_eq!(a, b),
                (Reply::Done(t), ReplyModel::Done(f))
                | (Reply::PairingNeeded(t), ReplyModel::PairingNeeded(f)) => {
                    assert!(same_token(t, f), "token fields differ for {data:?}")
                }
                _ => panic!("reply kind differs: {r:?} vs {m:?} for {data:?}"),
            }
            let wire = r.encode();
            assert_eq!(Reply::parse(wire.as_bytes()), Ok(*r));
            let kept = data
                .iter()
                .rposition(|b| !matches!(b, 0 | b'\r' | b'\n'))
                .map_or(0, |i| i + 1);
            let body = data[..kept].to_ascii_lowercase();
            assert!(
                body == wire.as_bytes() || (body == b"ok" && wire == "200"),
                "{body:?} re-encoded as {wire:?}"
            );
            let mut trailed = data.to_vec();
            trailed.extend_from_slice(b"\r\n\0");
            assert_eq!(Reply::parse(&trailed), Ok(*r));
        }
        _ => panic!("library {got:?}, model {want:?}, input {data:?}"),
    }
});
