//! Every export that needs an initialised library answers `hipObjNotInitialized` before looking
//! at its arguments, writes no output, and calls no callback. No test here initialises hipObject.

mod common;
use common::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{null, null_mut};

const SENTINEL_PTR: *mut c_char = 0x5a5a as *mut c_char;

fn not_init() -> hipObjError_t {
    err(OpError::NotInitialized)
}

#[test]
fn shutdown_without_init_is_a_successful_no_op() {
    // SAFETY: no arguments.
    unsafe {
        assert_eq!(hipObjShutdown(), OK);
        assert_eq!(hipObjShutdown(), OK);
    }
    // No test here initialises hipObject, so no call may have started the supervisor.
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    assert!(
        !threads.iter().any(|name| name.starts_with("hipobj")),
        "hipObjShutdown without init started a thread: {threads:?}"
    );
}

#[test]
fn registration_functions() {
    let mut buf = [0u8; 64];
    let p = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: the library must not touch these pointers before checking initialisation.
    unsafe {
        for (ptr, size) in [
            (p, 64),
            (null_mut(), 0),
            (p, 0),
            (null_mut(), usize::MAX),
            (usize::MAX as *mut c_void, 2),
        ] {
            assert_eq!(hipObjBufRegister(ptr, size), not_init());
            assert_eq!(hipObjBufRegisterHost(ptr, size), not_init());
        }
        assert_eq!(hipObjBufRegister(p, (4usize << 30) + 1), not_init());
        assert_eq!(hipObjBufDeregister(p), not_init());
        assert_eq!(hipObjBufDeregister(null_mut()), not_init());
    }
    assert_eq!(buf, [0u8; 64]);
}

#[test]
fn transfers_check_initialisation_before_callbacks_and_arguments() {
    let mut buf = [0u8; 64];
    let p = buf.as_mut_ptr().cast::<c_void>();
    let mut counter = CallCounter::default();
    let ctx = (&mut counter as *mut CallCounter).cast::<c_void>();
    let mut ops = counting_ops();
    let mut no_ops = hipObjOps_t::default();
    // SAFETY: valid or NULL pointers; the library must reject before using any of them.
    unsafe {
        for (ptr, size, offset, o) in [
            (p, 64, 0, &mut ops as *mut hipObjOps_t),
            (p, 64, 0, null_mut()),
            (p, 64, 0, &mut no_ops as *mut hipObjOps_t),
            (null_mut(), 0, -1, &mut ops as *mut hipObjOps_t),
        ] {
            assert_eq!(hipObjGet(null_mut(), ptr, size, offset, o, ctx), not_init());
            assert_eq!(hipObjPut(null_mut(), ptr, size, offset, o, ctx), not_init());
        }
        for dir in [0, 1, 2, -1] {
            assert_eq!(hipObjBufSync(p, 64, 0, dir), not_init());
            assert_eq!(hipObjBufSync(null_mut(), 0, -1, dir), not_init());
        }
    }
    assert_eq!((counter.sends, counter.recvs), (0, 0));
    assert_eq!(buf, [0u8; 64]);
}

#[test]
fn get_rdma_token_leaves_the_output_alone() {
    let buf = [0u8; 64];
    let p = buf.as_ptr().cast::<c_void>();
    let mut out: *mut c_char = SENTINEL_PTR;
    // SAFETY: `out` is a live pointer slot; NULL is checked after initialisation.
    unsafe {
        for (ptr, size, op) in [(p, 64, 0), (p, 64, 1), (null(), 0, 7)] {
            assert_eq!(hipObjGetRdmaToken(ptr, size, op, &mut out), not_init());
            assert_eq!(out, SENTINEL_PTR);
        }
        assert_eq!(hipObjGetRdmaToken(p, 64, 0, null_mut()), not_init());
    }
}

#[test]
fn init_free_functions_work() {
    // SAFETY: valid arguments.
    unsafe {
        let v = CStr::from_ptr(hipObjGetVersionString());
        assert_eq!(v.to_str().expect("ASCII"), env!("CARGO_PKG_VERSION"));
        let mut code: c_int = 0;
        assert_eq!(hipObjParseRdmaReply(c"204".as_ptr(), 3, &mut code), OK);
        assert_eq!(code, 204);
        let mut ip = [0x55 as c_char; 16];
        assert_eq!(
            hipObjTokenClientNic(EXAMPLE_TOKEN.as_ptr(), ip.as_mut_ptr(), ip.len()),
            OK
        );
        assert_eq!(CStr::from_ptr(ip.as_ptr()), c"192.168.100.200");
        assert_eq!(hipObjPutRdmaToken(null_mut()), err(OpError::InvalidValue));
        assert!(!hipObjGetErrorString(2).is_null());
    }
}

#[test]
fn a_pairing_reply_without_init_just_parses() {
    let tok = EXAMPLE_TOKEN.to_str().expect("ASCII");
    let reply = format!("428:{tok}");
    let mut code: c_int = 0;
    // SAFETY: `reply` is readable for its length; `code` is writable.
    unsafe {
        assert_eq!(
            hipObjParseRdmaReply(reply.as_ptr().cast(), reply.len(), &mut code),
            OK
        );
    }
    assert_eq!(code, 428);
}

#[test]
fn rail_stats() {
    use hipobj::ffi::rails::{hipObjRailStats, hipObjRailStats_t};
    let mut count = usize::MAX;
    let mut stats = [hipObjRailStats_t::from(
        &hipobj::runtime::RailStats::default(),
    )];
    let before = stats;
    // SAFETY: valid pointers for what the call may write; NULLs must be refused unread.
    unsafe {
        assert_eq!(
            hipObjRailStats(stats.as_mut_ptr(), 1, &mut count),
            not_init()
        );
        assert_eq!(hipObjRailStats(null_mut(), 1, null_mut()), not_init());
    }
    assert_eq!((count, stats), (usize::MAX, before), "nothing written");
}
