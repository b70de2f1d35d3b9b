//! Reference model of the wire formats, from the spec text alone.
//!
//! Deliberately naive (byte loops, explicit shifts) and independent of `hipobj`: when the library
//! and this model disagree, one of them is wrong and the fuzzer reports the input.

/// Binary token length (docs/protocol.md section 2).
pub const TOKEN_BYTES: usize = 44;
/// Hex token length.
pub const TOKEN_HEX_DIGITS: usize = 88;

/// Why the model rejects a hex token, in the order the spec's checks apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRejection {
    /// Not exactly 88 characters (the length).
    Length(usize),
    /// The first character that is not `0-9a-fA-F` (its index).
    NotHex(usize),
    /// Transport byte outside {0, 1}.
    Transport(u8),
}

/// The fields of a token, by offset (docs/protocol.md section 2), little-endian integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenFields {
    pub transport: u8,
    pub qp_num: u32,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub remote_addr: u64,
    pub length: u64,
    pub port: u8,
    pub lid: u16,
}

fn hex_digit_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Little-endian unsigned integer from `bytes` (at most 8 of them).
fn little_endian(bytes: &[u8]) -> u64 {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        value |= u64::from(*b) << (8 * i);
    }
    value
}

/// Decode 44 binary bytes; `None` for another length or a transport byte other than 0 or 1.
pub fn token_from_binary(b: &[u8]) -> Option<TokenFields> {
    if b.len() != TOKEN_BYTES || b[0] > 1 {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = b[5 + i];
    }
    Some(TokenFields {
        transport: b[0],
        qp_num: little_endian(&b[1..5]) as u32,
        gid,
        rkey: little_endian(&b[21..25]) as u32,
        remote_addr: little_endian(&b[25..33]),
        length: little_endian(&b[33..41]),
        port: b[41],
        lid: little_endian(&b[42..44]) as u16,
    })
}

/// The 44 bytes behind 88 hex digits, checked in the spec's order: length, digits, transport.
pub fn token_binary_from_hex(s: &[u8]) -> Result<[u8; TOKEN_BYTES], TokenRejection> {
    if s.len() != TOKEN_HEX_DIGITS {
        return Err(TokenRejection::Length(s.len()));
    }
    let mut out = [0u8; TOKEN_BYTES];
    for i in 0..TOKEN_HEX_DIGITS {
        let v = hex_digit_value(s[i]).ok_or(TokenRejection::NotHex(i))?;
        out[i / 2] |= if i % 2 == 0 { v << 4 } else { v };
    }
    if out[0] > 1 {
        return Err(TokenRejection::Transport(out[0]));
    }
    Ok(out)
}

/// Decode a hex token to its fields.
pub fn token_from_hex(s: &[u8]) -> Result<TokenFields, TokenRejection> {
    let binary = token_binary_from_hex(s)?;
    token_from_binary(&binary).ok_or(TokenRejection::Transport(binary[0]))
}

