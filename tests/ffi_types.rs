//! The `#[repr(C)]` types have the header's layout (LP64 Linux) and the enum its values.

mod common;
use common::*;
use std::ffi::{c_int, c_void};
use std::mem::{align_of, offset_of, size_of};

#[test]
fn hip_obj_error_t() {
    assert_eq!(size_of::<hipObjError_t>(), 8);
    assert_eq!(align_of::<hipObjError_t>(), align_of::<c_int>());
    assert_eq!(offset_of!(hipObjError_t, opError), 0);
    assert_eq!(offset_of!(hipObjError_t, hipError), 4);
}

#[test]
fn hip_obj_ops_t() {
    let p = size_of::<*const c_void>();
    assert_eq!(size_of::<hipObjOps_t>(), 2 * p);
    assert_eq!(align_of::<hipObjOps_t>(), align_of::<*const c_void>());
    assert_eq!(offset_of!(hipObjOps_t, sendRequest), 0);
    assert_eq!(offset_of!(hipObjOps_t, recvReply), p);
}

#[test]
fn hip_obj_config_t() {
    assert_eq!(size_of::<hipObjConfig_t>(), 48);
    assert_eq!(align_of::<hipObjConfig_t>(), 8);
    let offsets = [
        offset_of!(hipObjConfig_t, endpoint),
        offset_of!(hipObjConfig_t, region),
        offset_of!(hipObjConfig_t, accessKey),
        offset_of!(hipObjConfig_t, secretKey),
        offset_of!(hipObjConfig_t, flags),
        offset_of!(hipObjConfig_t, gpuDevice),
        offset_of!(hipObjConfig_t, nicHint),
    ];
    assert_eq!(offsets, [0, 8, 16, 24, 32, 36, 40]);
}

#[test]
fn handle_and_offset_types() {
    assert_eq!(size_of::<hipObjHandle_t>(), size_of::<*mut c_void>());
    assert_eq!(size_of::<libc::off_t>(), 8);
}

#[test]
fn op_error_values() {
    let names = [
        "Success",
        "InvalidValue",
        "NotInitialized",
        "AlreadyInitialized",
        "RdmaError",
        "S3Error",
        "BufNotRegistered",
        "BufAlreadyRegistered",
        "NicNotFound",
        "DmabufNotSupported",
        "SizeTooLarge",
        "InternalError",
        "Busy",
        "NotSupported",
    ];
    assert_eq!(OpError::ALL.len(), names.len());
    for (i, (code, name)) in OpError::ALL.iter().zip(names).enumerate() {
        assert_eq!(*code as i32, i as i32);
        assert_eq!(format!("{code:?}"), name);
        assert_eq!(OpError::from_raw(i as i32), Some(*code));
    }
    assert_eq!(OpError::from_raw(14), None);
    assert_eq!(OpError::from_raw(-1), None);
    assert_eq!(size_of::<OpError>(), size_of::<c_int>());
}

#[test]
fn exported_names_match_the_list() {
    assert_eq!(hipobj::ffi::EXPORTED_FUNCTIONS.len(), 15);
    let unique: std::collections::HashSet<_> = hipobj::ffi::EXPORTED_FUNCTIONS.iter().collect();
    assert_eq!(unique.len(), 15);
}
