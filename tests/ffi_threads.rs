//! The functions that need no initialisation, and the not-initialised answers, from many threads
//! at once (the header allows any function on any thread at any time).

mod common;
use common::*;
use std::ffi::{c_char, c_int, CStr};
use std::ptr::null_mut;

#[test]
fn concurrent_calls_give_the_same_answers() {
    let threads: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                for j in 0..500 {
                    let mut code: c_int = 0;
                    let input = if (i + j) % 2 == 0 {
                        &b"206"[..]
                    } else {
                        &b"ok\r\n"[..]
                    };
                    // SAFETY: live buffers and outputs.
                    unsafe {
                        assert_eq!(
                            hipObjParseRdmaReply(input.as_ptr().cast(), input.len(), &mut code),
                            OK
                        );
                        assert_eq!(code, if input == b"206" { 206 } else { 200 });
                        let mut ip = [0 as c_char; 16];
                        assert_eq!(
                            hipObjTokenClientNic(EXAMPLE_TOKEN.as_ptr(), ip.as_mut_ptr(), 16),
                            OK
                        );
                        assert_eq!(CStr::from_ptr(ip.as_ptr()), c"192.168.100.200");
                        assert_eq!(CStr::from_ptr(hipObjGetErrorString(12)), c"Resource busy");
                        let mut b = [0u8; 8];
                        assert_eq!(
                            hipObjBufRegisterHost(b.as_mut_ptr().cast(), 8),
                            err(OpError::NotInitialized)
                        );
                        assert_eq!(hipObjShutdown(), OK);
                        let mut out: *mut c_char = null_mut();
                        assert_eq!(
                            hipObjGetRdmaToken(b.as_ptr().cast(), 8, 1, &mut out),
                            err(OpError::NotInitialized)
                        );
                        assert!(out.is_null());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}
