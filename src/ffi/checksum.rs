//! The export of `include/hipobj_checksum.h`: `hipObjChecksumCheck`, the end-to-end check of a
//! GET's bytes for C applications (docs/protocol.md section 15). The check itself is
//! [`crate::checksum`]'s, as for the command line and Python: this file only checks the
//! arguments ([`args`]), makes that one call, and writes its outcome.

use super::args;
use super::boundary;
use super::types::hipObjError_t;
use crate::checksum::stored::check_reply;
use crate::checksum::{Verdict, RDMA_CHECKSUM};
use std::ffi::{c_char, c_int, c_void};

/// The exports of `include/hipobj_checksum.h`, in header order.
pub const EXPORTED_FUNCTIONS_CHECKSUM: [&str; 2] =
    ["hipObjChecksumCheck", "hipObjRdmaChecksumCheck"];

/// `hipObjChecksumStatus_t` and its values.
#[allow(non_camel_case_types)]
pub type hipObjChecksumStatus_t = c_int;
pub const HIPOBJ_CHECKSUM_VERIFIED: hipObjChecksumStatus_t = 0;
pub const HIPOBJ_CHECKSUM_MISMATCH: hipObjChecksumStatus_t = 1;
pub const HIPOBJ_CHECKSUM_UNCHECKED: hipObjChecksumStatus_t = 2;

/// What `bytes` are against the stored checksum in `headers`, and its description.
fn check(bytes: &[u8], headers: &[(String, String)]) -> (hipObjChecksumStatus_t, String) {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    match check_reply(bytes, header) {
        Ok(verdict @ Verdict::Verified(_)) => (HIPOBJ_CHECKSUM_VERIFIED, verdict.to_string()),
        Ok(verdict) => (HIPOBJ_CHECKSUM_UNCHECKED, verdict.to_string()),
        Err(mismatch) => (HIPOBJ_CHECKSUM_MISMATCH, mismatch.to_string()),
    }
}

/// `text`, cut to fit, and a NUL.
fn write_message(buf: Option<&mut [u8]>, text: &str) {
    let Some(buf) = buf else { return };
    let n = text.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    buf[n] = 0;
}

/// `hipObjChecksumCheck`: check the landed bytes against the reply's stored checksum.
///
/// # Safety
/// `hostPtr` is NULL or readable for `size` bytes; `headerNames` and `headerValues` are NULL or
/// hold `headerCount` pointers, each NULL or NUL-terminated; `status` is NULL or writable;
/// `message` is NULL or writable for `messageLen` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipObjChecksumCheck(
    hostPtr: *const c_void,
    size: usize,
    headerNames: *const *const c_char,
    headerValues: *const *const c_char,
    headerCount: usize,
    status: *mut hipObjChecksumStatus_t,
    message: *mut c_char,
    messageLen: usize,
) -> hipObjError_t {
    boundary::call("hipObjChecksumCheck", || {
        // SAFETY: the caller's guarantees for each pointer, passed on.
        let bytes = unsafe { args::host_bytes(hostPtr, size) }?;
        // SAFETY: as above.
        let headers = unsafe { args::header_pairs(headerNames, headerValues, headerCount) }?;
        let status = args::non_null(status, "status is NULL")?;
        // SAFETY: as above.
        let message = unsafe { args::message_buffer(message, messageLen) }?;
        let (found, text) = check(bytes, &headers);
        // SAFETY: non-NULL and writable per the caller.
        unsafe { status.as_ptr().write(found) };
        write_message(message, &text);
        Ok(())
    })
}

