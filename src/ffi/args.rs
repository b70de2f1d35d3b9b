//! Argument checks of the exports, in the order include/hipobj.h documents for each function.
//! Each export calls [`runtime`] first where the reference checks
//! initialisation first, then the checks here for its arguments, in the order listed in its doc.
//! They only read their arguments; no check writes an output.

use super::types::{hipObjConfig_t, hipObjOps_t, RecvReplyFn, SendRequestFn};
use crate::env::EnvConfig;
use crate::error::{Error, OpError, Result};
use crate::runtime::{self, InitConfig, Runtime, SyncDirection, MAX_REGISTRATION};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

/// The current runtime, or `hipObjNotInitialized`.
pub fn runtime() -> Result<Arc<Runtime>> {
    runtime::current().ok_or_else(Error::not_initialized)
}

/// A pointer that must not be NULL (an output or a required input).
pub fn non_null<T>(p: *mut T, what: &'static str) -> Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(|| Error::invalid(what))
}

/// `hipObjInit`'s config, checked in the order NULL config, `flags != 0`, `gpuDevice < -1`
/// (all `hipObjInvalidValue`); then the environment is read.
///
/// # Safety
/// `config` is NULL or points at a readable `hipObjConfig_t` whose `nicHint` is NULL or a
/// NUL-terminated string.
pub unsafe fn init_config(config: *const hipObjConfig_t) -> Result<InitConfig> {
    // SAFETY: the caller guarantees `config` is NULL or valid for reads.
    let config = unsafe { config.as_ref() }.ok_or_else(|| Error::invalid("config is NULL"))?;
    if config.flags != 0 {
        return Err(Error::invalid("config.flags is not 0"));
    }
    if config.gpuDevice < -1 {
        return Err(Error::invalid("config.gpuDevice is below -1"));
    }
    // SAFETY: the caller guarantees nicHint is NULL or NUL-terminated.
    let nic_hint = unsafe { optional_c_string(config.nicHint) };
    Ok(InitConfig {
        gpu_device: config.gpuDevice,
        nic_hint,
        env: EnvConfig::from_env(),
    })
}

/// A C string that may be NULL; NULL and "" are `None`. Bytes that are not UTF-8 are replaced
/// (no RDMA device name contains them, so such a hint simply names no device).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub unsafe fn optional_c_string(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's guarantee.
    let s = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    (!s.is_empty()).then_some(s)
}

/// A buffer to register: NULL or size 0 -> `hipObjInvalidValue`; size above 4 GiB ->
/// `hipObjSizeTooLarge`; `ptr + size` past the end of the address space -> `hipObjInvalidValue`.
pub fn registration(ptr: *const c_void, size: usize) -> Result<(usize, usize)> {
    if ptr.is_null() || size == 0 {
        return Err(Error::invalid("buffer pointer is NULL or size is 0"));
    }
    if size > MAX_REGISTRATION {
        return Err(Error::new(
            OpError::SizeTooLarge,
            "a registration is at most 4 GiB",
        ));
    }
    let base = ptr as usize;
    base.checked_add(size)
        .ok_or_else(|| Error::invalid("buffer wraps around the address space"))?;
    Ok((base, size))
}

/// A buffer base to deregister: NULL -> `hipObjInvalidValue`.
pub fn buffer_base(ptr: *const c_void) -> Result<usize> {
    if ptr.is_null() {
        return Err(Error::invalid("buffer pointer is NULL"));
    }
    Ok(ptr as usize)
}

/// The part of a registered buffer a call uses: devPtr NULL, size 0, or a negative offset ->
/// `hipObjInvalidValue`. Whether the range lies inside the registration is the core's check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSpan {
    pub ptr: usize,
    pub size: usize,
    pub offset: u64,
}

pub fn buffer_span(ptr: *const c_void, size: usize, offset: libc::off_t) -> Result<BufferSpan> {
    if ptr.is_null() {
        return Err(Error::invalid("buffer pointer is NULL"));
    }
    if size == 0 {
        return Err(Error::invalid("size is 0"));
    }
    let offset = u64::try_from(offset).map_err(|_| Error::invalid("offset is negative"))?;
    Ok(BufferSpan {
        ptr: ptr as usize,
        size,
        offset,
    })
}

