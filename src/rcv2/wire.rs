//! The hipobj-rc-v2 header codec (docs/protocol.md 13.2-13.5): value types with their exact formats,
//! the request target, and the five messages. Strict: every value is checked where it is parsed,
//! and a [`WireError`] carries the status a server answers for it.

use super::{header, MAX_TRANSFER, PROTOCOL};
use crate::checksum::StoredChecksum;
use crate::token::{Token, Transport, TOKEN_HEX_LEN};
use std::fmt;

/// A rejected header value: the HTTP status a server answers (400, 413, 501) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub status: u16,
    pub message: String,
}

impl WireError {
    fn bad(message: impl Into<String>) -> WireError {
        WireError {
            status: 400,
            message: message.into(),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl std::error::Error for WireError {}

type Result<T> = std::result::Result<T, WireError>;

/// Exactly `digits` hex digits (either case) as a number.
fn fixed_hex(name: &str, value: &str, digits: usize) -> Result<u64> {
    if value.len() != digits || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WireError::bad(format!(
            "{name} must be exactly {digits} hex digits, got '{}'",
            value.escape_debug()
        )));
    }
    u64::from_str_radix(value, 16).map_err(|_| WireError::bad(format!("{name} is not hex")))
}

/// Bare hex (1..=16 digits, an optional `0x`), as servers send QP numbers, addresses and rkeys.
fn bare_hex(name: &str, value: &str) -> Result<u64> {
    let digits = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
        .unwrap_or(value);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WireError::bad(format!(
            "{name} must be hex, got '{}'",
            value.escape_debug()
        )));
    }
    u64::from_str_radix(digits, 16).map_err(|_| WireError::bad(format!("{name} is not hex")))
}

fn bare_hex_u32(name: &str, value: &str) -> Result<u32> {
    u32::try_from(bare_hex(name, value)?)
        .map_err(|_| WireError::bad(format!("{name} exceeds 32 bits")))
}

/// Plain decimal digits (no sign, no spaces), at most 20 of them.
fn decimal(name: &str, value: &str) -> Result<u64> {
    if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(WireError::bad(format!(
            "{name} must be a decimal number, got '{}'",
            value.escape_debug()
        )));
    }
    value
        .parse()
        .map_err(|_| WireError::bad(format!("{name} is out of range")))
}

fn required<'a>(get: &impl Fn(&str) -> Option<&'a str>, name: &str) -> Result<&'a str> {
    get(name)
        .map(str::trim)
        .ok_or_else(|| WireError::bad(format!("{name} is missing")))
}

/// `x-amz-rdma-protocol` must be present and `hipobj-rc-v2`; a request naming another protocol
/// (or none) is answered `501` with the unsupported marker.
fn check_protocol<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<()> {
    match get(header::PROTOCOL).map(str::trim) {
        Some(p) if p.eq_ignore_ascii_case(PROTOCOL) => Ok(()),
        Some(p) => Err(WireError {
            status: 501,
            message: format!("protocol '{}' is not {PROTOCOL}", p.escape_debug()),
        }),
        None => Err(WireError {
            status: 501,
            message: format!("{} is missing", header::PROTOCOL),
        }),
    }
}

fn random_u32_nonzero(mask: u32) -> u32 {
    loop {
        let v = crate::random::u32() & mask;
        if v != 0 {
            return v;
        }
    }
}

/// A packet sequence number of the v2 wire: 24 bits, never 0, six lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    pub fn new(value: u32) -> Result<Psn> {
        if value == 0 || value > 0x00ff_ffff {
            return Err(WireError::bad(format!(
                "PSN {value:#x} is not in 1..=0xffffff"
            )));
        }
        Ok(Psn(value))
    }
    pub fn random() -> Psn {
        Psn(crate::verbs::random_psn())
    }
    pub fn get(self) -> u32 {
        self.0
    }
    pub fn parse(value: &str) -> Result<Psn> {
        Psn::new(fixed_hex(header::PSN, value, 6)? as u32)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06x}", self.0)
    }
}