/// `hipObjRdmaChecksumCheck`: check the landed bytes against the `x-amz-rdma-checksum` value
/// the application's S3 client saw on the token GET's reply.
///
/// # Safety
/// `hostPtr` is NULL or readable for `size` bytes; `rdmaChecksum` is NULL or NUL-terminated;
/// `status` is NULL or writable; `message` is NULL or writable for `messageLen` bytes.
#[no_mangle]
pub unsafe extern "C" fn hipObjRdmaChecksumCheck(
    hostPtr: *const c_void,
    size: usize,
    rdmaChecksum: *const c_char,
    status: *mut hipObjChecksumStatus_t,
    message: *mut c_char,
    messageLen: usize,
) -> hipObjError_t {
    boundary::call("hipObjRdmaChecksumCheck", || {
        // SAFETY: the caller's guarantees for each pointer, passed on.
        let bytes = unsafe { args::host_bytes(hostPtr, size) }?;
        // SAFETY: as above.
        let value = unsafe { args::required_c_string(rdmaChecksum, "rdmaChecksum is NULL") }?;
        let status = args::non_null(status, "status is NULL")?;
        // SAFETY: as above.
        let message = unsafe { args::message_buffer(message, messageLen) }?;
        let (found, text) = check(bytes, &[(RDMA_CHECKSUM.to_string(), value)]);
        // SAFETY: non-NULL and writable per the caller.
        unsafe { status.as_ptr().write(found) };
        write_message(message, &text);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::CrcAlgo;
    use crate::error::OpError;
    use std::ffi::{CStr, CString};
    use std::ptr::{null, null_mut};

    /// Calls the export as C would: `headers` as two arrays of C strings.
    fn call(
        bytes: &[u8],
        headers: &[(&str, &str)],
        message_len: usize,
    ) -> (OpError, hipObjChecksumStatus_t, String) {
        let owned: Vec<(CString, CString)> = headers
            .iter()
            .map(|(n, v)| {
                (
                    CString::new(*n).expect("name"),
                    CString::new(*v).expect("value"),
                )
            })
            .collect();
        let names: Vec<*const c_char> = owned.iter().map(|(n, _)| n.as_ptr()).collect();
        let values: Vec<*const c_char> = owned.iter().map(|(_, v)| v.as_ptr()).collect();
        let mut status = -1;
        let mut message = vec![b'x' as c_char; message_len.max(1)];
        // SAFETY: every pointer is valid for what it names, for the call.
        let e = unsafe {
            hipObjChecksumCheck(
                bytes.as_ptr().cast(),
                bytes.len(),
                names.as_ptr(),
                values.as_ptr(),
                names.len(),
                &mut status,
                message.as_mut_ptr(),
                message_len,
            )
        };
        let text = if message_len == 0 {
            String::new()
        } else {
            // SAFETY: the export wrote a NUL inside the buffer.
            unsafe { CStr::from_ptr(message.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        (e.opError, status, text)
    }

    const OBJECT: &[u8] = b"123456789";

    #[test]
    fn the_landed_bytes_are_verified_against_the_stored_crc() {
        let crc = CrcAlgo::Crc64Nvme.encode(CrcAlgo::Crc64Nvme.of(OBJECT));
        let headers = [
            ("Content-Type", "application/octet-stream"),
            ("X-Amz-Checksum-CRC64NVME", crc.as_str()),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ];
        assert_eq!(
            call(OBJECT, &headers, 64),
            (
                OpError::Success,
                HIPOBJ_CHECKSUM_VERIFIED,
                "CRC64NVME verified".into()
            )
        );
    }

    #[test]
    fn a_changed_byte_is_a_mismatch_naming_the_algorithm_and_both_values() {
        let headers = [("x-amz-checksum-crc64nvme", "rosUhgp5mIg=")];
        let (e, status, text) = call(b"123456780", &headers, 256);
        assert_eq!((e, status), (OpError::Success, HIPOBJ_CHECKSUM_MISMATCH));
        let landed = CrcAlgo::Crc64Nvme.encode(CrcAlgo::Crc64Nvme.of(b"123456780"));
        assert!(
            text.contains("CRC64NVME") && text.contains("rosUhgp5mIg=") && text.contains(&landed),
            "{text}"
        );
        // cut to the buffer, NUL-terminated
        let (_, _, short) = call(b"123456780", &headers, 10);
        assert_eq!(short, text[..9]);
        let (e, status, none) = call(b"123456780", &headers, 0);
        assert_eq!(
            (e, status, none.as_str()),
            (OpError::Success, HIPOBJ_CHECKSUM_MISMATCH, "")
        );
    }

    #[test]
    fn no_checksum_to_check_against_is_unchecked_with_the_reason() {
        let (e, status, text) = call(OBJECT, &[("etag", "\"x\"")], 128);
        assert_eq!((e, status), (OpError::Success, HIPOBJ_CHECKSUM_UNCHECKED));
        assert_eq!(text, "unchecked: the server sent no checksum");
        let (_, status, text) = call(OBJECT, &[("x-amz-checksum-crc32c", "AAAAAA==-3")], 128);
        assert_eq!(status, HIPOBJ_CHECKSUM_UNCHECKED);
        assert!(text.contains("COMPOSITE"), "{text}");
    }

    /// Revision 6: the token reply's `x-amz-rdma-checksum`, of any algorithm, through either
    /// export; it wins over `x-amz-checksum-*` in the same list; a malformed one is unchecked.
    #[test]
    fn the_rdma_checksum_value_is_checked_whatever_its_algorithm() {
        use crate::checksum::Algorithm;
        for algorithm in Algorithm::PREFERRED {
            let value = format!("{algorithm} {}", algorithm.encoded_of(OBJECT));
            let (e, status, text) = call(OBJECT, &[("X-Amz-Rdma-Checksum", value.as_str())], 128);
            assert_eq!(
                (e, status),
                (OpError::Success, HIPOBJ_CHECKSUM_VERIFIED),
                "{text}"
            );
            assert_eq!(text, format!("{algorithm} verified"));
            let (_, status, text) = rdma_call(b"123456780", &value);
            assert_eq!(status, HIPOBJ_CHECKSUM_MISMATCH, "{text}");
            assert!(
                text.contains(algorithm.as_str())
                    && text.contains(&value[algorithm.as_str().len() + 1..]),
                "{text}"
            );
        }
        let stale = [
            ("x-amz-checksum-crc32", "AAAAAA=="),
            ("x-amz-rdma-checksum", "CRC64NVME rosUhgp5mIg="),
        ];
        assert_eq!(call(OBJECT, &stale, 64).1, HIPOBJ_CHECKSUM_VERIFIED);
        let (e, status, text) = rdma_call(OBJECT, "CRC64NVME rosUhgp5mIg=");
        assert_eq!(
            (e, status, text.as_str()),
            (
                OpError::Success,
                HIPOBJ_CHECKSUM_VERIFIED,
                "CRC64NVME verified"
            )
        );
        let (_, status, text) = rdma_call(OBJECT, "CRC32C 4waSgw==-3 COMPOSITE");
        assert_eq!(status, HIPOBJ_CHECKSUM_UNCHECKED);
        assert!(text.contains("COMPOSITE"), "{text}");
        let (_, status, text) = rdma_call(OBJECT, "CRC64NVME rosUhgp5mIh=");
        assert_eq!(status, HIPOBJ_CHECKSUM_UNCHECKED);
        assert!(text.contains("x-amz-rdma-checksum"), "{text}");
    }

    fn rdma_call(bytes: &[u8], value: &str) -> (OpError, hipObjChecksumStatus_t, String) {
        let value = CString::new(value).expect("value");
        let mut status = -1;
        let mut message = [0 as c_char; 256];
        // SAFETY: every pointer is valid for what it names, for the call.
        let e = unsafe {
            hipObjRdmaChecksumCheck(
                bytes.as_ptr().cast(),
                bytes.len(),
                value.as_ptr(),
                &mut status,
                message.as_mut_ptr(),
                message.len(),
            )
        };
        // SAFETY: the export wrote a NUL inside the buffer.
        let text = unsafe { CStr::from_ptr(message.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        (e.opError, status, text)
    }

    #[test]
    fn a_null_rdma_checksum_is_an_invalid_value_and_writes_nothing() {
        let mut status = -1;
        let mut message = [b'x' as c_char; 8];
        // SAFETY: valid pointers but the NULL value, refused before any access.
        let e = unsafe {
            hipObjRdmaChecksumCheck(
                OBJECT.as_ptr().cast(),
                OBJECT.len(),
                null(),
                &mut status,
                message.as_mut_ptr(),
                8,
            )
        };
        assert_eq!(e.opError, OpError::InvalidValue);
        assert_eq!(status, -1, "nothing written");
        assert!(
            message.iter().all(|&c| c == b'x' as c_char),
            "nothing written"
        );
    }

    /// One call's arguments, as C passes them.
    #[derive(Clone, Copy)]
    struct Args {
        bytes: *const c_void,
        size: usize,
        names: *const *const c_char,
        values: *const *const c_char,
        count: usize,
        status: *mut hipObjChecksumStatus_t,
        message: *mut c_char,
        message_len: usize,
    }

    #[test]
    fn null_arguments_are_invalid_values_and_write_nothing() {
        let mut status = -1;
        let mut message = [b'x' as c_char; 8];
        let name = c"x-amz-checksum-crc32";
        let names = [name.as_ptr()];
        let values = [null::<c_char>()];
        let valid = Args {
            bytes: OBJECT.as_ptr().cast(),
            size: OBJECT.len(),
            names: null(),
            values: null(),
            count: 0,
            status: &mut status,
            message: message.as_mut_ptr(),
            message_len: message.len(),
        };
        let cases = [
            Args {
                bytes: null(),
                ..valid
            },
            Args {
                values: names.as_ptr(),
                count: 1,
                ..valid
            },
            Args {
                names: names.as_ptr(),
                values: values.as_ptr(),
                count: 1,
                ..valid
            },
            Args {
                status: null_mut(),
                ..valid
            },
            Args {
                message: null_mut(),
                ..valid
            },
            Args {
                message_len: usize::MAX,
                ..valid
            },
        ];
        for (i, a) in cases.into_iter().enumerate() {
            // SAFETY: each pointer is NULL or valid for what the call reads or writes; the
            // invalid ones are refused before any access.
            let e = unsafe {
                hipObjChecksumCheck(
                    a.bytes,
                    a.size,
                    a.names,
                    a.values,
                    a.count,
                    a.status,
                    a.message,
                    a.message_len,
                )
            };
            assert_eq!(e.opError, OpError::InvalidValue, "case {i}");
        }
        assert_eq!(status, -1, "nothing written");
        assert!(
            message.iter().all(|&c| c == b'x' as c_char),
            "nothing written"
        );
        // size 0 needs no pointer: the empty object
        let crc = CrcAlgo::Crc32.encode(CrcAlgo::Crc32.of(b""));
        let (e, status, _) = call(b"", &[("x-amz-checksum-crc32", crc.as_str())], 8);
        assert_eq!((e, status), (OpError::Success, HIPOBJ_CHECKSUM_VERIFIED));
    }
}