/// The callbacks of `hipObjGet`/`hipObjPut`: `ops` NULL or either callback NULL ->
/// `hipObjInvalidValue`. Checked before any callback runs.
///
/// # Safety
/// `ops` is NULL or points at a readable `hipObjOps_t`.
pub unsafe fn callbacks(ops: *const hipObjOps_t) -> Result<(SendRequestFn, RecvReplyFn)> {
    // SAFETY: the caller guarantees `ops` is NULL or valid for reads.
    let ops = unsafe { ops.as_ref() }.ok_or_else(|| Error::invalid("ops is NULL"))?;
    match (ops.sendRequest, ops.recvReply) {
        (Some(send), Some(recv)) => Ok((send, recv)),
        _ => Err(Error::invalid("a callback of ops is NULL")),
    }
}

/// `hipObjBufSync`'s direction: `HIPOBJ_SYNC_TO_HOST` (0) or `HIPOBJ_SYNC_TO_DEVICE` (1).
pub fn sync_direction(direction: c_int) -> Result<SyncDirection> {
    match direction {
        0 => Ok(SyncDirection::ToHost),
        1 => Ok(SyncDirection::ToDevice),
        _ => Err(Error::invalid(
            "direction is neither HIPOBJ_SYNC_TO_HOST nor HIPOBJ_SYNC_TO_DEVICE",
        )),
    }
}

/// `hipObjGetRdmaToken`'s op: `HIPOBJ_RDMA_OP_PUT` (0) or `HIPOBJ_RDMA_OP_GET` (1).
pub fn token_op(op: c_int) -> Result<crate::runtime::TransferKind> {
    match op {
        0 => Ok(crate::runtime::TransferKind::Put),
        1 => Ok(crate::runtime::TransferKind::Get),
        _ => Err(Error::invalid(
            "op is neither HIPOBJ_RDMA_OP_PUT nor HIPOBJ_RDMA_OP_GET",
        )),
    }
}

/// A buffer to mint a token for: devPtr NULL or size 0 -> `hipObjInvalidValue`.
pub fn token_buffer(ptr: *const c_void, size: usize) -> Result<(usize, usize)> {
    if ptr.is_null() || size == 0 {
        return Err(Error::invalid("buffer pointer is NULL or size is 0"));
    }
    Ok((ptr as usize, size))
}

/// A byte string given as pointer and length: NULL, or a length no object can have ->
/// `hipObjInvalidValue`.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for `'a`.
pub unsafe fn byte_slice<'a>(p: *const c_char, len: usize) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Error::invalid("pointer is NULL"));
    }
    if isize::try_from(len).is_err() {
        return Err(Error::invalid("length exceeds any object's size"));
    }
    // SAFETY: non-NULL, len <= isize::MAX, and readable for len bytes per the caller.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// At most `max` bytes of a C string, stopping at its NUL (like `strnlen`): reads no further
/// than the NUL or `max` bytes, whichever comes first.
///
/// # Safety
/// `p` is non-NULL and readable up to its NUL or `max` bytes, whichever comes first.
pub unsafe fn c_string_prefix<'a>(p: NonNull<c_char>, max: usize) -> &'a [u8] {
    let base = p.as_ptr().cast::<u8>().cast_const();
    let mut len = 0;
    // SAFETY: each byte read is at index < max and no later than the first NUL, which the
    // caller guarantees readable.
    while len < max && unsafe { *base.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read are readable and not mutated during this call.
    unsafe { std::slice::from_raw_parts(base, len) }
}

/// The bytes `hipObjChecksumCheck` reads: `hostPtr` NULL while `size > 0` ->
/// `hipObjInvalidValue`; size 0 is an empty object (the pointer is not read).
///
/// # Safety
/// `p` is NULL or valid for reads of `size` bytes for `'a`.
pub unsafe fn host_bytes<'a>(p: *const c_void, size: usize) -> Result<&'a [u8]> {
    if size == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's guarantee, passed on.
    unsafe { byte_slice(p.cast(), size) }.map_err(|_| Error::invalid("hostPtr is NULL"))
}

/// A reply's headers as (name, value) pairs: `names` or `values` NULL while `count > 0`, or a
/// name or value NULL -> `hipObjInvalidValue`. Bytes that are not UTF-8 are replaced (no
/// checksum header or value contains them).
///
/// # Safety
/// `names` and `values` are NULL or each point at `count` readable pointers, each NULL or a
/// NUL-terminated string.
pub unsafe fn header_pairs(
    names: *const *const c_char,
    values: *const *const c_char,
    count: usize,
) -> Result<Vec<(String, String)>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if names.is_null() || values.is_null() {
        return Err(Error::invalid("headerNames or headerValues is NULL"));
    }
    if count > isize::MAX as usize / std::mem::size_of::<*const c_char>() {
        return Err(Error::invalid("headerCount exceeds any array's size"));
    }
    // SAFETY: non-NULL, count pointers readable per the caller, count * 8 <= isize::MAX.
    let (names, values) = unsafe {
        (
            std::slice::from_raw_parts(names, count),
            std::slice::from_raw_parts(values, count),
        )
    };
    names
        .iter()
        .zip(values)
        .map(|(&n, &v)| {
            if n.is_null() || v.is_null() {
                return Err(Error::invalid("a header name or value is NULL"));
            }
            // SAFETY: non-NULL and NUL-terminated per the caller.
            let text = |p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            Ok((text(n), text(v)))
        })
        .collect()
}

