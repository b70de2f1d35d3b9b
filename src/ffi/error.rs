//! The one conversion from the core's [`Error`] to the C [`hipObjError_t`], and the error strings.

use super::boundary;
use super::types::{hipObjError_t, hipObjOpError_t};
use crate::error::{Error, OpError};
use std::ffi::{c_char, CStr};

impl From<Error> for hipObjError_t {
    fn from(e: Error) -> Self {
        hipObjError_t {
            opError: e.code,
            hipError: e.hip_error,
        }
    }
}

/// The description of a raw error value; `None` of [`OpError::from_raw`] is "Unknown error".
pub fn error_string(raw: hipObjOpError_t) -> &'static CStr {
    match OpError::from_raw(raw) {
        Some(OpError::Success) => c"Success",
        Some(OpError::InvalidValue) => c"Invalid value",
        Some(OpError::NotInitialized) => c"Not initialized",
        Some(OpError::AlreadyInitialized) => c"Already initialized",
        Some(OpError::RdmaError) => c"RDMA error",
        Some(OpError::S3Error) => c"S3 error",
        Some(OpError::BufNotRegistered) => c"Buffer not registered",
        Some(OpError::BufAlreadyRegistered) => c"Buffer already registered",
        Some(OpError::NicNotFound) => c"NIC not found",
        Some(OpError::DmabufNotSupported) => c"dmabuf not supported",
        Some(OpError::SizeTooLarge) => c"Size too large",
        Some(OpError::InternalError) => c"Internal error",
        Some(OpError::Busy) => c"Resource busy",
        Some(OpError::NotSupported) => c"hipobj-rc-v2 not supported by server",
        None => c"Unknown error",
    }
}

/// `hipObjGetErrorString`: a static description of `err`. The value arrives as a raw `int`,
/// since C may pass anything; it is never reinterpreted as a Rust enum.
///
/// # Safety
/// None needed: the argument is a plain integer; the result is a static string.
#[no_mangle]
pub extern "C" fn hipObjGetErrorString(err: hipObjOpError_t) -> *const c_char {
    boundary::guard("hipObjGetErrorString", || error_string(err).as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_code_has_its_own_string() {
        let strings: HashSet<&CStr> = OpError::ALL
            .iter()
            .map(|&c| error_string(c as i32))
            .collect();
        assert_eq!(strings.len(), OpError::ALL.len());
        assert!(!strings.contains(c"Unknown error"));
    }

    #[test]
    fn known_strings() {
        assert_eq!(error_string(0), c"Success");
        assert_eq!(error_string(1), c"Invalid value");
        assert_eq!(error_string(11), c"Internal error");
        assert_eq!(error_string(12), c"Resource busy");
        assert_eq!(error_string(13), c"hipobj-rc-v2 not supported by server");
    }

    #[test]
    fn unknown_values() {
        for v in [-1, 14, 15, 6000, i32::MIN, i32::MAX] {
            assert_eq!(error_string(v), c"Unknown error", "value {v}");
        }
    }

    #[test]
    fn conversion_keeps_code_and_hip_error() {
        for &code in &OpError::ALL {
            let e: hipObjError_t = Error::with_hip(code, 7, "x").into();
            assert_eq!(
                e,
                hipObjError_t {
                    opError: code,
                    hipError: 7
                }
            );
        }
    }
}
