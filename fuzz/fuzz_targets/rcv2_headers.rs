//! The hipobj-rc-v2 header codec (`hipobj::rcv2`, docs/protocol.md 13.2-13.5) as `hipobj-server`
//! uses it on PREPARE, READY and CANCEL, and as clients use it on the answers.
//!
//! Mode A (first byte even): a valid PREPARE and READY, with the header the first byte picks
//! replaced by the rest of the input (or removed). Properties: the parse fails exactly when the
//! independent model of that one header (written from docs/protocol.md 13.2-13.4 tables: `%06x` PSN
//! 1..=0xffffff, `%08x` cookie != 0, decimal size 1..=2^31-1 with 413 above, `GET`/`PUT`,
//! 32-hex session, bare-hex QPN 1..=0xffffff / address / rkey, the protocol name) rejects the
//! value, with the model's status; a refusal is 400, 413 or 501 and nothing else; an accepted
//! message re-encodes (`headers`) to a form that parses back to the same encoding; an accepted
//! target's `encode` parses back to the same target.
//!
//! Mode B (first byte odd): the rest is a block of `name: value` lines; all five messages are
//! parsed from it. Properties: refusals are 400/413/501; whatever parses re-encodes stably.
#![no_main]

use std::collections::HashMap;

use hipobj::rcv2::{
    header, CancelRequest, FinalAnswer, PrepareAnswer, PrepareRequest, ReadyRequest, Target,
    WireError, MAX_TRANSFER, PROTOCOL,
};
use hipobj::token::{Token, Transport};
use libfuzzer_sys::fuzz_target;

type Headers = HashMap<String, String>;

fn lookup<'h>(h: &'h Headers) -> impl Fn(&str) -> Option<&'h str> + 'h {
    move |n: &str| h.get(n).map(String::as_str)
}

fn from_pairs(pairs: Vec<(&'static str, String)>) -> Headers {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn client_qp() -> Token {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[10, 1, 2, 3]);
    Token {
        transport: Transport::Rc,
        qp_num: 0x4242,
        gid,
        rkey: 0,
        remote_addr: 0,
        length: 0,
        port: 1,
        lid: 0,
    }
}

fn base_prepare() -> Headers {
    from_pairs(vec![
        (header::PROTOCOL, PROTOCOL.to_string()),
        (header::TOKEN, client_qp().encode_hex()),
        (header::PSN, "abcdef".to_string()),
        (header::COOKIE, "12345678".to_string()),
        (header::OP, "PUT".to_string()),
        (
            header::TARGET,
            "/bkt/dir/obj?partNumber=2&uploadId=xyz".to_string(),
        ),
        (header::SIZE, "4096".to_string()),
        (header::OFFSET, "0".to_string()),
    ])
}

fn base_ready() -> Headers {
    from_pairs(vec![
        (header::PROTOCOL, PROTOCOL.to_string()),
        (
            header::SESSION,
            "00112233445566778899aabbccddeeff".to_string(),
        ),
        (header::COOKIE, "12345678".to_string()),
        (header::QPN, "4242".to_string()),
        (header::MR_ADDR, "7f0000001000".to_string()),
        (header::MR_RKEY, "1f2e".to_string()),
    ])
}

/// Exactly `n` hex digits (either case).
fn fixed_hex(v: &str, n: usize) -> Option<u64> {
    (v.len() == n && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(v, 16).ok())
        .flatten()
}

/// 1..=16 hex digits after an optional `0x`.
fn bare_hex(v: &str) -> Option<u64> {
    let d = v
        .strip_prefix("0x")
        .or_else(|| v.strip_prefix("0X"))
        .unwrap_or(v);
    (!d.is_empty() && d.len() <= 16 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(d, 16).ok())
        .flatten()
}

fn decimal(v: &str) -> Option<u64> {
    (!v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse().ok())
        .flatten()
}

/// The model: the status a server answers for `value` in header `name` (`None`: accepted), or
/// `Some(None)` when the model has no opinion (token, target: round trips only).
fn model(name: &str, value: Option<&str>) -> Option<Option<u16>> {
    let Some(raw) = value else {
        // Missing: the protocol is 501; offset, address and rkey optional; anything else 400.
        return Some(match name {
            n if n == header::PROTOCOL => Some(501),
            n if n == header::OFFSET || n == header::MR_ADDR || n == header::MR_RKEY => None,
            _ => Some(400),
        });
    };
    let v = raw.trim();
    let ok = |accepted: bool| Some((!accepted).then_some(400));
    match name {
        n if n == header::PROTOCOL => Some((!v.eq_ignore_ascii_case(PROTOCOL)).then_some(501)),
        n if n == header::PSN => ok(fixed_hex(v, 6).is_some_and(|p| p != 0)),
        n if n == header::COOKIE => ok(fixed_hex(v, 8).is_some_and(|c| c != 0)),
        n if n == header::SESSION => ok(v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit())),
        n if n == header::OP => ok(v == "GET" || v == "PUT"),
        n if n == header::SIZE => Some(match decimal(v) {
            None | Some(0) => Some(400),
            Some(s) if s > MAX_TRANSFER => Some(413),
            Some(_) => None,
        }),
        n if n == header::OFFSET => ok(decimal(v).is_some()),
        n if n == header::QPN => ok(bare_hex(v).is_some_and(|x| (1..=0xff_ffff).contains(&x))),
        n if n == header::MR_RKEY => ok(bare_hex(v).is_some_and(|x| x <= u64::from(u32::MAX))),
        n if n == header::MR_ADDR => ok(bare_hex(v).is_some()),
        // Token and target: no model here (their own targets and round trips cover them).
        _ => None,
    }
}