/// The per-transfer cookie: a non-zero 32-bit value, eight lowercase hex digits; the GET data
/// phase's immediate and the FINAL echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cookie(u32);

impl Cookie {
    pub fn new(value: u32) -> Result<Cookie> {
        if value == 0 {
            return Err(WireError::bad("cookie 0 is not allowed"));
        }
        Ok(Cookie(value))
    }
    pub fn random() -> Cookie {
        Cookie(random_u32_nonzero(u32::MAX))
    }
    pub fn get(self) -> u32 {
        self.0
    }
    pub fn parse(value: &str) -> Result<Cookie> {
        Cookie::new(fixed_hex(header::COOKIE, value, 8)? as u32)
    }
}

impl fmt::Display for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// A session id: 16 bytes the server draws, 32 lowercase hex digits on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session(pub [u8; 16]);

impl Session {
    pub fn random() -> Session {
        let mut b = [0u8; 16];
        crate::random::fill(&mut b);
        Session(b)
    }
    pub fn parse(value: &str) -> Result<Session> {
        if value.len() != 32 {
            return Err(WireError::bad(format!(
                "{} must be exactly 32 hex digits, got {}",
                header::SESSION,
                value.len()
            )));
        }
        let mut b = [0u8; 16];
        hex::decode_to_slice(value, &mut b)
            .map_err(|_| WireError::bad(format!("{} is not hex", header::SESSION)))?;
        Ok(Session(b))
    }
}

impl fmt::Display for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The direction of a v2 transfer, as the client names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The server RDMA-writes the object into the client's buffer.
    Get,
    /// The client RDMA-writes its buffer into the server's staging memory.
    Put,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
        }
    }
    pub fn parse(value: &str) -> Result<Op> {
        match value {
            "GET" => Ok(Op::Get),
            "PUT" => Ok(Op::Put),
            other => Err(WireError::bad(format!(
                "{} must be GET or PUT, got '{}'",
                header::OP,
                other.escape_debug()
            ))),
        }
    }
}

/// RFC 3986 unreserved characters: kept as they are; everything else is `%XX` (uppercase).
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn pct_encode(s: &str, keep_slash: bool, out: &mut String) {
    for &b in s.as_bytes() {
        if is_unreserved(b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Decode `%XX` escapes (either case); `strict` also requires uppercase hex that does not encode
/// an unreserved byte and no raw character outside the unreserved set (the canonical query).
fn pct_decode(what: &str, s: &str, strict: bool) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let esc = bytes
                .get(i + 1..i + 3)
                .filter(|e| e.iter().all(u8::is_ascii_hexdigit))
                .ok_or_else(|| WireError::bad(format!("{what}: bad %-escape at byte {i}")))?;
            let text = std::str::from_utf8(esc).unwrap_or("00");
            let v = u8::from_str_radix(text, 16)
                .map_err(|_| WireError::bad(format!("{what}: bad %-escape at byte {i}")))?;
            if strict && (esc.iter().any(u8::is_ascii_lowercase) || is_unreserved(v)) {
                return Err(WireError::bad(format!(
                    "{what}: %-escape at byte {i} is not canonical"
                )));
            }
            out.push(v);
            i += 3;
        } else {
            if b.is_ascii_control() || b == b' ' || (strict && !is_unreserved(b)) {
                return Err(WireError::bad(format!(
                    "{what}: character {i} must be %-encoded"
                )));
            }
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| WireError::bad(format!("{what} is not UTF-8")))
}

/// The object a PREPARE names: `/` + pct(bucket) + `/` + pct(key, keeping `/`) [+ `?` + the
/// canonical query: `k=v` pairs sorted by key then value, e.g. `partNumber=2&uploadId=…`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub bucket: String,
    pub key: String,
    /// Decoded `(key, value)` pairs.
    pub query: Vec<(String, String)>,
}

