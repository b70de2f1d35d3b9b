//! `hipObjGetVersionString` and `hipObjGetVersion`.

use super::boundary;
use super::types::hipObjError_t;
use crate::version;
use std::ffi::{c_char, c_uint, CStr};

/// The version as a static C string, checked at compile time.
pub const VERSION: &CStr = match CStr::from_bytes_with_nul(version::VERSION_CSTR.as_bytes()) {
    Ok(s) => s,
    Err(_) => panic!("version::VERSION_CSTR must end in its only NUL"),
};

/// `hipObjGetVersionString`: "MAJOR.MINOR.PATCH", static.
#[no_mangle]
pub extern "C" fn hipObjGetVersionString() -> *const c_char {
    boundary::guard("hipObjGetVersionString", || VERSION.as_ptr())
}

/// `hipObjGetVersion`: writes each non-NULL part; always succeeds.
///
/// # Safety
/// Each pointer is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> hipObjError_t {
    boundary::call("hipObjGetVersion", || {
        for (out, value) in [
            (major, version::MAJOR),
            (minor, version::MINOR),
            (patch, version::PATCH),
        ] {
            if !out.is_null() {
                // SAFETY: non-NULL and writable per this function's contract.
                unsafe { out.write(value) };
            }
        }
        Ok(())
    })
}
