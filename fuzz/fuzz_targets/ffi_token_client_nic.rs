//! `hipObjTokenClientNic` called through the C ABI with arbitrary token bytes and buffer sizes.
//!
//! Input: byte 0 gives `nicIpLen` (0..=31); the rest is the token's bytes. When they hold no NUL
//! and are shorter than 89 bytes a NUL is appended (the C contract); a NUL-free run of 89 or more
//! bytes is passed as is, since the function reads at most 89 bytes. The token is placed flush
//! against a guard page (so reading a byte past the NUL or past byte 89 crashes), and `nicIp` is
//! exactly `nicIpLen` bytes flush against another (so writing past `nicIpLen` crashes).
//!
//! Properties: `nicIpLen` 0 -> `hipObjInvalidValue`, nothing written; otherwise the result is the
//! model's: a malformed token (not 88 hex digits before the NUL, transport not 0/1) or a buffer
//! too small for the address and its NUL -> `hipObjInvalidValue` with `nicIp[0] == 0`; else
//! success with the NUL-terminated dotted quad of an IPv4-mapped GID or "". Bytes after the
//! written string (or after `nicIp[0]` on failure) are untouched; the token is not modified.
//! NULL token or NULL nicIp -> `hipObjInvalidValue` with nothing written.
#![no_main]

use hipobj::error::OpError;
use hipobj::ffi::{hipObjError_t, hipObjTokenClientNic};
use hipobj_fuzz::guarded::GuardedPages;
use hipobj_fuzz::model;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const CANARY: u8 = 0xa5;
/// The bytes before the guard page that are filled with the canary and checked: `nicIp` (at
/// most 31 bytes) and what precedes it.
const WATCHED: usize = 64;
const INVALID: hipObjError_t = hipObjError_t {
    opError: OpError::InvalidValue,
    hipError: 0,
};

static TOKEN: OnceLock<GuardedPages> = OnceLock::new();
static NIC_IP: OnceLock<GuardedPages> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((&len_byte, token)) = data.split_first() else {
        return;
    };
    let token_region = TOKEN.get_or_init(|| GuardedPages::new(64 * 1024));
    let out_region = NIC_IP.get_or_init(|| GuardedPages::new(1));
    let mut c_string = token.to_vec();
    if !token.contains(&0) && token.len() <= 88 {
        c_string.push(0);
    }
    if c_string.len() > token_region.capacity() {
        return;
    }
    let nic_ip_len = usize::from(len_byte % 32);

    let token_ptr = token_region.at_end(&c_string);
    out_region.at_end(&[CANARY; WATCHED]);
    let nic_ip = out_region.at_end(&[]).wrapping_sub(nic_ip_len);
    // SAFETY: `token_ptr` is a NUL-terminated string or has at least 89 readable bytes;
    // `nic_ip` is writable for `nic_ip_len` bytes.
    let status = unsafe { hipObjTokenClientNic(token_ptr.cast(), nic_ip.cast(), nic_ip_len) };
    let out = out_region.tail(nic_ip_len);
    assert_eq!(
        token_region.tail(c_string.len()),
        c_string.as_slice(),
        "token modified"
    );

    if nic_ip_len == 0 {
        assert_eq!(status, INVALID, "nicIpLen 0");
        assert!(out_region.tail(WATCHED).iter().all(|b| *b == CANARY));
        return;
    }
    let written = match model::client_nic_of_c_string(&c_string) {
        Some(text) if text.len() < nic_ip_len => {
            assert_eq!(
                status,
                hipObjError_t::SUCCESS,
                "token {c_string:?}, nicIpLen {nic_ip_len}"
            );
            assert_eq!(&out[..text.len()], text.as_bytes());
            assert_eq!(out[text.len()], 0, "not NUL-terminated");
            text.len() + 1
        }
        _ => {
            assert_eq!(status, INVALID, "token {c_string:?}, nicIpLen {nic_ip_len}");
            assert_eq!(out[0], 0, "nicIp not emptied on failure");
            1
        }
    };
    assert!(
        out[written..].iter().all(|b| *b == CANARY),
        "wrote past the string"
    );
    let before = WATCHED - nic_ip_len;
    assert!(out_region.tail(WATCHED)[..before]
        .iter()
        .all(|b| *b == CANARY));

    // Argument checks: nothing is written.
    out_region.at_end(&[CANARY; WATCHED]);
    // SAFETY: NULL token is a documented input; `nic_ip` is writable for nic_ip_len bytes.
    let status = unsafe { hipObjTokenClientNic(std::ptr::null(), nic_ip.cast(), nic_ip_len) };
    assert_eq!(status, INVALID, "NULL token");
    // SAFETY: as above, with NULL nicIp.
    let status2 =
        unsafe { hipObjTokenClientNic(token_ptr.cast(), std::ptr::null_mut(), nic_ip_len) };
    assert_eq!(status2, INVALID, "NULL nicIp");
    assert!(out_region.tail(WATCHED).iter().all(|b| *b == CANARY));
});