impl Target {
    /// The wire form. Pairs are encoded, then sorted (byte order of the encoded forms).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.bucket.len() + self.key.len() + 2);
        out.push('/');
        pct_encode(&self.bucket, false, &mut out);
        out.push('/');
        pct_encode(&self.key, true, &mut out);
        let mut pairs: Vec<(String, String)> = self
            .query
            .iter()
            .map(|(k, v)| {
                let (mut ek, mut ev) = (String::new(), String::new());
                pct_encode(k, false, &mut ek);
                pct_encode(v, false, &mut ev);
                (ek, ev)
            })
            .collect();
        pairs.sort();
        for (i, (k, v)) in pairs.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }

    pub fn parse(value: &str) -> Result<Target> {
        let what = header::TARGET;
        let (path, query) = match value.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (value, None),
        };
        let rest = path
            .strip_prefix('/')
            .ok_or_else(|| WireError::bad(format!("{what} must start with '/'")))?;
        let (bucket, key) = rest
            .split_once('/')
            .ok_or_else(|| WireError::bad(format!("{what} names no key ('/bucket/key')")))?;
        let bucket = pct_decode(what, bucket, false)?;
        let key = pct_decode(what, key, false)?;
        if bucket.is_empty() || bucket.len() > 255 {
            return Err(WireError::bad(format!(
                "{what}: bucket must be 1..255 bytes"
            )));
        }
        if key.is_empty() || key.len() > 1024 {
            return Err(WireError::bad(format!("{what}: key must be 1..1024 bytes")));
        }
        let query = match query {
            None => Vec::new(),
            Some(q) => canonical_query(q)?,
        };
        Ok(Target { bucket, key, query })
    }

    /// The value of query parameter `name`, if present.
    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `k=v(&k=v)*`, `=` mandatory, keys non-empty, canonical escapes, sorted by key then value.
fn canonical_query(q: &str) -> Result<Vec<(String, String)>> {
    let what = "x-amz-rdma-target query";
    let mut raw: Vec<(&str, &str)> = Vec::new();
    for pair in q.split('&') {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| WireError::bad(format!("{what}: '{pair}' has no '='")))?;
        if k.is_empty() {
            return Err(WireError::bad(format!("{what}: empty key")));
        }
        raw.push((k, v));
    }
    if raw.windows(2).any(|w| w[0] > w[1]) {
        return Err(WireError::bad(format!("{what} is not sorted")));
    }
    raw.into_iter()
        .map(|(k, v)| Ok((pct_decode(what, k, true)?, pct_decode(what, v, true)?)))
        .collect()
}

/// The object size field: 1..=2^31-1 (larger: 413, as servers answer it).
fn transfer_size(value: &str) -> Result<u64> {
    let size = decimal(header::SIZE, value)?;
    if size == 0 {
        return Err(WireError::bad(format!(
            "{} must be at least 1",
            header::SIZE
        )));
    }
    if size > MAX_TRANSFER {
        return Err(WireError {
            status: 413,
            message: format!("{} {size} exceeds {MAX_TRANSFER}", header::SIZE),
        });
    }
    Ok(size)
}

/// The client QP identity in a PREPARE token: transport RC and a non-zero GID, or the all-zero
/// same-HCA loopback marker. Only the 88 hex digits count; a legacy `:addr:size` suffix is ignored.
fn client_token(value: &str) -> Result<Token> {
    let hex = value.get(..TOKEN_HEX_LEN).unwrap_or(value);
    let token = Token::decode_hex(hex.as_bytes())
        .map_err(|e| WireError::bad(format!("{}: {e}", header::TOKEN)))?;
    if token.to_bytes().iter().all(|&b| b == 0) {
        return Ok(token);
    }
    if token.transport != Transport::Rc {
        return Err(WireError::bad(format!(
            "{} is not an RC token",
            header::TOKEN
        )));
    }
    if token.gid == [0; 16] {
        return Err(WireError::bad(format!("{} has a zero GID", header::TOKEN)));
    }
    Ok(token)
}

/// The QP identity part of a token (rkey, address and length zero), as PREPARE carries it.
fn qp_identity(t: &Token) -> Token {
    Token {
        rkey: 0,
        remote_addr: 0,
        length: 0,
        lid: 0,
        ..*t
    }
}

