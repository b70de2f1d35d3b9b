//! `#[repr(C)]` copies of the types of `include/hipobj.h`. Field names follow the header.
#![allow(non_camel_case_types, non_snake_case)]

use crate::error::OpError;
use std::ffi::{c_char, c_int, c_void};

/// `hipObjOpError_t`: a C enum, `int`-sized. Arguments of this type arrive as a raw `c_int`
/// (a C caller can pass any value); results use [`OpError`], whose values match the header.
pub type hipObjOpError_t = c_int;

/// `hipObjHandle_t`: the application's object handle, passed through unused.
pub type hipObjHandle_t = *mut c_void;

/// `hipObjError_t`, returned by value from every fallible export.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hipObjError_t {
    pub opError: OpError,
    pub hipError: c_int,
}

impl hipObjError_t {
    pub const SUCCESS: hipObjError_t = hipObjError_t {
        opError: OpError::Success,
        hipError: 0,
    };
}

/// `hipObjOps_t.sendRequest`.
pub type SendRequestFn =
    unsafe extern "C" fn(ctx: *mut c_void, token: *const c_char, tokenLen: usize) -> c_int;
/// `hipObjOps_t.recvReply`.
pub type RecvReplyFn =
    unsafe extern "C" fn(ctx: *mut c_void, reply: *mut c_char, replyLen: *mut usize) -> c_int;

/// `hipObjOps_t`: the application's S3 client. A NULL callback is `None`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hipObjOps_t {
    pub sendRequest: Option<SendRequestFn>,
    pub recvReply: Option<RecvReplyFn>,
}

/// `hipObjConfig_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjConfig_t {
    pub endpoint: *const c_char,
    pub region: *const c_char,
    pub accessKey: *const c_char,
    pub secretKey: *const c_char,
    pub flags: u32,
    pub gpuDevice: c_int,
    pub nicHint: *const c_char,
}

impl Default for hipObjConfig_t {
    /// All zero, as C callers are told to leave unused fields (so `gpuDevice` is 0).
    fn default() -> Self {
        hipObjConfig_t {
            endpoint: std::ptr::null(),
            region: std::ptr::null(),
            accessKey: std::ptr::null(),
            secretKey: std::ptr::null(),
            flags: 0,
            gpuDevice: 0,
            nicHint: std::ptr::null(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // x86_64 / aarch64 Linux (LP64) layouts, as a C compiler lays out the header's structs.
    #[test]
    fn error_layout_matches_c() {
        assert_eq!(size_of::<OpError>(), size_of::<c_int>());
        assert_eq!(size_of::<hipObjError_t>(), 8);
        assert_eq!(align_of::<hipObjError_t>(), 4);
        assert_eq!(offset_of!(hipObjError_t, opError), 0);
        assert_eq!(offset_of!(hipObjError_t, hipError), 4);
    }

    #[test]
    fn ops_layout_matches_c() {
        assert_eq!(size_of::<hipObjOps_t>(), 2 * size_of::<*const c_void>());
        assert_eq!(offset_of!(hipObjOps_t, sendRequest), 0);
        assert_eq!(
            offset_of!(hipObjOps_t, recvReply),
            size_of::<*const c_void>()
        );
        // The niche optimisation keeps Option<fn> pointer-sized, with None as NULL.
        assert_eq!(
            size_of::<Option<SendRequestFn>>(),
            size_of::<*const c_void>()
        );
    }

    #[test]
    fn config_layout_matches_c() {
        let p = size_of::<*const c_void>();
        assert_eq!(p, 8, "these offsets are for LP64");
        assert_eq!(offset_of!(hipObjConfig_t, endpoint), 0);
        assert_eq!(offset_of!(hipObjConfig_t, region), 8);
        assert_eq!(offset_of!(hipObjConfig_t, accessKey), 16);
        assert_eq!(offset_of!(hipObjConfig_t, secretKey), 24);
        assert_eq!(offset_of!(hipObjConfig_t, flags), 32);
        assert_eq!(offset_of!(hipObjConfig_t, gpuDevice), 36);
        assert_eq!(offset_of!(hipObjConfig_t, nicHint), 40);
        assert_eq!(size_of::<hipObjConfig_t>(), 48);
        assert_eq!(align_of::<hipObjConfig_t>(), 8);
    }
}
