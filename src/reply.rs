//! The `x-amz-rdma-reply` grammar (docs/protocol.md section 3): `ok`, `err`, a 3-digit code 100..599,
//! or `200:`/`428:` followed by 88 hex digits. Trailing NUL, CR and LF within the given length are
//! stripped; everything else that does not match is malformed.

use crate::token::{Token, TOKEN_HEX_LEN};
use std::fmt;

/// Size of the buffer a transfer gives `recvReply` (`*replyLen` = this on entry).
pub const REPLY_BUFFER_LEN: usize = 512;

/// Revision 5 (docs/protocol.md rule 12.1): the statuses a server answers a token
/// request with only before it posted any work request for it, leaving the pairing as it was.
/// The one place the client decides which replies start nothing: the pool keeps the QP and its
/// pairing after them (rule 3), and a retry after `503` reuses it (rule 4).
pub const STARTS_NOTHING: [i32; 8] = [400, 403, 404, 409, 412, 416, 501, 503];

/// Whether a reply with status `code` started nothing at the server ([`STARTS_NOTHING`]).
pub fn starts_nothing(code: i32) -> bool {
    STARTS_NOTHING.contains(&code)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Transport;
    use proptest::prelude::*;

    const RC: &str =
        "015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";

    fn dc() -> String {
        format!("00{}", &RC[2..])
    }

    fn code(input: &[u8]) -> Result<i32, ReplyError> {
        Reply::parse(input).map(|r| r.http_code())
    }

    /// docs/protocol.md section 3, accepted inputs, `428` forms included.
    #[test]
    fn accepted_inputs() {
        let cases: Vec<(Vec<u8>, i32)> = vec![
            (b"ok".to_vec(), 200),
            (b"ok\n".to_vec(), 200),
            (b"ok\r\n\0".to_vec(), 200),
            (b"err".to_vec(), -1),
            (b"err\r\n".to_vec(), -1),
            (b"200".to_vec(), 200),
            (b"204".to_vec(), 204),
            (b"206".to_vec(), 206),
            (b"404".to_vec(), 404),
            (b"501".to_vec(), 501),
            (b"100".to_vec(), 100),
            (b"599".to_vec(), 599),
            (b"428".to_vec(), 428),
            (b"503".to_vec(), 503),
            (b"200\r\n".to_vec(), 200),
            (b"200\0\0".to_vec(), 200),
            (b"200\n\r\0\n".to_vec(), 200),
            (format!("200:{RC}").into_bytes(), 200),
            (format!("200:{}", dc()).into_bytes(), 200),
            (format!("200:{}", RC.to_ascii_uppercase()).into_bytes(), 200),
            (format!("200:{RC}\r\n").into_bytes(), 200),
            (format!("428:{RC}").into_bytes(), 428),
            (format!("428:{}", RC.to_ascii_uppercase()).into_bytes(), 428),
            (format!("428:{RC}\0").into_bytes(), 428),
        ];
        for (input, want) in cases {
            assert_eq!(
                code(&input),
                Ok(want),
                "input {:?}",
                String::from_utf8_lossy(&input)
            );
        }
        // Only the given length counts: "2004" with length 3 is "200".
        assert_eq!(code(&b"2004"[..3]), Ok(200));
    }

    #[test]
    fn tokens_are_returned() {
        let t = Token::decode_hex(RC.as_bytes()).expect("valid");
        assert_eq!(
            Reply::parse(format!("200:{RC}").as_bytes()),
            Ok(Reply::Done(t))
        );
        assert_eq!(
            Reply::parse(format!("428:{RC}").as_bytes()),
            Ok(Reply::PairingNeeded(t))
        );
        let d = Reply::parse(format!("200:{}", dc()).as_bytes());
        assert!(matches!(d, Ok(Reply::Done(t)) if t.transport == Transport::Dc));
        assert_eq!(Reply::parse(b"428"), Ok(Reply::Code(428)));
        assert_eq!(Reply::parse(b"ok"), Ok(Reply::Code(200)));
        assert_eq!(Reply::parse(b"err"), Ok(Reply::Code(-1)));
    }

    /// docs/protocol.md section 3, rejected inputs.
    #[test]
    fn rejected_inputs() {
        let t = RC;
        let mut cases: Vec<Vec<u8>> = [
            // empty / whitespace
            "",
            "\r\n",
            "\0",
            "ok ",
            " 200",
            "200 ",
            " ",
            "\t200",
            // wrong word or case
            "okay",
            "OK",
            "Ok",
            "error",
            "abc",
            "ERR",
            "o",
            "k",
            // malformed number
            "20",
            "2000",
            "0200",
            "+200",
            "-200",
            "2x0",
            "2",
            "",
            "2.0",
            "0x1",
            // out of range
            "099",
            "600",
            "999",
            "000",
            "050",
            // repeated value
            "200\r\n200",
            "okok",
            "ok\nok",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        cases.push(b"2\0 00".to_vec());
        cases.push(b"20\x000".to_vec());
        // bad token part
        for s in [
            "200:".to_string(),
            "428:".to_string(),
            format!(":{t}"),
            format!("200:{}", &t[..87]),
            format!("200:{t}0"),
            format!("200:{t}:1:2"),
            format!("200: {t}"),
            format!("200: {}", &t[1..]),
            format!("200:{}", "g".repeat(88)),
            format!("200:02{}", &t[2..]),
            format!("200:ff{}", &t[2..]),
            format!("428:ff{}", &t[2..]),
            format!("200;{t}"),
            format!("200:{t} "),
            // a token on a form other than 200 and 428
            format!("206:{t}"),
            format!("404:{t}"),
            format!("501:{t}"),
            format!("204:{t}"),
            format!("ok:{t}"),
            format!("err:{t}"),
            t.to_string(),
        ] {
            cases.push(s.into_bytes());
        }
        for input in cases {
            assert_eq!(
                Reply::parse(&input),
                Err(ReplyError),
                "input {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }

    #[test]
    fn only_refusals_before_any_work_start_nothing() {
        for code in [400, 403, 404, 409, 412, 416, 501, 503] {
            assert!(starts_nothing(code), "{code}");
        }
        for code in [-1, 200, 206, 428, 500, 502, 504, 507, 401, 429] {
            assert!(!starts_nothing(code), "{code}");
        }
    }

    #[test]
    fn encode_forms() {
        let t = Token::decode_hex(RC.as_bytes()).expect("valid");
        assert_eq!(Reply::Code(501).encode(), "501");
        assert_eq!(Reply::Code(-1).encode(), "err");
        assert_eq!(Reply::Done(t).encode(), format!("200:{RC}"));
        assert_eq!(Reply::PairingNeeded(t).encode(), format!("428:{RC}"));
        assert_eq!(ReplyError.to_string(), "malformed x-amz-rdma-reply");
    }

    fn any_reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            (100..=599i32).prop_map(Reply::Code),
            Just(Reply::Code(-1)),
            crate::token::tests::any_token().prop_map(Reply::Done),
            crate::token::tests::any_token().prop_map(Reply::PairingNeeded),
        ]
    }

    proptest! {
        #[test]
        fn encode_parse_round_trip(r in any_reply(), trailer in "[\r\n\0]{0,4}") {
            let wire = r.encode() + &trailer;
            prop_assert_eq!(Reply::parse(wire.as_bytes()), Ok(r));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(r) = Reply::parse(&bytes) {
                // Whatever is accepted is in the grammar: re-encoding gives the input without
                // its trailer (up to hex case; "ok" is re-encoded as "200").
                let mut end = bytes.len();
                while end > 0 && matches!(bytes[end - 1], b'\0' | b'\r' | b'\n') {
                    end -= 1;
                }
                let body = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
                let enc = r.encode();
                prop_assert!(body == enc || (body == "ok" && enc == "200"), "{} vs {}", body, enc);
            }
        }

        #[test]
        fn codes_parse_to_themselves(c in 0..1000i32) {
            let s = format!("{c:03}");
            let want = if (100..=599).contains(&c) { Ok(c) } else { Err(ReplyError) };
            prop_assert_eq!(code(s.as_bytes()), want);
        }

        #[test]
        fn structured_garbage_never_panics(prefix in "(200|428|206|ok|err|)[:; ]?", body in "[0-9a-fA-F:g ]{0,100}") {
            let _ = Reply::parse(format!("{prefix}{body}").as_bytes());
        }
    }
}