fn protocol_header() -> (&'static str, String) {
    (header::PROTOCOL, PROTOCOL.to_string())
}

/// PREPARE (client -> server): who the client QP is and what it wants moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareRequest {
    /// The client QP: transport, QP number, GID, port (rkey, address, length are sent as 0).
    pub token: Token,
    /// The client's starting PSN (the server's `rq_psn`).
    pub psn: Psn,
    pub cookie: Cookie,
    pub op: Op,
    pub target: Target,
    /// Bytes to move, 1..=2^31-1.
    pub size: u64,
    /// Object offset of the first byte.
    pub offset: u64,
}

impl PrepareRequest {
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            protocol_header(),
            (header::TOKEN, qp_identity(&self.token).encode_hex()),
            (header::PSN, self.psn.to_string()),
            (header::COOKIE, self.cookie.to_string()),
            (header::OP, self.op.as_str().to_string()),
            (header::TARGET, self.target.encode()),
            (header::SIZE, self.size.to_string()),
        ];
        if self.offset != 0 {
            h.push((header::OFFSET, self.offset.to_string()));
        }
        h
    }

    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<PrepareRequest> {
        check_protocol(&get)?;
        let size = transfer_size(required(&get, header::SIZE)?)?;
        Ok(PrepareRequest {
            token: client_token(required(&get, header::TOKEN)?)?,
            psn: Psn::parse(required(&get, header::PSN)?)?,
            cookie: Cookie::parse(required(&get, header::COOKIE)?)?,
            op: Op::parse(required(&get, header::OP)?)?,
            target: Target::parse(required(&get, header::TARGET)?)?,
            size,
            offset: match get(header::OFFSET) {
                Some(v) => decimal(header::OFFSET, v.trim())?,
                None => 0,
            },
        })
    }
}

/// PREPARE's 200 (server -> client): the server QP, its PSN, the session, and for a PUT the
/// staging memory the client writes into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareAnswer {
    /// The server QP: transport RC, QP number, GID, port (sent as `200:<token>` in the reply).
    pub server: Token,
    pub session: Session,
    /// The server's starting PSN (the client's `rq_psn`).
    pub psn: Psn,
    /// Staging `(address, rkey)` for a PUT (both non-zero when present).
    pub staging: Option<(u64, u32)>,
}

impl PrepareAnswer {
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            protocol_header(),
            (
                header::REPLY,
                format!("200:{}", qp_identity(&self.server).encode_hex()),
            ),
            (header::SESSION, self.session.to_string()),
            (header::PSN, self.psn.to_string()),
            (header::QPN, format!("{:x}", self.server.qp_num)),
        ];
        if let Some((addr, rkey)) = self.staging {
            h.push((header::MR_ADDR, format!("{addr:x}")));
            h.push((header::MR_RKEY, format!("{rkey:x}")));
        }
        h
    }

    /// The client's checks of a 200 (docs/protocol.md 13.3): protocol echo, an RC server token with a
    /// non-zero GID, a 32-hex session, a non-zero PSN; staging only when both values are
    /// non-zero (a PUT without it is the caller's error to raise).
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<PrepareAnswer> {
        check_protocol(&get)?;
        let reply = required(&get, header::REPLY)?;
        let hex = reply
            .strip_prefix("200:")
            .ok_or_else(|| WireError::bad(format!("{} is not '200:<token>'", header::REPLY)))?;
        let server = Token::decode_hex(hex.as_bytes())
            .map_err(|e| WireError::bad(format!("{}: {e}", header::REPLY)))?;
        if server.transport != Transport::Rc || server.gid == [0; 16] {
            return Err(WireError::bad(
                "the server token names no RC queue pair (no transport)",
            ));
        }
        let staging = match (get(header::MR_ADDR), get(header::MR_RKEY)) {
            (Some(a), Some(r)) => {
                let addr = bare_hex(header::MR_ADDR, a.trim())?;
                let rkey = bare_hex_u32(header::MR_RKEY, r.trim())?;
                (addr != 0 && rkey != 0).then_some((addr, rkey))
            }
            _ => None,
        };
        Ok(PrepareAnswer {
            server,
            session: Session::parse(required(&get, header::SESSION)?)?,
            psn: Psn::parse(required(&get, header::PSN)?)?,
            staging,
        })
    }
}