/// A required C string: NULL -> `hipObjInvalidValue` naming `what`. Bytes that are not UTF-8
/// are replaced.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub unsafe fn required_c_string(s: *const c_char, what: &'static str) -> Result<String> {
    if s.is_null() {
        return Err(Error::invalid(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's guarantee.
    Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// Where a description is written: NULL while `len > 0` -> `hipObjInvalidValue`; `len` 0 is no
/// description (`None`).
///
/// # Safety
/// `p` is NULL or valid for writes of `len` bytes for `'a`, and nothing else accesses them.
pub unsafe fn message_buffer<'a>(p: *mut c_char, len: usize) -> Result<Option<&'a mut [u8]>> {
    if len == 0 {
        return Ok(None);
    }
    if p.is_null() {
        return Err(Error::invalid("message is NULL"));
    }
    if isize::try_from(len).is_err() {
        return Err(Error::invalid("messageLen exceeds any object's size"));
    }
    // SAFETY: non-NULL, len <= isize::MAX, writable and unaliased for len bytes per the caller.
    Ok(Some(unsafe {
        std::slice::from_raw_parts_mut(p.cast::<u8>(), len)
    }))
}

/// Everything `hipObjGet`/`hipObjPut` check after initialisation, in order: `ops` NULL or a
/// callback NULL, then devPtr NULL, size 0, offset < 0 (all `hipObjInvalidValue`).
///
/// # Safety
/// `ops` is NULL or points at a readable `hipObjOps_t`.
pub unsafe fn transfer_request(
    ops: *const hipObjOps_t,
    ptr: *const c_void,
    size: usize,
    offset: libc::off_t,
) -> Result<(SendRequestFn, RecvReplyFn, BufferSpan)> {
    // SAFETY: forwarded from this function's contract.
    let (send, recv) = unsafe { callbacks(ops) }?;
    let span = buffer_span(ptr, size, offset)?;
    Ok((send, recv, span))
}

/// Everything `hipObjBufSync` checks after initialisation, in order: direction, then the span.
pub fn sync_request(
    ptr: *const c_void,
    size: usize,
    offset: libc::off_t,
    direction: c_int,
) -> Result<(BufferSpan, SyncDirection)> {
    let dir = sync_direction(direction)?;
    Ok((buffer_span(ptr, size, offset)?, dir))
}

/// Everything `hipObjGetRdmaToken` checks after initialisation, in order: outToken NULL or op
/// not 0/1, then devPtr NULL or size 0 (all `hipObjInvalidValue`).
pub fn token_request(
    out: *mut *mut c_char,
    op: c_int,
    ptr: *const c_void,
    size: usize,
) -> Result<(NonNull<*mut c_char>, usize, usize)> {
    let out = non_null(out, "outToken is NULL")?;
    token_op(op)?;
    let (ptr, size) = token_buffer(ptr, size)?;
    Ok((out, ptr, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::{null, null_mut};

    fn code<T: std::fmt::Debug>(r: Result<T>) -> OpError {
        r.expect_err("expected a rejection").code
    }

    const P: *const c_void = 0x1000 as *const c_void;

    #[test]
    fn init_config_order() {
        // SAFETY: all calls below: NULL or pointers to live configs with NULL or literal hints.
        assert_eq!(code(unsafe { init_config(null()) }), OpError::InvalidValue);
        // flags is checked before gpuDevice: both wrong still answers (the same code), and each
        // alone is rejected.
        let c = hipObjConfig_t {
            flags: 1,
            gpuDevice: -2,
            ..Default::default()
        };
        // SAFETY: every pointer passed is NULL or points at a live local of this test.
        assert_eq!(code(unsafe { init_config(&c) }), OpError::InvalidValue);
        let c = hipObjConfig_t {
            flags: 0x8000_0000,
            ..Default::default()
        };
        // SAFETY: every pointer passed is NULL or points at a live local of this test.
        assert!(unsafe { init_config(&c) }
            .unwrap_err()
            .detail
            .contains("flags"));
        let c = hipObjConfig_t {
            flags: 1,
            gpuDevice: -2,
            ..Default::default()
        };
        // SAFETY: every pointer passed is NULL or points at a live local of this test.
        assert!(unsafe { init_config(&c) }
            .unwrap_err()
            .detail
            .contains("flags"));
        for dev in [-2, -100, i32::MIN] {
            let c = hipObjConfig_t {
                gpuDevice: dev,
                ..Default::default()
            };
            // SAFETY: every pointer passed is NULL or points at a live local of this test.
            assert!(unsafe { init_config(&c) }
                .unwrap_err()
                .detail
                .contains("gpuDevice"));
        }
        for dev in [-1, 0, 7, i32::MAX] {
            let c = hipObjConfig_t {
                gpuDevice: dev,
                ..Default::default()
            };
            // SAFETY: every pointer passed is NULL or points at a live local of this test.
            let cfg = unsafe { init_config(&c) }.expect("valid");
            assert_eq!(cfg.gpu_device, dev);
            assert_eq!(cfg.nic_hint, None);
        }
    }

    #[test]
    fn init_config_nic_hint() {
        let empty = c"";
        let one = c"rxe0";
        let two = c"rxe0,mlx5_1";
        let cases: [(*const c_char, Option<&str>); 4] = [
            (null(), None),
            (empty.as_ptr(), None),
            (one.as_ptr(), Some("rxe0")),
            (two.as_ptr(), Some("rxe0,mlx5_1")),
        ];
        for (hint, want) in cases {
            let c = hipObjConfig_t {
                gpuDevice: -1,
                nicHint: hint,
                ..Default::default()
            };
            // SAFETY: a live config with a NULL or literal hint.
            let cfg = unsafe { init_config(&c) }.expect("valid");
            assert_eq!(cfg.nic_hint.as_deref(), want);
        }
        // The unused fields are ignored whatever they hold.
        let junk = c"ignored";
        let c = hipObjConfig_t {
            endpoint: junk.as_ptr(),
            region: junk.as_ptr(),
            accessKey: junk.as_ptr(),
            secretKey: junk.as_ptr(),
            gpuDevice: -1,
            ..Default::default()
        };
        // SAFETY: a live config.
        assert!(unsafe { init_config(&c) }.is_ok());
    }

    #[test]
    fn registration_order() {
        assert_eq!(code(registration(null(), 0)), OpError::InvalidValue);
        assert_eq!(code(registration(null(), 1)), OpError::InvalidValue);
        assert_eq!(code(registration(P, 0)), OpError::InvalidValue);
        // NULL wins over a size too large.
        assert_eq!(
            code(registration(null(), usize::MAX)),
            OpError::InvalidValue
        );
        let four_gib = MAX_REGISTRATION;
        assert_eq!(
            registration(P, four_gib).expect("4 GiB is allowed"),
            (0x1000, four_gib)
        );
        assert_eq!(code(registration(P, four_gib + 1)), OpError::SizeTooLarge);
        // Size is checked before the wrap: a wrapping oversize buffer is SizeTooLarge.
        let high = usize::MAX as *const c_void;
        assert_eq!(
            code(registration(high, four_gib + 1)),
            OpError::SizeTooLarge
        );
        assert_eq!(code(registration(high, 1)), OpError::InvalidValue);
        let last_page = (usize::MAX - 0xfff) as *const c_void;
        assert_eq!(code(registration(last_page, 0x1000)), OpError::InvalidValue);
        assert!(registration(last_page, 0xfff).is_ok());
        assert_eq!(registration(P, 1).expect("valid"), (0x1000, 1));
    }

    #[test]
    fn buffer_base_rejects_null() {
        assert_eq!(code(buffer_base(null())), OpError::InvalidValue);
        assert_eq!(buffer_base(P).expect("valid"), 0x1000);
    }

    #[test]
    fn buffer_span_checks() {
        assert_eq!(code(buffer_span(null(), 1, 0)), OpError::InvalidValue);
        assert_eq!(code(buffer_span(P, 0, 0)), OpError::InvalidValue);
        assert_eq!(code(buffer_span(P, 1, -1)), OpError::InvalidValue);
        assert_eq!(
            code(buffer_span(P, 1, libc::off_t::MIN)),
            OpError::InvalidValue
        );
        assert_eq!(
            buffer_span(P, 8, 0).expect("valid"),
            BufferSpan {
                ptr: 0x1000,
                size: 8,
                offset: 0
            }
        );
        let max = libc::off_t::MAX;
        assert_eq!(buffer_span(P, 8, max).expect("valid").offset, max as u64);
    }

    unsafe extern "C" fn send(_: *mut c_void, _: *const c_char, _: usize) -> c_int {
        0
    }
    unsafe extern "C" fn recv(_: *mut c_void, _: *mut c_char, _: *mut usize) -> c_int {
        0
    }

    #[test]
    fn callbacks_must_both_be_set() {
        // SAFETY: all calls: NULL or a live hipObjOps_t.
        assert_eq!(code(unsafe { callbacks(null()) }), OpError::InvalidValue);
        let none = hipObjOps_t::default();
        // SAFETY: a live hipObjOps_t.
        assert_eq!(code(unsafe { callbacks(&none) }), OpError::InvalidValue);
        let only_send = hipObjOps_t {
            sendRequest: Some(send),
            recvReply: None,
        };
        assert_eq!(
            // SAFETY: a live hipObjOps_t.
            code(unsafe { callbacks(&only_send) }),
            OpError::InvalidValue
        );
        let only_recv = hipObjOps_t {
            sendRequest: None,
            recvReply: Some(recv),
        };
        assert_eq!(
            // SAFETY: a live hipObjOps_t.
            code(unsafe { callbacks(&only_recv) }),
            OpError::InvalidValue
        );
        let both = hipObjOps_t {
            sendRequest: Some(send),
            recvReply: Some(recv),
        };
        // SAFETY: every pointer passed is NULL or points at a live local of this test.
        assert!(unsafe { callbacks(&both) }.is_ok());
    }

    #[test]
    fn directions_and_ops() {
        assert_eq!(sync_direction(0).expect("valid"), SyncDirection::ToHost);
        assert_eq!(sync_direction(1).expect("valid"), SyncDirection::ToDevice);
        for d in [-1, 2, 3, i32::MAX, i32::MIN] {
            assert_eq!(code(sync_direction(d)), OpError::InvalidValue);
            assert_eq!(code(token_op(d)), OpError::InvalidValue);
        }
        assert!(token_op(0).is_ok() && token_op(1).is_ok());
    }

    #[test]
    fn token_buffer_checks() {
        assert_eq!(code(token_buffer(null(), 1)), OpError::InvalidValue);
        assert_eq!(code(token_buffer(P, 0)), OpError::InvalidValue);
        assert_eq!(
            token_buffer(P, usize::MAX).expect("size is the core's check"),
            (0x1000, usize::MAX)
        );
    }

    #[test]
    fn byte_slice_and_prefix() {
        let s = c"abc";
        // SAFETY: literal readable for 3 bytes; NULL is rejected before any read.
        assert_eq!(unsafe { byte_slice(s.as_ptr(), 3) }.expect("valid"), b"abc");
        assert_eq!(
            // SAFETY: NULL is rejected before any read.
            code(unsafe { byte_slice(null(), 3) }),
            OpError::InvalidValue
        );
        assert_eq!(
            // SAFETY: the length is rejected before any read.
            code(unsafe { byte_slice(s.as_ptr(), usize::MAX) }),
            OpError::InvalidValue
        );
        let p = NonNull::new(s.as_ptr().cast_mut()).expect("non-null");
        // SAFETY: the literal is NUL-terminated.
        assert_eq!(unsafe { c_string_prefix(p, 89) }, b"abc");
        // SAFETY: as above; at most 2 bytes are read.
        assert_eq!(unsafe { c_string_prefix(p, 2) }, b"ab");
        // SAFETY: as above; nothing is read.
        assert_eq!(unsafe { c_string_prefix(p, 0) }, b"");
        assert_eq!(code(non_null(null_mut::<u8>(), "x")), OpError::InvalidValue);
    }
}
