//! Argument validation through the C ABI: the order of the checks, and that a rejected call
//! leaves its outputs alone (except hipObjTokenClientNic's documented "").

mod common;
use common::*;
use hipobj::ffi::args;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr::{null, null_mut};

const HTTP_SENTINEL: c_int = -12345;

fn invalid() -> hipObjError_t {
    err(OpError::InvalidValue)
}

#[test]
fn init_rejects_invalid_configs() {
    let hint = c"rxe0";
    let configs = [
        hipObjConfig_t {
            flags: 1,
            ..Default::default()
        },
        hipObjConfig_t {
            flags: u32::MAX,
            gpuDevice: -1,
            nicHint: hint.as_ptr(),
            ..Default::default()
        },
        hipObjConfig_t {
            flags: 1,
            gpuDevice: -2,
            ..Default::default()
        },
        hipObjConfig_t {
            gpuDevice: -2,
            ..Default::default()
        },
        hipObjConfig_t {
            gpuDevice: i32::MIN,
            nicHint: hint.as_ptr(),
            ..Default::default()
        },
    ];
    // SAFETY: NULL or live configs with NULL or literal hints.
    unsafe {
        assert_eq!(hipObjInit(null_mut()), invalid());
        for mut c in configs {
            assert_eq!(hipObjInit(&mut c), invalid(), "{c:?}");
        }
        // Still not initialised afterwards.
        let mut out: *mut c_char = null_mut();
        let b = [0u8; 8];
        assert_eq!(
            hipObjGetRdmaToken(b.as_ptr().cast(), 8, 0, &mut out),
            err(OpError::NotInitialized)
        );
    }
}

fn parse(input: &[u8]) -> (hipObjError_t, c_int) {
    let mut code = HTTP_SENTINEL;
    // SAFETY: `input` is readable for its length; `code` is writable.
    let r = unsafe { hipObjParseRdmaReply(input.as_ptr().cast(), input.len(), &mut code) };
    (r, code)
}

#[test]
fn parse_reply_argument_checks() {
    let mut code = HTTP_SENTINEL;
    // SAFETY: NULL pointers are rejected before use; the others are valid.
    unsafe {
        assert_eq!(hipObjParseRdmaReply(null(), 3, &mut code), invalid());
        assert_eq!(hipObjParseRdmaReply(null(), 0, &mut code), invalid());
        assert_eq!(
            hipObjParseRdmaReply(c"200".as_ptr(), 3, null_mut()),
            invalid()
        );
        assert_eq!(hipObjParseRdmaReply(null(), 0, null_mut()), invalid());
        assert_eq!(
            hipObjParseRdmaReply(c"200".as_ptr(), 0, &mut code),
            invalid()
        );
        // A length no buffer can have is refused before anything is read.
        assert_eq!(
            hipObjParseRdmaReply(c"200".as_ptr(), usize::MAX, &mut code),
            invalid()
        );
    }
    assert_eq!(code, HTTP_SENTINEL);
}