/// READY (client -> server): the client QP is in RTS; where the server writes a GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyRequest {
    pub session: Session,
    pub cookie: Cookie,
    pub qpn: u32,
    /// The client buffer's address (GET: the window's start) and the rkey that reaches it.
    pub mr_addr: u64,
    pub mr_rkey: u32,
}

impl ReadyRequest {
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            protocol_header(),
            (header::SESSION, self.session.to_string()),
            (header::COOKIE, self.cookie.to_string()),
            (header::QPN, format!("{:x}", self.qpn)),
            (header::MR_ADDR, format!("{:x}", self.mr_addr)),
            (header::MR_RKEY, format!("{:x}", self.mr_rkey)),
        ]
    }

    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<ReadyRequest> {
        check_protocol(&get)?;
        let qpn = bare_hex_u32(header::QPN, required(&get, header::QPN)?)?;
        if qpn == 0 || qpn > 0x00ff_ffff {
            return Err(WireError::bad(format!(
                "{} {qpn:#x} is not a QP number",
                header::QPN
            )));
        }
        Ok(ReadyRequest {
            session: Session::parse(required(&get, header::SESSION)?)?,
            cookie: Cookie::parse(required(&get, header::COOKIE)?)?,
            qpn,
            mr_addr: match get(header::MR_ADDR) {
                Some(v) => bare_hex(header::MR_ADDR, v.trim())?,
                None => 0,
            },
            mr_rkey: match get(header::MR_RKEY) {
                Some(v) => bare_hex_u32(header::MR_RKEY, v.trim())?,
                None => 0,
            },
        })
    }
}

/// READY's final answer (server -> client), sent after the data phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalAnswer {
    pub cookie: Cookie,
    pub bytes: u64,
    pub etag: Option<String>,
    pub version_id: Option<String>,
    /// `x-amz-rdma-checksum`: `<ALGORITHM> <base64>[ COMPOSITE]` ([`StoredChecksum`]).
    pub checksum: Option<String>,
}

impl FinalAnswer {
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            protocol_header(),
            (header::COOKIE, self.cookie.to_string()),
            (header::BYTES_TRANSFERRED, self.bytes.to_string()),
        ];
        let optional = [
            (header::ETAG, &self.etag),
            (header::VERSION_ID, &self.version_id),
            (header::CHECKSUM, &self.checksum),
        ];
        for (name, value) in optional {
            if let Some(v) = value {
                h.push((name, v.clone()));
            }
        }
        h
    }

    /// The client's checks (docs/protocol.md 13.5): protocol echo, a well-formed cookie echo (compare
    /// it with your own), a decimal byte count, a well-formed `x-amz-rdma-checksum` when present.
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<FinalAnswer> {
        check_protocol(&get)?;
        let checksum = get(header::CHECKSUM).map(str::trim).map(str::to_string);
        if let Some(c) = &checksum {
            StoredChecksum::parse(c).map_err(|e| WireError::bad(e.to_string()))?;
        }
        let text = |name| get(name).map(str::trim).map(str::to_string);
        Ok(FinalAnswer {
            cookie: Cookie::parse(required(&get, header::COOKIE)?)?,
            bytes: match get(header::BYTES_TRANSFERRED) {
                Some(v) => decimal(header::BYTES_TRANSFERRED, v.trim())?,
                None => 0,
            },
            etag: text(header::ETAG),
            version_id: text(header::VERSION_ID),
            checksum,
        })
    }
}

/// A FINAL's `CRC64NVME <b64>` for `value`, written by the one writer of `x-amz-rdma-checksum`
/// ([`StoredChecksum`]); the tests' FINALs (a server names what it stored).
#[cfg(test)]
pub(crate) fn final_crc64nvme_text(value: u64) -> String {
    let crc = crate::checksum::CrcAlgo::Crc64Nvme;
    StoredChecksum::stored(crc.into(), &crc.encode(value), false)
        .map(|c| c.header_value())
        .unwrap_or_default()
}