/// Lowercase hex of some bytes.
pub fn lowercase_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The dotted quad of an IPv4-mapped GID (bytes 0-9 zero, 10-11 0xff; docs/protocol.md section 2, with
/// the full check section 13 item 5 asks for), or "" for any other GID.
pub fn client_nic_text(gid: &[u8; 16]) -> String {
    let mapped = gid[..10].iter().all(|b| *b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    if mapped {
        format!("{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15])
    } else {
        String::new()
    }
}

/// What `hipObjTokenClientNic` must make of the C string at `token` (the bytes up to its NUL,
/// of which at most 89 are read): `None` for a malformed token, else the address text.
pub fn client_nic_of_c_string(token: &[u8]) -> Option<String> {
    let limit = token.len().min(TOKEN_HEX_DIGITS + 1);
    let len = token[..limit].iter().position(|b| *b == 0).unwrap_or(limit);
    token_from_hex(&token[..len])
        .ok()
        .map(|t| client_nic_text(&t.gid))
}

/// A reply the model accepts (docs/protocol.md section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyModel {
    /// `ok` (200), `err` (-1), or a bare 3-digit code 100..599.
    Code(i32),
    /// `200:<token>`.
    Done(TokenFields),
    /// `428:<token>`.
    PairingNeeded(TokenFields),
}

impl ReplyModel {
    /// The code `hipObjParseRdmaReply` writes.
    pub fn http_code(&self) -> i32 {
        match self {
            ReplyModel::Code(c) => *c,
            ReplyModel::Done(_) => 200,
            ReplyModel::PairingNeeded(_) => 428,
        }
    }
}

/// Parse a reply of exactly `bytes.len()` bytes; `None` = malformed.
pub fn parse_reply(bytes: &[u8]) -> Option<ReplyModel> {
    // Strip trailing NUL / CR / LF, nothing else.
    let kept = bytes
        .iter()
        .rposition(|b| !matches!(b, 0 | b'\r' | b'\n'))
        .map_or(0, |last| last + 1);
    let body = &bytes[..kept];
    if body == b"ok" {
        return Some(ReplyModel::Code(200));
    }
    if body == b"err" {
        return Some(ReplyModel::Code(-1));
    }
    if body.len() < 3 || !body[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let code = body[..3]
        .iter()
        .fold(0i32, |n, d| n * 10 + i32::from(d - b'0'));
    if !(100..=599).contains(&code) {
        return None;
    }
    if body.len() == 3 {
        return Some(ReplyModel::Code(code));
    }
    let (separator, token) = (body[3], &body[4..]);
    if separator != b':' {
        return None;
    }
    let token = token_from_hex(token).ok()?;
    match code {
        200 => Some(ReplyModel::Done(token)),
        428 => Some(ReplyModel::PairingNeeded(token)),
        _ => None,
    }
}

/// What a server makes of an `x-amz-rdma-token` header value (docs/protocol.md 2): surrounding
/// whitespace aside, 88 hex digits, optionally followed by `:` 16 hex digits `:` 16 hex digits
/// equal to the token's remote address and length. `None` = malformed (400).
pub fn parse_token_header(value: &[u8]) -> Option<TokenFields> {
    let is_space = |b: &u8| b.is_ascii_whitespace();
    let start = value
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    let value = &value[start..end.max(start)];
    let (hex, suffix) = value.split_at(value.len().min(TOKEN_HEX_DIGITS));
    let token = token_from_hex(hex).ok()?;
    if suffix.is_empty() {
        return Some(token);
    }
    let parts: Vec<&[u8]> = suffix.split(|b| *b == b':').collect();
    if parts.len() != 3 || !parts[0].is_empty() {
        return None;
    }
    let field = |digits: &[u8]| -> Option<u64> {
        if digits.len() != 16 {
            return None;
        }
        let mut v = 0u64;
        for d in digits {
            v = (v << 4) | u64::from(hex_digit_value(*d)?);
        }
        Some(v)
    };
    let (addr, size) = (field(parts[1])?, field(parts[2])?);
    (addr == token.remote_addr && size == token.length).then_some(token)
}

/// One byte range of a `Range: bytes=...` header (RFC 9110 section 14.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// `first-` or `first-last` (inclusive).
    From { first: u64, last: Option<u64> },
    /// `-length`: the last `length` bytes.
    Suffix { length: u64 },
}

impl ByteRange {
    /// The largest position the header names.
    pub fn max_position(&self) -> u64 {
        match *self {
            ByteRange::From { first, last } => last.unwrap_or(first).max(first),
            ByteRange::Suffix { length } => length,
        }
    }
}

/// `1*DIGIT` that fits a u64.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v = 0u64;
    for b in s.bytes() {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// A single-range `Range` header value: `bytes=` then `first-`, `first-last` (first <= last) or
/// `-suffix`; no spaces, no lists. `None` = not this grammar.
pub fn parse_byte_range(header: &str) -> Option<ByteRange> {
    let spec = header.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    if a.is_empty() {
        return Some(ByteRange::Suffix {
            length: decimal(b)?,
        });
    }
    let first = decimal(a)?;
    if b.is_empty() {
        return Some(ByteRange::From { first, last: None });
    }
    let last = decimal(b)?;
    (first <= last).then_some(ByteRange::From {
        first,
        last: Some(last),
    })
}

/// What a GET should send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// These bytes of the object.
    Bytes(std::ops::Range<u64>),
    /// 416: the range selects nothing.
    NotSatisfiable,
    /// 400: this many selected bytes do not fit the client's buffer.
    TooLong(u64),
}

/// RFC 9110 selection for an object of `size` bytes, then the buffer check of docs/protocol.md 4.4.
pub fn select(range: Option<ByteRange>, size: u64, buffer: u64) -> Selection {
    let (start, end) = match range {
        None => (0, size),
        // A first position at or past the end selects nothing; a last position past the end
        // means the end.
        Some(ByteRange::From { first, last }) => {
            if first >= size {
                return Selection::NotSatisfiable;
            }
            let end = match last {
                Some(last) if last < size => last + 1,
                _ => size,
            };
            (first, end)
        }
        // A zero suffix selects nothing; a longer suffix than the object means all of it.
        Some(ByteRange::Suffix { length }) => {
            if length == 0 {
                return Selection::NotSatisfiable;
            }
            (size - length.min(size), size)
        }
    };
    if end - start > buffer {
        Selection::TooLong(end - start)
    } else {
        Selection::Bytes(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/protocol.md section 2's worked example.
    const EXAMPLE: &str =
        "015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";

    #[test]
    fn worked_example() {
        let t = token_from_hex(EXAMPLE.as_bytes()).expect("the example is valid");
        assert_eq!(t.transport, 1);
        assert_eq!(t.qp_num, 0x55);
        assert_eq!(t.rkey, 0x1234);
        assert_eq!(t.remote_addr, 0x7f00_0000_1000);
        assert_eq!(t.length, 4096);
        assert_eq!(t.port, 1);
        assert_eq!(t.lid, 0);
        assert_eq!(client_nic_text(&t.gid), "192.168.100.200");
        let b = token_binary_from_hex(EXAMPLE.as_bytes()).expect("valid");
        assert_eq!(lowercase_hex(&b), EXAMPLE);
    }

    #[test]
    fn reply_tables() {
        for (input, code) in [
            (&b"ok"[..], 200),
            (b"ok\n", 200),
            (b"err", -1),
            (b"204", 204),
            (b"599", 599),
            (b"200\0\0", 200),
        ] {
            assert_eq!(parse_reply(input).map(|r| r.http_code()), Some(code));
        }
        for input in [
            &b""[..],
            b"\r\n",
            b"ok ",
            b" 200",
            b"OK",
            b"0200",
            b"099",
            b"600",
            b"2\0 00",
            b"200\r\n200",
            b"200:",
        ] {
            assert_eq!(parse_reply(input), None, "{input:?}");
        }
        let done = format!("200:{EXAMPLE}");
        assert!(matches!(
            parse_reply(done.as_bytes()),
            Some(ReplyModel::Done(_))
        ));
        let other = format!("206:{EXAMPLE}");
        assert_eq!(parse_reply(other.as_bytes()), None);
    }

    #[test]
    fn byte_ranges() {
        assert_eq!(
            parse_byte_range("bytes=0-9"),
            Some(ByteRange::From {
                first: 0,
                last: Some(9)
            })
        );
        assert_eq!(
            parse_byte_range("bytes=-5"),
            Some(ByteRange::Suffix { length: 5 })
        );
        for bad in [
            "bytes=-",
            "bytes=9-0",
            "bytes=1-2,3-4",
            "bytes= 1-2",
            "items=0-1",
            "bytes=+1-2",
        ] {
            assert_eq!(parse_byte_range(bad), None, "{bad}");
        }
        let all = Some(ByteRange::Suffix { length: 500 });
        assert_eq!(select(all, 100, 100), Selection::Bytes(0..100));
        assert_eq!(select(all, 0, 0), Selection::Bytes(0..0));
        assert_eq!(select(None, 100, 99), Selection::TooLong(100));
        let past = Some(ByteRange::From {
            first: 100,
            last: None,
        });
        assert_eq!(select(past, 100, 100), Selection::NotSatisfiable);
    }

    #[test]
    fn header_suffix() {
        let ok = format!("{EXAMPLE}:00007f0000001000:0000000000001000");
        assert!(parse_token_header(ok.as_bytes()).is_some());
        let wrong = format!("{EXAMPLE}:00007f0000001000:0000000000001001");
        assert!(parse_token_header(wrong.as_bytes()).is_none());
        let short = format!("{EXAMPLE}:7f0000001000:1000");
        assert!(parse_token_header(short.as_bytes()).is_none());
        assert!(parse_token_header(format!(" {EXAMPLE}\t").as_bytes()).is_some());
    }
}
