//! Tokens and replies: `hipObjGetRdmaToken`, `hipObjPutRdmaToken`, `hipObjParseRdmaReply`,
//! `hipObjTokenClientNic`.

use super::types::hipObjError_t;
use super::{args, boundary};
use crate::error::{Error, Result};
use crate::runtime;
use crate::token::{Token, TOKEN_HEX_LEN};
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::NonNull;

/// `hipObjGetRdmaToken`: not initialised; outToken NULL or op not 0/1; devPtr NULL or size 0;
/// then the core. `*outToken` is written only on success, with a `CString::into_raw` pointer
/// that only `hipObjPutRdmaToken` may release.
///
/// # Safety
/// `outToken` is NULL or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn hipObjGetRdmaToken(
    devPtr: *const c_void,
    size: usize,
    op: c_int,
    outToken: *mut *mut c_char,
) -> hipObjError_t {
    boundary::call("hipObjGetRdmaToken", || {
        let rt = args::runtime()?;
        let (out, ptr, size) = args::token_request(outToken, op, devPtr, size)?;
        let kind = args::token_op(op)?;
        let token = rt.mint_token(ptr, size, kind)?;
        let token =
            CString::new(token).map_err(|_| Error::internal("minted token contains a NUL"))?;
        // SAFETY: `out` is non-NULL and writable per this function's contract.
        unsafe { out.as_ptr().write(token.into_raw()) };
        Ok(())
    })
}

/// `hipObjPutRdmaToken`: NULL -> `hipObjInvalidValue`, else invalidate the token's window (when
/// initialised and it names one) and release the token. Needs no init.
///
/// # Safety
/// `token` is NULL or a pointer from `hipObjGetRdmaToken` not yet released.
#[no_mangle]
pub unsafe extern "C" fn hipObjPutRdmaToken(token: *mut c_char) -> hipObjError_t {
    boundary::call("hipObjPutRdmaToken", || {
        let token = args::non_null(token, "token is NULL")?;
        // SAFETY: per this function's contract the pointer came from CString::into_raw in
        // hipObjGetRdmaToken and is released exactly once.
        let token = unsafe { CString::from_raw(token.as_ptr()) };
        runtime::release_token(token.as_bytes());
        drop(token);
        Ok(())
    })
}

/// The checks and effects of `hipObjParseRdmaReply` short of writing the code (the runtime's
/// [`runtime::reply_code`]).
pub fn parse_reply(bytes: &[u8]) -> Result<i32> {
    runtime::reply_code(bytes)
}

/// `hipObjParseRdmaReply`: reply or httpCode NULL -> `hipObjInvalidValue`; a malformed reply ->
/// `hipObjInvalidValue`; `*httpCode` is written only on success. Needs no init.
///
/// # Safety
/// `reply` is NULL or readable for `replyLen` bytes; `httpCode` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjParseRdmaReply(
    reply: *const c_char,
    replyLen: usize,
    httpCode: *mut c_int,
) -> hipObjError_t {
    boundary::call("hipObjParseRdmaReply", || {
        // SAFETY: forwarded from this function's contract.
        let bytes = unsafe { args::byte_slice(reply, replyLen) }?;
        let out = args::non_null(httpCode, "httpCode is NULL")?;
        let code = parse_reply(bytes)?;
        // SAFETY: `out` is non-NULL and writable per this function's contract.
        unsafe { out.as_ptr().write(code) };
        Ok(())
    })
}

/// The text `hipObjTokenClientNic` writes for a token given as at most 89 bytes of a C string:
/// the dotted quad of an IPv4-mapped GID, or "" for any other GID.
pub fn client_nic_text(token: &[u8]) -> Result<String> {
    let token = Token::decode_hex(token).map_err(|e| Error::invalid(e.to_string()))?;
    Ok(token
        .client_nic_ipv4()
        .map(|ip| ip.to_string())
        .unwrap_or_default())
}