#[test]
fn parse_reply_tables() {
    let tok = EXAMPLE_TOKEN.to_str().expect("ASCII");
    let accepted: Vec<(Vec<u8>, c_int)> = vec![
        (b"ok".to_vec(), 200),
        (b"ok\n".to_vec(), 200),
        (b"err".to_vec(), -1),
        (b"200".to_vec(), 200),
        (b"204".to_vec(), 204),
        (b"206".to_vec(), 206),
        (b"404".to_vec(), 404),
        (b"501".to_vec(), 501),
        (b"100".to_vec(), 100),
        (b"599".to_vec(), 599),
        (b"428".to_vec(), 428),
        (b"200\r\n".to_vec(), 200),
        (b"200\0\0".to_vec(), 200),
        (format!("200:{tok}").into_bytes(), 200),
        (format!("200:00{}", &tok[2..]).into_bytes(), 200),
        (
            format!("200:{}", tok.to_ascii_uppercase()).into_bytes(),
            200,
        ),
        (format!("428:{tok}").into_bytes(), 428),
    ];
    for (input, want) in accepted {
        assert_eq!(
            parse(&input),
            (OK, want),
            "{:?}",
            String::from_utf8_lossy(&input)
        );
    }
    assert_eq!(parse(&b"2004"[..3]), (OK, 200));
    let rejected: Vec<Vec<u8>> = [
        "",
        "\r\n",
        "ok ",
        " 200",
        "200 ",
        "okay",
        "OK",
        "error",
        "abc",
        "20",
        "2000",
        "0200",
        "+200",
        "-200",
        "2x0",
        "099",
        "600",
        "999",
        "200\r\n200",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([
        b"2\0 00".to_vec(),
        b"200:".to_vec(),
        format!(":{tok}").into_bytes(),
        format!("200:{}", &tok[..87]).into_bytes(),
        format!("200:{tok}0").into_bytes(),
        format!("200:{tok}:1:2").into_bytes(),
        format!("200: {}", &tok[1..]).into_bytes(),
        format!("200:{}", "g".repeat(88)).into_bytes(),
        format!("200:02{}", &tok[2..]).into_bytes(),
        format!("200:ff{}", &tok[2..]).into_bytes(),
        format!("206:{tok}").into_bytes(),
        format!("404:{tok}").into_bytes(),
        format!("501:{tok}").into_bytes(),
        format!("ok:{tok}").into_bytes(),
    ])
    .collect();
    for input in rejected {
        assert_eq!(
            parse(&input),
            (invalid(), HTTP_SENTINEL),
            "{:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

fn client_nic(token: *const c_char, len: usize) -> (hipObjError_t, Vec<u8>) {
    let mut buf = [b'Z' as c_char; 32];
    // SAFETY: token is NULL or NUL-terminated (or readable for 89 bytes); buf holds 32 >= len.
    let r = unsafe { hipObjTokenClientNic(token, buf.as_mut_ptr(), len) };
    (r, buf.iter().map(|&c| c as u8).collect())
}

fn c_text(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).expect("NUL-terminated");
    &buf[..end]
}

#[test]
fn token_client_nic_checks_and_outputs() {
    let tok = EXAMPLE_TOKEN;
    // Rejections before anything is written.
    let (r, buf) = client_nic(null(), 32);
    assert_eq!((r, buf[0]), (invalid(), b'Z'));
    let (r, buf) = client_nic(tok.as_ptr(), 0);
    assert_eq!((r, buf[0]), (invalid(), b'Z'));
    assert_eq!(
        // SAFETY: NULL nicIp is rejected before use.
        unsafe { hipObjTokenClientNic(tok.as_ptr(), null_mut(), 16) },
        invalid()
    );

    // Success: the address, and exactly 16 bytes needed for "192.168.100.200".
    let (r, buf) = client_nic(tok.as_ptr(), 16);
    assert_eq!((r, c_text(&buf)), (OK, &b"192.168.100.200"[..]));
    assert_eq!(buf[16], b'Z', "nothing written past the NUL");
    let (r, buf) = client_nic(tok.as_ptr(), 15);
    assert_eq!((r, buf[0], buf[1]), (invalid(), 0, b'Z'));
    let (r, buf) = client_nic(tok.as_ptr(), 1);
    assert_eq!((r, buf[0], buf[1]), (invalid(), 0, b'Z'));

    // Not IPv4-mapped: success with "".
    let s = tok.to_str().expect("ASCII");
    let not_mapped = [
        format!("{}fe80000000000000000000000000000a{}", &s[..10], &s[42..]),
        format!("{}01000000000000000000ffffc0a864c8{}", &s[..10], &s[42..]),
        format!("{}00000000000000000001ffffc0a864c8{}", &s[..10], &s[42..]),
        format!("{}00000000000000000000fffec0a864c8{}", &s[..10], &s[42..]),
    ];
    for t in not_mapped {
        let c = CString::new(t).expect("no NUL");
        let (r, buf) = client_nic(c.as_ptr(), 1);
        assert_eq!((r, buf[0], buf[1]), (OK, 0, b'Z'), "{c:?}");
    }

    // Malformed tokens: InvalidValue with "".
    for t in [
        &s[..87],
        "",
        &format!("{s}0"),
        &format!("{s}:00007f0000001000:0000000000001000"),
        &format!("02{}", &s[2..]),
        &format!("{}g", &s[..87]),
    ] {
        let c = CString::new(t).expect("no NUL");
        let (r, buf) = client_nic(c.as_ptr(), 32);
        assert_eq!((r, buf[0], buf[1]), (invalid(), 0, b'Z'), "{c:?}");
    }
    // A token with no NUL within 89 bytes is rejected without reading further.
    let unterminated = [b'0' as c_char; 89];
    let (r, buf) = client_nic(unterminated.as_ptr(), 32);
    assert_eq!((r, buf[0]), (invalid(), 0));
}

#[test]
fn get_version_skips_null_parts() {
    let (mut a, mut b, mut c): (c_uint, c_uint, c_uint) = (99, 99, 99);
    // SAFETY: live or NULL pointers.
    unsafe {
        assert_eq!(hipObjGetVersion(null_mut(), null_mut(), null_mut()), OK);
        assert_eq!(hipObjGetVersion(&mut a, null_mut(), &mut c), OK);
        assert_eq!(
            (a, b, c),
            (hipobj::version::MAJOR, 99, hipobj::version::PATCH)
        );
        assert_eq!(hipObjGetVersion(null_mut(), &mut b, null_mut()), OK);
        assert_eq!(b, hipobj::version::MINOR);
        let s = CStr::from_ptr(hipObjGetVersionString())
            .to_str()
            .expect("ASCII");
        assert_eq!(s, format!("{a}.{b}.{c}"));
        assert_eq!(
            hipObjGetVersionString(),
            hipObjGetVersionString(),
            "static, not reallocated"
        );
    }
}

#[test]
fn put_rdma_token() {
    // A token is a CString handed out with into_raw; this stands in for one minted by the core.
    let t = CString::new("0".repeat(88)).expect("no NUL").into_raw();
    // SAFETY: `t` came from CString::into_raw and is released once.
    unsafe {
        assert_eq!(hipObjPutRdmaToken(t), OK);
        assert_eq!(hipObjPutRdmaToken(null_mut()), invalid());
    }
}

#[test]
fn error_strings() {
    let s = |v: c_int| {
        // SAFETY: the results are static C strings.
        unsafe { CStr::from_ptr(hipObjGetErrorString(v)) }
            .to_str()
            .expect("ASCII")
            .to_owned()
    };
    // 0..=12: hipobj.h's codes; 13: hipObjNotSupported of the hipobj_v2.h extension.
    let all: Vec<String> = (0..=13).map(s).collect();
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 14, "{all:?}");
    assert!(all.iter().all(|x| x != "Unknown error" && !x.is_empty()));
    assert_eq!(all[0], "Success");
    assert!(all[12].to_lowercase().contains("busy"));
    assert_eq!(all[13], "hipobj-rc-v2 not supported by server");
    for v in [-1, 14, 6000, c_int::MIN, c_int::MAX] {
        assert_eq!(s(v), "Unknown error");
    }
}

// The checks after initialisation, through the same functions the exports use. (With no core
// that can initialise on this host, the exports themselves stop at hipObjNotInitialized.)

unsafe extern "C" fn send(_: *mut c_void, _: *const c_char, _: usize) -> c_int {
    0
}
unsafe extern "C" fn recv(_: *mut c_void, _: *mut c_char, _: *mut usize) -> c_int {
    0
}

fn detail<T>(r: hipobj::error::Result<T>) -> (OpError, String) {
    match r {
        Ok(_) => panic!("expected a rejection"),
        Err(e) => (e.code, e.detail.into_owned()),
    }
}

#[test]
fn transfer_check_order() {
    let b = [0u8; 8];
    let p = b.as_ptr().cast::<c_void>();
    let both = hipObjOps_t {
        sendRequest: Some(send),
        recvReply: Some(recv),
    };
    let half = hipObjOps_t {
        sendRequest: Some(send),
        recvReply: None,
    };
    // SAFETY: NULL or live hipObjOps_t.
    unsafe {
        // ops before everything else.
        let (c, d) = detail(args::transfer_request(null(), null(), 0, -1));
        assert_eq!(
            (c, d.contains("ops is NULL")),
            (OpError::InvalidValue, true)
        );
        let (c, d) = detail(args::transfer_request(&half, null(), 0, -1));
        assert_eq!((c, d.contains("callback")), (OpError::InvalidValue, true));
        // then devPtr, size, offset.
        let (_, d) = detail(args::transfer_request(&both, null(), 0, -1));
        assert!(d.contains("pointer"), "{d}");
        let (_, d) = detail(args::transfer_request(&both, p, 0, -1));
        assert!(d.contains("size"), "{d}");
        let (_, d) = detail(args::transfer_request(&both, p, 8, -1));
        assert!(d.contains("offset"), "{d}");
        let (_, _, span) = args::transfer_request(&both, p, 8, 3).expect("valid");
        assert_eq!((span.ptr, span.size, span.offset), (p as usize, 8, 3));
    }
}

#[test]
fn sync_check_order() {
    let b = [0u8; 8];
    let p = b.as_ptr().cast::<c_void>();
    let (c, d) = detail(args::sync_request(null(), 0, -1, 2));
    assert_eq!((c, d.contains("direction")), (OpError::InvalidValue, true));
    let (_, d) = detail(args::sync_request(null(), 0, -1, 1));
    assert!(d.contains("pointer"), "{d}");
    let (_, d) = detail(args::sync_request(p, 8, -1, 0));
    assert!(d.contains("offset"), "{d}");
    assert!(args::sync_request(p, 8, 0, 0).is_ok());
}

#[test]
fn token_check_order() {
    let b = [0u8; 8];
    let p = b.as_ptr().cast::<c_void>();
    let mut out: *mut c_char = null_mut();
    let (c, d) = detail(args::token_request(null_mut(), 5, null(), 0));
    assert_eq!((c, d.contains("outToken")), (OpError::InvalidValue, true));
    let (_, d) = detail(args::token_request(&mut out, 5, null(), 0));
    assert!(d.contains("op is"), "{d}");
    let (_, d) = detail(args::token_request(&mut out, 1, null(), 8));
    assert!(d.contains("pointer"), "{d}");
    let (_, d) = detail(args::token_request(&mut out, 0, p, 0));
    assert!(d.contains("size"), "{d}");
    assert!(args::token_request(&mut out, 0, p, 8).is_ok());
    assert!(out.is_null(), "checks write nothing");
}

#[test]
fn register_check_order() {
    let b = [0u8; 8];
    let p = b.as_ptr().cast::<c_void>();
    assert_eq!(
        detail(args::registration(null(), 8)).0,
        OpError::InvalidValue
    );
    assert_eq!(detail(args::registration(p, 0)).0, OpError::InvalidValue);
    assert_eq!(
        detail(args::registration(p, (4 << 30) + 1)).0,
        OpError::SizeTooLarge
    );
    assert!(args::registration(p, 4 << 30).is_ok());
    assert_eq!(
        detail(args::registration(usize::MAX as *const c_void, 4 << 30)).0,
        OpError::InvalidValue
    );
}