fn check_refusal(e: &WireError) {
    assert!(
        matches!(e.status, 400 | 413 | 501),
        "refusal with status {}: {}",
        e.status,
        e.message
    );
}

fn check_prepare(p: &PrepareRequest) {
    let again = from_pairs(p.headers());
    let q = PrepareRequest::from_headers(lookup(&again)).expect("re-encoded PREPARE parses");
    assert_eq!(q.headers(), p.headers(), "PREPARE encoding is stable");
    assert_eq!(
        (q.psn, q.cookie, q.op, q.size, q.offset),
        (p.psn, p.cookie, p.op, p.size, p.offset)
    );
    assert_eq!(q.target, p.target);
    assert_eq!(Target::parse(&p.target.encode()), Ok(p.target.clone()));
}

fn check_ready(r: &ReadyRequest) {
    let again = from_pairs(r.headers());
    assert_eq!(ReadyRequest::from_headers(lookup(&again)).as_ref(), Ok(r));
}

fn mode_a(data: &[u8]) {
    let (&pick, rest) = data.split_first().unwrap_or((&0, &[]));
    let value = String::from_utf8_lossy(rest);
    let prepare_fields = [
        header::PROTOCOL,
        header::TOKEN,
        header::PSN,
        header::COOKIE,
        header::OP,
        header::TARGET,
        header::SIZE,
        header::OFFSET,
    ];
    let ready_fields = [
        header::SESSION,
        header::COOKIE,
        header::QPN,
        header::MR_ADDR,
        header::MR_RKEY,
    ];
    let remove = pick & 0x80 != 0;
    let index = usize::from(pick >> 1 & 0x3f);
    let replaced = |mut h: Headers, name: &str| {
        if remove {
            h.remove(name);
        } else {
            h.insert(name.to_string(), value.to_string());
        }
        h
    };
    let new_value = (!remove).then_some(value.as_ref());
    if index < prepare_fields.len() {
        let name = prepare_fields[index];
        let h = replaced(base_prepare(), name);
        let got = PrepareRequest::from_headers(lookup(&h));
        match (&got, model(name, new_value)) {
            (Ok(p), Some(None)) => check_prepare(p),
            (Err(e), Some(Some(want))) => assert_eq!(e.status, want, "{name}: {value:?}: {e}"),
            (Ok(p), None) => check_prepare(p),
            (Err(e), None) => check_refusal(e),
            (got, Some(want)) => panic!("{name}={value:?}: codec {got:?}, model {want:?}"),
        }
    } else {
        let name = ready_fields[(index - prepare_fields.len()) % ready_fields.len()];
        let h = replaced(base_ready(), name);
        let got = ReadyRequest::from_headers(lookup(&h));
        match (&got, model(name, new_value)) {
            (Ok(r), Some(None)) => check_ready(r),
            (Err(e), Some(Some(want))) => assert_eq!(e.status, want, "{name}: {value:?}: {e}"),
            (got, want) => panic!("{name}={value:?}: codec {got:?}, model {want:?}"),
        }
        if name == header::SESSION {
            let c = replaced(
                from_pairs(vec![(header::PROTOCOL, PROTOCOL.to_string())]),
                header::SESSION,
            );
            let cancel = CancelRequest::from_headers(lookup(&c));
            assert_eq!(
                cancel.is_ok(),
                got.is_ok(),
                "CANCEL and READY agree on {value:?}"
            );
        }
    }
}

fn mode_b(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let h: Headers = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.to_string()))
        .collect();
    match PrepareRequest::from_headers(lookup(&h)) {
        Ok(p) => check_prepare(&p),
        Err(e) => check_refusal(&e),
    }
    match ReadyRequest::from_headers(lookup(&h)) {
        Ok(r) => check_ready(&r),
        Err(e) => check_refusal(&e),
    }
    match CancelRequest::from_headers(lookup(&h)) {
        Ok(c) => {
            let again = from_pairs(c.headers());
            assert_eq!(CancelRequest::from_headers(lookup(&again)), Ok(c));
        }
        Err(e) => check_refusal(&e),
    }
    // The answers as a client parses them: what parses re-encodes stably (the server token is
    // sent as its QP identity, so compare encodings).
    if let Ok(a) = PrepareAnswer::from_headers(lookup(&h)) {
        let again = from_pairs(a.headers());
        let b = PrepareAnswer::from_headers(lookup(&again)).expect("re-encoded answer parses");
        assert_eq!(b.headers(), a.headers());
    }
    if let Ok(f) = FinalAnswer::from_headers(lookup(&h)) {
        let again = from_pairs(f.headers());
        assert_eq!(FinalAnswer::from_headers(lookup(&again)), Ok(f));
    }
}

fuzz_target!(|data: &[u8]| {
    match data.first() {
        Some(b) if b & 1 == 1 => mode_b(&data[1..]),
        _ => mode_a(data),
    }
});
