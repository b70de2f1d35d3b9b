//! `#[repr(C)]` copies of the types of `include/hipobj_v2.h`. Field names follow the header.
#![allow(non_camel_case_types, non_snake_case)]

use crate::ffi::types::{hipObjConfig_t, hipObjOps_t};
use std::ffi::{c_char, c_int, c_void};

/// `hipObjControlEndpointV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjControlEndpointV2_t {
    pub controlEndpoint: *const c_char,
}

/// `hipObjConfigV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjConfigV2_t {
    pub v1: hipObjConfig_t,
    pub control: hipObjControlEndpointV2_t,
    pub connectDeadlineMs: u32,
    pub transferDeadlineMs: u32,
    pub cancelCleanupBudgetMs: u32,
}

/// `hipObjTransferReqV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjTransferReqV2_t {
    pub method: *const c_char,
    pub bucket: *const c_char,
    pub key: *const c_char,
    pub query: *const c_char,
    pub token: *const c_char,
    pub session: *const c_char,
    pub target: *const c_char,
    pub size: u64,
    pub offset: u64,
    pub cookie: u32,
    pub clientPsn: u32,
    pub deadlineMs: u32,
    pub remainingMs: u32,
    pub endpoint: *const hipObjControlEndpointV2_t,
    pub nic: *const c_char,
    pub nicPort: c_int,
    pub nicGidIndex: c_int,
    pub clientQpn: u32,
    pub clientMrAddr: u64,
    pub clientMrRkey: u32,
}

/// `hipObjPrepareReplyV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjPrepareReplyV2_t {
    pub httpStatus: c_int,
    pub protocolEcho: c_int,
    pub unsupportedMarker: c_int,
    pub serverToken: [c_char; 97],
    pub session: [c_char; 65],
    pub serverPsn: u32,
    pub stagingAddr: u64,
    pub stagingRkey: u32,
    pub stagingPresent: c_int,
}

/// `hipObjFinalReplyV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipObjFinalReplyV2_t {
    pub httpStatus: c_int,
    pub protocolEcho: c_int,
    pub bytes: u64,
    pub cookieEcho: u32,
    pub etag: [c_char; 128],
    pub versionId: [c_char; 128],
    pub checksumB64: [c_char; 13],
    pub cookiePresent: c_int,
}

/// `sendPrepare`.
pub type SendPrepareFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    req: *const hipObjTransferReqV2_t,
    out: *mut hipObjPrepareReplyV2_t,
) -> c_int;
/// `sendReadyRequest`.
pub type SendReadyRequestFn =
    unsafe extern "C" fn(ctx: *mut c_void, req: *const hipObjTransferReqV2_t) -> c_int;
/// `finishReady`.
pub type FinishReadyFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    req: *const hipObjTransferReqV2_t,
    out: *mut hipObjFinalReplyV2_t,
) -> c_int;
/// `sendCancel`.
pub type SendCancelFn =
    unsafe extern "C" fn(ctx: *mut c_void, req: *const hipObjTransferReqV2_t) -> c_int;

/// `hipObjOpsV2_t`. A NULL callback is `None`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hipObjOpsV2_t {
    pub v1: hipObjOps_t,
    pub sendPrepare: Option<SendPrepareFn>,
    pub sendReadyRequest: Option<SendReadyRequestFn>,
    pub finishReady: Option<FinishReadyFn>,
    pub sendCancel: Option<SendCancelFn>,
}

impl hipObjPrepareReplyV2_t {
    /// All zero, as the library hands it to `sendPrepare`.
    pub fn zeroed() -> hipObjPrepareReplyV2_t {
        hipObjPrepareReplyV2_t {
            httpStatus: 0,
            protocolEcho: 0,
            unsupportedMarker: 0,
            serverToken: [0; 97],
            session: [0; 65],
            serverPsn: 0,
            stagingAddr: 0,
            stagingRkey: 0,
            stagingPresent: 0,
        }
    }
}

impl hipObjFinalReplyV2_t {
    /// All zero, as the library hands it to `finishReady`.
    pub fn zeroed() -> hipObjFinalReplyV2_t {
        hipObjFinalReplyV2_t {
            httpStatus: 0,
            protocolEcho: 0,
            bytes: 0,
            cookieEcho: 0,
            etag: [0; 128],
            versionId: [0; 128],
            checksumB64: [0; 13],
            cookiePresent: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // LP64 layouts, as a C compiler lays out the header's structs (tests/c/abi_probe_v2.c prints
    // the same numbers from the header itself).
    #[test]
    fn request_layout_matches_c() {
        assert_eq!(offset_of!(hipObjTransferReqV2_t, target), 48);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, size), 56);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, offset), 64);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, cookie), 72);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, remainingMs), 84);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, endpoint), 88);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, nic), 96);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, nicPort), 104);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, nicGidIndex), 108);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, clientQpn), 112);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, clientMrAddr), 120);
        assert_eq!(offset_of!(hipObjTransferReqV2_t, clientMrRkey), 128);
        assert_eq!(size_of::<hipObjTransferReqV2_t>(), 136);
    }

    #[test]
    fn reply_layouts_match_c() {
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, serverToken), 12);
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, session), 109);
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, serverPsn), 176);
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, stagingAddr), 184);
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, stagingRkey), 192);
        assert_eq!(offset_of!(hipObjPrepareReplyV2_t, stagingPresent), 196);
        assert_eq!(size_of::<hipObjPrepareReplyV2_t>(), 200);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, bytes), 8);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, cookieEcho), 16);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, etag), 20);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, versionId), 148);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, checksumB64), 276);
        assert_eq!(offset_of!(hipObjFinalReplyV2_t, cookiePresent), 292);
        assert_eq!(size_of::<hipObjFinalReplyV2_t>(), 296);
    }

    #[test]
    fn ops_and_config_layouts_match_c() {
        let p = size_of::<*const c_void>();
        assert_eq!(size_of::<hipObjOpsV2_t>(), 6 * p);
        assert_eq!(offset_of!(hipObjOpsV2_t, sendPrepare), 2 * p);
        assert_eq!(offset_of!(hipObjOpsV2_t, sendCancel), 5 * p);
        assert_eq!(offset_of!(hipObjConfigV2_t, control), 48);
        assert_eq!(offset_of!(hipObjConfigV2_t, connectDeadlineMs), 56);
        assert_eq!(offset_of!(hipObjConfigV2_t, cancelCleanupBudgetMs), 64);
        assert_eq!(size_of::<hipObjConfigV2_t>(), 72);
        assert_eq!(align_of::<hipObjConfigV2_t>(), 8);
    }
}
