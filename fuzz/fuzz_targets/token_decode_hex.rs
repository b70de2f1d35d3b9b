//! `Token::decode_hex` on arbitrary bytes, against the reference model.
//!
//! Properties: the library accepts exactly what the model accepts and reports the same first
//! error (length, then first non-hex index, then transport byte); an accepted token has the
//! model's field values, re-encodes to the lowercase of its input, survives `to_bytes` /
//! `from_bytes`, and has the IPv4 address the model finds in its GID.
#![no_main]

use hipobj::token::{Token, TokenError, Transport, TOKEN_HEX_LEN};
use hipobj_fuzz::model::{self, TokenRejection};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let got = Token::decode_hex(data);
    match model::token_from_hex(data) {
        Ok(want) => {
            let t = match got {
                Ok(t) => t,
                Err(e) => panic!("library rejected a valid token ({e}): {data:?}"),
            };
            let transport = match t.transport {
                Transport::Dc => 0,
                Transport::Rc => 1,
            };
            assert_eq!(transport, want.transport);
            assert_eq!(t.qp_num, want.qp_num);
            assert_eq!(t.gid, want.gid);
            assert_eq!(t.rkey, want.rkey);
            assert_eq!(t.remote_addr, want.remote_addr);
            assert_eq!(t.length, want.length);
            assert_eq!(t.port, want.port);
            assert_eq!(t.lid, want.lid);
            let hex = t.encode_hex();
            assert_eq!(hex.len(), TOKEN_HEX_LEN);
            assert_eq!(hex.as_bytes(), data.to_ascii_lowercase().as_slice());
            assert_eq!(Token::from_bytes(&t.to_bytes()), Ok(t));
            assert_eq!(Token::decode_hex(hex.as_bytes()), Ok(t));
            let ip = t
                .client_nic_ipv4()
                .map(|a| a.to_string())
                .unwrap_or_default();
            assert_eq!(ip, model::client_nic_text(&want.gid));
        }
        Err(rejection) => {
            let want = match rejection {
                TokenRejection::Length(n) => TokenError::Length(n),
                TokenRejection::NotHex(i) => TokenError::NotHex(i),
                TokenRejection::Transport(b) => TokenError::Transport(b),
            };
            assert_eq!(got, Err(want), "input {data:?}");
        }
    }
});
