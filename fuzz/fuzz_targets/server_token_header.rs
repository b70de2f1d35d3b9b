//! The server's `x-amz-rdma-token` header parser (`server/src/rdma/token_header.rs`) on
//! arbitrary bytes, against the reference model.
//!
//! The module is pure (it uses only `hipobj::token`), so it is compiled into this target from
//! its source file instead of through the `hipobj-server` crate, whose s3s/tokio/hyper
//! dependency tree would triple the fuzz build time for one function.
//!
//! Properties: accepted exactly when the model accepts (surrounding ASCII whitespace aside:
//! 88 hex digits, optionally `:` + 16 hex + `:` + 16 hex equal to the token's remote address and
//! length); an accepted value decodes to the model's fields. Structure-aware part: the first 44
//! input bytes (transport forced to 0/1) form a token `t`; its lowercase and uppercase hex, and
//! both with the matching suffix, parse to `t`; a suffix whose address or size differs by one bit
//! is rejected.
#![no_main]

#[path = "../../server/src/rdma/token_header.rs"]
#[allow(dead_code)]
mod token_header;

use hipobj::token::{Token, Transport, TOKEN_LEN};
use hipobj_fuzz::model;
use libfuzzer_sys::fuzz_target;
use token_header::parse_token_header;

fuzz_target!(|data: &[u8]| {
    let got = parse_token_header(data);
    match (&got, model::parse_token_header(data)) {
        (Err(_), None) => {}
        (Ok(t), Some(want)) => {
            let transport = match t.transport {
                Transport::Dc => 0,
                Transport::Rc => 1,
            };
            assert_eq!(transport, want.transport);
            assert_eq!(
                (
                    t.qp_num,
                    t.gid,
                    t.rkey,
                    t.remote_addr,
                    t.length,
                    t.port,
                    t.lid
                ),
                (
                    want.qp_num,
                    want.gid,
                    want.rkey,
                    want.remote_addr,
                    want.length,
                    want.port,
                    want.lid
                ),
                "input {data:?}"
            );
        }
        (got, want) => panic!("server {got:?}, model {want:?}, input {data:?}"),
    }

    let Some(bytes) = data.get(..TOKEN_LEN) else {
        return;
    };
    let mut bytes = <[u8; TOKEN_LEN]>::try_from(bytes).unwrap_or([0; TOKEN_LEN]);
    bytes[0] &= 1;
    let Ok(t) = Token::from_bytes(&bytes) else {
        panic!("a 44-byte token with transport 0/1 was rejected: {bytes:?}");
    };
    let hex = t.encode_hex();
    let suffix = |addr: u64, size: u64| format!(":{addr:016x}:{size:016x}");
    let bit = 1u64 << (data.len() % 64);
    for value in [
        hex.clone(),
        hex.to_ascii_uppercase(),
        format!("{hex}{}", suffix(t.remote_addr, t.length)),
        format!(
            "{hex}{}",
            suffix(t.remote_addr, t.length).to_ascii_uppercase()
        ),
    ] {
        assert_eq!(parse_token_header(value.as_bytes()), Ok(t), "{value}");
    }
    for value in [
        format!("{hex}{}", suffix(t.remote_addr ^ bit, t.length)),
        format!("{hex}{}", suffix(t.remote_addr, t.length ^ bit)),
    ] {
        assert!(parse_token_header(value.as_bytes()).is_err(), "{value}");
    }
});
