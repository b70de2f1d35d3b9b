//! The exports, declared as a C program sees them (by symbol name, C ABI), for the ffi tests.
#![allow(dead_code, non_snake_case)]

pub use hipobj::error::OpError;
pub use hipobj::ffi::types::{hipObjConfig_t, hipObjError_t, hipObjHandle_t, hipObjOps_t};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

// Link the library whose symbols these declarations name.
use hipobj as _;

extern "C" {
    pub fn hipObjGetErrorString(err: c_int) -> *const c_char;
    pub fn hipObjInit(config: *mut hipObjConfig_t) -> hipObjError_t;
    pub fn hipObjShutdown() -> hipObjError_t;
    pub fn hipObjBufRegister(devPtr: *mut c_void, size: usize) -> hipObjError_t;
    pub fn hipObjBufRegisterHost(hostPtr: *mut c_void, size: usize) -> hipObjError_t;
    pub fn hipObjBufDeregister(devPtr: *mut c_void) -> hipObjError_t;
    pub fn hipObjGet(
        handle: hipObjHandle_t,
        devPtr: *mut c_void,
        size: usize,
        offset: libc::off_t,
        ops: *mut hipObjOps_t,
        ctx: *mut c_void,
    ) -> hipObjError_t;
    pub fn hipObjPut(
        handle: hipObjHandle_t,
        devPtr: *const c_void,
        size: usize,
        offset: libc::off_t,
        ops: *mut hipObjOps_t,
        ctx: *mut c_void,
    ) -> hipObjError_t;
    pub fn hipObjBufSync(
        devPtr: *mut c_void,
        size: usize,
        offset: libc::off_t,
        direction: c_int,
    ) -> hipObjError_t;
    pub fn hipObjGetRdmaToken(
        devPtr: *const c_void,
        size: usize,
        op: c_int,
        outToken: *mut *mut c_char,
    ) -> hipObjError_t;
    pub fn hipObjPutRdmaToken(token: *mut c_char) -> hipObjError_t;
    pub fn hipObjParseRdmaReply(
        reply: *const c_char,
        replyLen: usize,
        httpCode: *mut c_int,
    ) -> hipObjError_t;
    pub fn hipObjTokenClientNic(
        token: *const c_char,
        nicIp: *mut c_char,
        nicIpLen: usize,
    ) -> hipObjError_t;
    pub fn hipObjGetVersionString() -> *const c_char;
    pub fn hipObjGetVersion(
        major: *mut c_uint,
        minor: *mut c_uint,
        patch: *mut c_uint,
    ) -> hipObjError_t;
}

pub fn err(code: OpError) -> hipObjError_t {
    hipObjError_t {
        opError: code,
        hipError: 0,
    }
}

pub const OK: hipObjError_t = hipObjError_t {
    opError: OpError::Success,
    hipError: 0,
};

/// docs/protocol.md section 2's worked example: RC, GID ::ffff:192.168.100.200.
pub const EXAMPLE_TOKEN: &CStr =
    c"015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";

/// Callbacks that count their calls, to show that rejected transfers never call them.
#[derive(Default)]
pub struct CallCounter {
    pub sends: usize,
    pub recvs: usize,
}

pub unsafe extern "C" fn counting_send(
    ctx: *mut c_void,
    _token: *const c_char,
    _len: usize,
) -> c_int {
    // SAFETY: tests pass a live CallCounter as ctx.
    unsafe { (*ctx.cast::<CallCounter>()).sends += 1 };
    0
}

pub unsafe extern "C" fn counting_recv(
    ctx: *mut c_void,
    reply: *mut c_char,
    len: *mut usize,
) -> c_int {
    // SAFETY: tests pass a live CallCounter as ctx; reply/len are the library's.
    unsafe {
        (*ctx.cast::<CallCounter>()).recvs += 1;
        *reply = b'2' as c_char;
        *len = 1;
    }
    0
}

pub fn counting_ops() -> hipObjOps_t {
    hipObjOps_t {
        sendRequest: Some(counting_send),
        recvReply: Some(counting_recv),
    }
}
