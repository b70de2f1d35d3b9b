//! The `x-amz-rdma-reply` grammar (PROTOCOL.md section 3): `ok`, `err`, a 3-digit code 100..599,
//! or `200:`/`428:` followed by 88 hex digits. Trailing NUL, CR and LF within the given length are
//! stripped; everything else that does not match is malformed.

use crate::token::{Token, TOKEN_HEX_LEN};
use std::fmt;

/// Size of the buffer a transfer gives `recvReply` (`*replyLen` = this on entry).
pub const REPLY_BUFFER_LEN: usize = 512;

/// A parsed reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A bare code: 100..599, 200 for `ok`, -1 for `err`.
    Code(i32),
    /// `200:<server token>`: the transfer is done.
    Done(Token),
    /// `428:<server token>`: pairing needed; the server created a QP for this client QP.
    PairingNeeded(Token),
}

/// Why a reply was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyError;

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed x-amz-rdma-reply")
    }
}

impl std::error::Error for ReplyError {}

impl Reply {
    /// The HTTP-style code `hipObjParseRdmaReply` reports.
    pub fn http_code(&self) -> i32 {
        match self {
            Reply::Code(c) => *c,
            Reply::Done(_) => 200,
            Reply::PairingNeeded(_) => 428,
        }
    }

    /// Parse a reply value of exactly `bytes.len()` bytes.
    pub fn parse(bytes: &[u8]) -> Result<Reply, ReplyError> {
        let mut end = bytes.len();
        while end > 0 && matches!(bytes[end - 1], b'\0' | b'\r' | b'\n') {
            end -= 1;
        }
        let s = &bytes[..end];
        match s {
            b"ok" => return Ok(Reply::Code(200)),
            b"err" => return Ok(Reply::Code(-1)),
            _ => {}
        }
        let code = three_digit_code(s.get(..3).ok_or(ReplyError)?)?;
        if s.len() == 3 {
            return Ok(Reply::Code(code));
        }
        if s[3] != b':' || s.len() != 4 + TOKEN_HEX_LEN {
            return Err(ReplyError);
        }
        let token = Token::decode_hex(&s[4..]).map_err(|_| ReplyError)?;
        match code {
            200 => Ok(Reply::Done(token)),
            428 => Ok(Reply::PairingNeeded(token)),
            _ => Err(ReplyError),
        }
    }

    /// The reply's wire form (for servers).
    pub fn encode(&self) -> String {
        match self {
            Reply::Code(-1) => "err".to_string(),
            Reply::Code(c) => format!("{c:03}"),
            Reply::Done(t) => format!("200:{}", t.encode_hex()),
            Reply::PairingNeeded(t) => format!("428:{}", t.encode_hex()),
        }
    }
}

fn three_digit_code(d: &[u8]) -> Result<i32, ReplyError> {
    if d.len() != 3 || !d.iter().all(u8::is_ascii_digit) {
        return Err(ReplyError);
    }
    let v = d.iter().fold(0i32, |acc, c| acc * 10 + i32::from(c - b'0'));
    if (100..=599).contains(&v) {
        Ok(v)
    } else {
        Err(ReplyError)
    }
}