/// CANCEL (client -> server): end the session; always answered 204.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    pub session: Session,
}

impl CancelRequest {
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            protocol_header(),
            (header::SESSION, self.session.to_string()),
        ]
    }

    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<CancelRequest> {
        check_protocol(&get)?;
        Ok(CancelRequest {
            session: Session::parse(required(&get, header::SESSION)?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::CrcAlgo;
    use std::collections::HashMap;

    fn lookup(h: &[(&'static str, String)]) -> HashMap<String, String> {
        h.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    fn client_qp() -> Token {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[169, 254, 77, 1]);
        Token {
            transport: Transport::Rc,
            qp_num: 0x11,
            gid,
            rkey: 0,
            remote_addr: 0,
            length: 0,
            port: 1,
            lid: 0,
        }
    }

    fn prepare() -> PrepareRequest {
        PrepareRequest {
            token: client_qp(),
            psn: Psn::new(0x00ab_cdef).unwrap(),
            cookie: Cookie::new(0xdead_beef).unwrap(),
            op: Op::Put,
            target: Target {
                bucket: "b".into(),
                key: "dir/a b+c".into(),
                query: vec![
                    ("uploadId".into(), "x/y".into()),
                    ("partNumber".into(), "2".into()),
                ],
            },
            size: 4096,
            offset: 0,
        }
    }

    fn with<'a>(
        h: &'a HashMap<String, String>,
        name: &'static str,
        value: Option<&'a str>,
    ) -> impl Fn(&str) -> Option<&'a str> {
        move |k: &str| {
            if k == name {
                value
            } else {
                h.get(k).map(String::as_str)
            }
        }
    }

    #[test]
    fn prepare_round_trips_with_the_formats_of_the_wire() {
        let p = prepare();
        let h = lookup(&p.headers());
        assert_eq!(h[header::PROTOCOL], "hipobj-rc-v2");
        assert_eq!(h[header::PSN], "abcdef");
        assert_eq!(h[header::COOKIE], "deadbeef");
        assert_eq!(
            h[header::TARGET],
            "/b/dir/a%20b%2Bc?partNumber=2&uploadId=x%2Fy"
        );
        assert!(!h.contains_key(header::OFFSET));
        let back = PrepareRequest::from_headers(|k| h.get(k).map(String::as_str)).unwrap();
        let mut expected = p;
        expected.target.query.sort();
        assert_eq!(back, expected);
    }

    #[test]
    fn malformed_prepare_headers_get_the_statuses_of_the_reference() {
        let h = lookup(&prepare().headers());
        let cases: [(&str, Option<&str>, u16); 14] = [
            (header::PSN, Some("000000"), 400),
            (header::PSN, Some("1234567"), 400),
            (header::PSN, Some("12345g"), 400),
            (header::COOKIE, Some("00000000"), 400),
            (header::COOKIE, Some("dead"), 400),
            (header::SIZE, Some("2147483648"), 413),
            (header::SIZE, Some("0"), 400),
            (header::SIZE, Some("-1"), 400),
            (header::TARGET, Some("b/k"), 400),
            (header::TARGET, Some("/b"), 400),
            (header::TARGET, Some("/b/k?b=1&a=2"), 400),
            (header::OP, Some("DELETE"), 400),
            (header::PROTOCOL, Some("hipobj-rc-v1"), 501),
            (header::TOKEN, None, 400),
        ];
        for (name, value, status) in cases {
            let e = PrepareRequest::from_headers(with(&h, name, value)).unwrap_err();
            assert_eq!(e.status, status, "{name}={value:?}: {e}");
        }
        assert!(PrepareRequest::from_headers(with(&h, header::SIZE, Some("2147483647"))).is_ok());
    }

    #[test]
    fn a_dc_or_gidless_token_is_refused_and_the_zero_token_is_the_loopback_marker() {
        let h = lookup(&prepare().headers());
        let mut dc = client_qp();
        dc.transport = Transport::Dc;
        let mut gidless = client_qp();
        gidless.gid = [0; 16];
        for t in [dc, gidless] {
            let hex = t.encode_hex();
            assert_eq!(
                PrepareRequest::from_headers(with(&h, header::TOKEN, Some(&hex)))
                    .unwrap_err()
                    .status,
                400
            );
        }
        let zero = "0".repeat(88);
        assert!(PrepareRequest::from_headers(with(&h, header::TOKEN, Some(&zero))).is_ok());
    }

    #[test]
    fn sessions_are_exactly_32_hex_digits() {
        let s = Session::random();
        assert_eq!(Session::parse(&s.to_string()), Ok(s));
        assert_eq!(Session::parse(&"a".repeat(31)).unwrap_err().status, 400);
        assert_eq!(Session::parse(&"g".repeat(32)).unwrap_err().status, 400);
    }

    #[test]
    fn prepare_answer_checks_of_the_client() {
        let mut server = client_qp();
        server.qp_num = 0x22;
        let a = PrepareAnswer {
            server,
            session: Session::random(),
            psn: Psn::random(),
            staging: Some((0x7f00_0000_1000, 0x1234)),
        };
        let h = lookup(&a.headers());
        assert_eq!(h[header::QPN], "22");
        assert_eq!(
            PrepareAnswer::from_headers(|k| h.get(k).map(String::as_str)).unwrap(),
            a
        );
        let none = format!("200:{}", "0".repeat(88));
        assert!(PrepareAnswer::from_headers(with(&h, header::REPLY, Some(&none))).is_err());
        assert!(PrepareAnswer::from_headers(with(&h, header::PROTOCOL, None)).is_err());
        let zero_rkey = PrepareAnswer::from_headers(with(&h, header::MR_RKEY, Some("0"))).unwrap();
        assert_eq!(zero_rkey.staging, None);
    }

    #[test]
    fn ready_final_and_cancel_round_trip() {
        let r = ReadyRequest {
            session: Session::random(),
            cookie: Cookie::random(),
            qpn: 0x1f,
            mr_addr: 0x7fff_0000,
            mr_rkey: 0xabc,
        };
        let h = lookup(&r.headers());
        assert_eq!(
            ReadyRequest::from_headers(|k| h.get(k).map(String::as_str)).unwrap(),
            r
        );
        assert!(ReadyRequest::from_headers(with(&h, header::QPN, Some("0"))).is_err());
        let f = FinalAnswer {
            cookie: r.cookie,
            bytes: 7,
            etag: Some("\"abc\"".into()),
            version_id: None,
            checksum: Some(final_crc64nvme_text(CrcAlgo::Crc64Nvme.of(b"123456789"))),
        };
        assert_eq!(f.checksum.as_deref(), Some("CRC64NVME rosUhgp5mIg="));
        let h = lookup(&f.headers());
        assert_eq!(
            FinalAnswer::from_headers(|k| h.get(k).map(String::as_str)).unwrap(),
            f
        );
        for bad in [
            "CRC64NVME rosUhgp5mIh=",
            "CRC32 abc",
            "CRC64NVME rosUhgp5mI==",
        ] {
            assert!(FinalAnswer::from_headers(with(&h, header::CHECKSUM, Some(bad))).is_err());
        }
        let c = CancelRequest { session: r.session };
        let h = lookup(&c.headers());
        assert_eq!(
            CancelRequest::from_headers(|k| h.get(k).map(String::as_str)).unwrap(),
            c
        );
    }

    #[test]
    fn the_unsupported_marker_is_only_a_501_with_the_header() {
        let marked = |k: &str| (k == header::PROTOCOL_STATUS).then_some("unsupported");
        assert!(super::super::is_unsupported(501, marked));
        assert!(!super::super::is_unsupported(501, |_| None));
        assert!(!super::super::is_unsupported(500, marked));
    }

    #[test]
    fn random_values_are_valid() {
        for _ in 0..1000 {
            assert!(Psn::parse(&Psn::random().to_string()).is_ok());
            assert!(Cookie::parse(&Cookie::random().to_string()).is_ok());
        }
    }
}
