//! `Token::from_bytes` on arbitrary bytes, and the hex codec on the tokens it yields.
//!
//! Properties: accepted exactly when the model accepts (44 bytes, transport 0 or 1);
//! `to_bytes` gives the input back; the fields are the model's; `encode_hex` is the model's
//! lowercase hex of the input, and `decode_hex` of it (lower or upper case) is the same token;
//! a rejection names the length or the transport byte as the model does.
#![no_main]

use hipobj::token::{Token, TokenError, TOKEN_LEN};
use hipobj_fuzz::model;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let got = Token::from_bytes(data);
    match model::token_from_binary(data) {
        Some(want) => {
            let t = match got {
                Ok(t) => t,
                Err(e) => panic!("library rejected a valid binary token ({e}): {data:?}"),
            };
            assert_eq!(t.to_bytes().as_slice(), data);
            assert_eq!(t.qp_num, want.qp_num);
            assert_eq!(t.gid, want.gid);
            assert_eq!(t.rkey, want.rkey);
            assert_eq!(t.remote_addr, want.remote_addr);
            assert_eq!(t.length, want.length);
            assert_eq!(t.port, want.port);
            assert_eq!(t.lid, want.lid);
            let hex = t.encode_hex();
            assert_eq!(hex, model::lowercase_hex(data));
            assert_eq!(Token::decode_hex(hex.as_bytes()), Ok(t));
            assert_eq!(
                Token::decode_hex(hex.to_ascii_uppercase().as_bytes()),
                Ok(t)
            );
        }
        None => {
            let want = if data.len() == TOKEN_LEN {
                TokenError::Transport(data[0])
            } else {
                TokenError::Length(data.len())
            };
            assert_eq!(got, Err(want), "input {data:?}");
            // The same bytes in hex are rejected too.
            assert!(Token::decode_hex(model::lowercase_hex(data).as_bytes()).is_err());
        }
    }
});