/// `hipObjTokenClientNic`: token or nicIp NULL, or nicIpLen 0 -> `hipObjInvalidValue` with
/// nothing written. Otherwise `nicIp` becomes "" first; a malformed token, or a buffer too small
/// for the address and its NUL, then gives `hipObjInvalidValue` and leaves it "". Needs no init.
///
/// # Safety
/// `token` is NULL or a NUL-terminated string (only up to 89 bytes of it are read); `nicIp` is
/// NULL or writable for `nicIpLen` bytes.
#[no_mangle]
pub unsafe extern "C" fn hipObjTokenClientNic(
    token: *const c_char,
    nicIp: *mut c_char,
    nicIpLen: usize,
) -> hipObjError_t {
    boundary::call("hipObjTokenClientNic", || {
        let token = args::non_null(token.cast_mut(), "token is NULL")?;
        let out = args::non_null(nicIp, "nicIp is NULL")?;
        if nicIpLen == 0 {
            return Err(Error::invalid("nicIpLen is 0"));
        }
        // SAFETY: `out` is writable for nicIpLen >= 1 bytes.
        unsafe { out.as_ptr().write(0) };
        // SAFETY: `token` is NUL-terminated; at most 89 bytes are read, so a string longer than
        // a token is seen as 89 bytes and rejected.
        let token = unsafe { args::c_string_prefix(token, TOKEN_HEX_LEN + 1) };
        let text = client_nic_text(token)?;
        if text.len() >= nicIpLen {
            return Err(Error::invalid("nicIp is too small for the address"));
        }
        write_c_string(out, &text);
        Ok(())
    })
}

/// Copy `text` and a NUL to `out`; the caller checked that `text.len() + 1` bytes fit.
fn write_c_string(out: NonNull<c_char>, text: &str) {
    let dst = out.as_ptr().cast::<u8>();
    // SAFETY: the caller checked the buffer holds text.len() + 1 bytes; `text` cannot overlap
    // the application's buffer (it is our own allocation).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), dst, text.len());
        dst.add(text.len()).write(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OpError;

    #[test]
    fn client_nic_text_cases() {
        let mapped = "015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";
        assert_eq!(
            client_nic_text(mapped.as_bytes()).expect("valid"),
            "192.168.100.200"
        );
        // A link-local (non-mapped) GID: "".
        let ll = format!(
            "01{}{}{}",
            "55000000",
            "fe800000000000000000000000000001",
            &mapped[42..]
        );
        assert_eq!(ll.len(), 88);
        assert_eq!(client_nic_text(ll.as_bytes()).expect("valid"), "");
        // Bytes 10-11 are 0xffff but byte 0 is not zero: not IPv4-mapped (docs/protocol.md section 2:
        // bytes 0-9 must be zero too, which the C++ reference does not check).
        let half = format!(
            "01{}{}{}",
            "55000000",
            "01000000000000000000ffffc0a864c8",
            &mapped[42..]
        );
        assert_eq!(client_nic_text(half.as_bytes()).expect("valid"), "");
        // Byte 9 set.
        let b9 = format!(
            "01{}{}{}",
            "55000000",
            "000000000000000000ffffffc0a864c8",
            &mapped[42..]
        );
        assert_eq!(client_nic_text(b9.as_bytes()).expect("valid"), "");
        for bad in [
            &mapped[..87],
            "",
            &format!("{mapped}0"),
            &mapped.replace("01550", "02550"),
        ] {
            assert_eq!(
                client_nic_text(bad.as_bytes()).unwrap_err().code,
                OpError::InvalidValue
            );
        }
    }

    #[test]
    fn parse_reply_without_runtime() {
        assert_eq!(parse_reply(b"ok").expect("valid"), 200);
        assert_eq!(parse_reply(b"err").expect("valid"), -1);
        assert_eq!(parse_reply(b"501").expect("valid"), 501);
        let tok = "01".to_string() + &"0".repeat(86);
        assert_eq!(
            parse_reply(format!("428:{tok}").as_bytes()).expect("valid"),
            428
        );
        assert_eq!(parse_reply(b"").unwrap_err().code, OpError::InvalidValue);
    }
}
