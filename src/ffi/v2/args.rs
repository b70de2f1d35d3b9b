//! Argument checks of the v2 exports, in the order `include/hipobj_v2.h` documents (parameter
//! order). They only read their arguments; no check writes an output.

use super::types::{
    hipObjConfigV2_t, hipObjOpsV2_t, FinishReadyFn, SendCancelFn, SendPrepareFn, SendReadyRequestFn,
};
use crate::error::{Error, Result};
use crate::ffi::args::init_config;
use crate::rcv2::client::{self, Deadlines, V2Target, MAX_BUCKET_LEN, MAX_KEY_LEN};
use crate::rcv2::Target;
use crate::runtime::InitConfig;
use std::ffi::{c_char, c_void, CStr};
use std::time::Duration;

/// What `hipObjInitV2` keeps besides the core's config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V2Settings {
    pub control_endpoint: String,
    pub deadlines: Deadlines,
}

/// `hipObjInitV2`'s config: NULL; then `v1` as `hipObjInit` checks it; then the control endpoint
/// NULL or not `http://`/`https://` (all `hipObjInvalidValue`).
///
/// # Safety
/// `config` is NULL or points at a readable `hipObjConfigV2_t` whose strings are NULL or
/// NUL-terminated.
pub unsafe fn init_config_v2(config: *const hipObjConfigV2_t) -> Result<(InitConfig, V2Settings)> {
    // SAFETY: the caller guarantees `config` is NULL or valid for reads.
    let config = unsafe { config.as_ref() }.ok_or_else(|| Error::invalid("config is NULL"))?;
    // SAFETY: `v1` lives inside the readable `config`; its strings are the caller's.
    let core = unsafe { init_config(&config.v1) }?;
    let endpoint = config.control.controlEndpoint;
    if endpoint.is_null() {
        return Err(Error::invalid("control.controlEndpoint is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    let endpoint = unsafe { CStr::from_ptr(endpoint) }
        .to_string_lossy()
        .into_owned();
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(Error::invalid(
            "control.controlEndpoint is not an http:// or https:// URI",
        ));
    }
    let defaults = Deadlines::default();
    let ms = |v: u32, default: Duration| {
        if v == 0 {
            default
        } else {
            Duration::from_millis(u64::from(v))
        }
    };
    let deadlines = Deadlines {
        transfer: ms(config.transferDeadlineMs, defaults.transfer),
        connect: ms(config.connectDeadlineMs, defaults.connect),
        cancel: ms(config.cancelCleanupBudgetMs, defaults.cancel),
    };
    Ok((
        core,
        V2Settings {
            control_endpoint: endpoint,
            deadlines,
        },
    ))
}

/// The four callbacks of `hipObjOpsV2_t`.
#[derive(Clone, Copy, Debug)]
pub struct CallbacksV2 {
    pub prepare: SendPrepareFn,
    pub ready: SendReadyRequestFn,
    pub finish: FinishReadyFn,
    pub cancel: SendCancelFn,
}

/// A checked `hipObjGetV2`/`hipObjPutV2` call.
#[derive(Debug)]
pub struct TransferV2Args {
    pub target: V2Target,
    pub ptr: usize,
    pub size: usize,
    pub callbacks: CallbacksV2,
}

/// A C string argument that must be non-NULL, non-empty and at most `max` bytes, as UTF-8.
///
/// # Safety
/// `s` is NULL or NUL-terminated.
unsafe fn name(s: *const c_char, what: &str, max: usize) -> Result<String> {
    if s.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    let bytes = unsafe { CStr::from_ptr(s) }.to_bytes();
    if bytes.is_empty() || bytes.len() > max {
        return Err(Error::invalid(format!(
            "{what} has {} bytes, not 1 to {max}",
            bytes.len()
        )));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// A canonical query (`k=v` pairs joined by `&`, sorted, percent-encoded as the codec encodes
/// them), decoded; NULL or "" is none. Checked by parsing it with the target codec and encoding it
/// back: only a query the codec would have written itself passes.
///
/// # Safety
/// `q` is NULL or NUL-terminated.
unsafe fn canonical_query(q: *const c_char) -> Result<Vec<(String, String)>> {
    if q.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    let q = unsafe { CStr::from_ptr(q) }
        .to_str()
        .map_err(|_| Error::invalid("query is not UTF-8"))?;
    if q.is_empty() {
        return Ok(Vec::new());
    }
    let probe = format!("/b/k?{q}");
    let parsed = Target::parse(&probe)
        .map_err(|e| Error::invalid(format!("query is not canonical: {}", e.message)))?;
    if parsed.encode() != probe || parsed.query.iter().any(|(k, _)| k.is_empty()) {
        return Err(Error::invalid(
            "query is not canonical (sorted k=v pairs, RFC 3986 percent-encoding)",
        ));
    }
    Ok(parsed.query)
}

/// The callbacks: `ops` NULL or any of the four NULL -> `hipObjInvalidValue`.
///
/// # Safety
/// `ops` is NULL or points at a readable `hipObjOpsV2_t`.
unsafe fn callbacks(ops: *const hipObjOpsV2_t) -> Result<CallbacksV2> {
    // SAFETY: the caller guarantees `ops` is NULL or valid for reads.
    let ops = unsafe { ops.as_ref() }.ok_or_else(|| Error::invalid("ops is NULL"))?;
    match (
        ops.sendPrepare,
        ops.sendReadyRequest,
        ops.finishReady,
        ops.sendCancel,
    ) {
        (Some(prepare), Some(ready), Some(finish), Some(cancel)) => Ok(CallbacksV2 {
            prepare,
            ready,
            finish,
            cancel,
        }),
        _ => Err(Error::invalid("a callback of ops is NULL")),
    }
}

/// Everything `hipObjGetV2`/`hipObjPutV2` check after initialisation, in parameter order: bucket,
/// key, devPtr NULL, size 0 or over 2^31 - 1 (`hipObjSizeTooLarge`), offset + size wrapping,
/// query, ops.
///
/// # Safety
/// The strings are NULL or NUL-terminated; `ops` is NULL or points at a readable
/// `hipObjOpsV2_t`.
#[allow(clippy::too_many_arguments)] // the export's parameters, in its order
pub unsafe fn transfer_v2(
    bucket: *const c_char,
    key: *const c_char,
    dev_ptr: *const c_void,
    size: u64,
    offset: u64,
    query: *const c_char,
    ops: *const hipObjOpsV2_t,
    deadlines: Deadlines,
) -> Result<TransferV2Args> {
    // SAFETY: `bucket` is NULL or NUL-terminated (this function's contract).
    let bucket = unsafe { name(bucket, "bucket", MAX_BUCKET_LEN) }?;
    // SAFETY: `key` is NULL or NUL-terminated (this function's contract).
    let key = unsafe { name(key, "key", MAX_KEY_LEN) }?;
    if dev_ptr.is_null() {
        return Err(Error::invalid("devPtr is NULL"));
    }
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    client::check_size(size)?;
    if offset.checked_add(size as u64).is_none() {
        return Err(Error::invalid("offset + size wraps"));
    }
    // SAFETY: forwarded.
    let query = unsafe { canonical_query(query) }?;
    // SAFETY: forwarded.
    let callbacks = unsafe { callbacks(ops) }?;
    Ok(TransferV2Args {
        target: V2Target {
            bucket,
            key,
            query,
            offset,
            deadlines,
        },
        ptr: dev_ptr as usize,
        size,
        callbacks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OpError;
    use crate::ffi::v2::types::hipObjTransferReqV2_t;
    use std::ffi::{c_int, CString};

    unsafe extern "C" fn prepare(
        _: *mut c_void,
        _: *const hipObjTransferReqV2_t,
        _: *mut super::super::types::hipObjPrepareReplyV2_t,
    ) -> c_int {
        -1
    }
    unsafe extern "C" fn ready(_: *mut c_void, _: *const hipObjTransferReqV2_t) -> c_int {
        -1
    }
    unsafe extern "C" fn finish(
        _: *mut c_void,
        _: *const hipObjTransferReqV2_t,
        _: *mut super::super::types::hipObjFinalReplyV2_t,
    ) -> c_int {
        -1
    }

    fn ops() -> hipObjOpsV2_t {
        hipObjOpsV2_t {
            sendPrepare: Some(prepare),
            sendReadyRequest: Some(ready),
            finishReady: Some(finish),
            sendCancel: Some(ready),
            ..Default::default()
        }
    }

    /// `transfer_v2` with the given arguments; the error code, or None when accepted.
    fn code(
        bucket: *const c_char,
        key: *const c_char,
        ptr: usize,
        size: u64,
        offset: u64,
        query: *const c_char,
        ops: *const hipObjOpsV2_t,
    ) -> Option<OpError> {
        // SAFETY: the strings are literals or NULL; ops is NULL or a live struct.
        unsafe {
            transfer_v2(
                bucket,
                key,
                ptr as *const c_void,
                size,
                offset,
                query,
                ops,
                Deadlines::default(),
            )
        }
        .err()
        .map(|e| e.code)
    }

    #[test]
    fn checks_in_parameter_order() {
        let o = ops();
        let (b, k) = (c"b".as_ptr(), c"k".as_ptr());
        let null = std::ptr::null();
        let long_bucket = CString::new("b".repeat(256)).unwrap_or_default();
        let long_key = CString::new("k".repeat(1025)).unwrap_or_default();
        let inv = Some(OpError::InvalidValue);
        let no_ops: *const hipObjOpsV2_t = std::ptr::null();
        assert_eq!(code(b, k, 0x1000, 16, 0, null, &o), None);
        // each failure, with everything after it also wrong: the first one decides
        assert_eq!(code(null, null, 0, 0, u64::MAX, c"x".as_ptr(), no_ops), inv);
        assert_eq!(code(c"".as_ptr(), k, 0x1000, 16, 0, null, &o), inv);
        assert_eq!(code(long_bucket.as_ptr(), k, 0x1000, 16, 0, null, &o), inv);
        assert_eq!(code(b, null, 0, 0, 0, null, no_ops), inv);
        assert_eq!(code(b, long_key.as_ptr(), 0x1000, 16, 0, null, &o), inv);
        assert_eq!(code(b, k, 0, 0, 0, null, no_ops), inv);
        assert_eq!(code(b, k, 0x1000, 0, 0, null, no_ops), inv);
        assert_eq!(
            code(b, k, 0x1000, 0x8000_0000, 0, null, no_ops),
            Some(OpError::SizeTooLarge)
        );
        assert_eq!(code(b, k, 0x1000, 16, u64::MAX - 8, null, no_ops), inv);
        assert_eq!(code(b, k, 0x1000, 16, 0, c"b=2&a=1".as_ptr(), no_ops), inv);
        assert_eq!(code(b, k, 0x1000, 16, 0, null, no_ops), inv);
        let mut missing = ops();
        missing.finishReady = None;
        assert_eq!(code(b, k, 0x1000, 16, 0, null, &missing), inv);
    }

    #[test]
    fn queries_must_be_canonical() {
        let o = ops();
        let (b, k) = (c"b".as_ptr(), c"k".as_ptr());
        for good in [
            c"",
            c"a=1",
            c"a=1&b=2",
            c"partNumber=3&uploadId=x%2By",
            c"versionId=abc",
        ] {
            assert_eq!(
                code(b, k, 0x1000, 16, 0, good.as_ptr(), &o),
                None,
                "{good:?}"
            );
        }
        for bad in [
            c"b=2&a=1", c"a", c"=1", c"a=%2b", c"a=1&", c"a=x y", c"a=%41",
        ] {
            assert_eq!(
                code(b, k, 0x1000, 16, 0, bad.as_ptr(), &o),
                Some(OpError::InvalidValue),
                "{bad:?}"
            );
        }
        // SAFETY: a literal.
        let q = unsafe { canonical_query(c"partNumber=3&uploadId=x%2By".as_ptr()) };
        assert_eq!(
            q.ok(),
            Some(vec![
                ("partNumber".to_string(), "3".to_string()),
                ("uploadId".to_string(), "x+y".to_string())
            ])
        );
    }

    #[test]
    fn init_config_defaults_and_checks() {
        let mut cfg = hipObjConfigV2_t {
            v1: crate::ffi::types::hipObjConfig_t {
                gpuDevice: -1,
                ..Default::default()
            },
            control: super::super::types::hipObjControlEndpointV2_t {
                controlEndpoint: c"http://10.0.0.1:9000".as_ptr(),
            },
            connectDeadlineMs: 0,
            transferDeadlineMs: 2500,
            cancelCleanupBudgetMs: 0,
        };
        // SAFETY: a live config with literal strings.
        let (_, v2) = unsafe { init_config_v2(&cfg) }.expect("valid");
        assert_eq!(v2.control_endpoint, "http://10.0.0.1:9000");
        assert_eq!(v2.deadlines.transfer, Duration::from_millis(2500));
        assert_eq!(v2.deadlines.connect, Deadlines::default().connect);
        assert_eq!(v2.deadlines.cancel, Duration::from_secs(1));
        cfg.control.controlEndpoint = c"10.0.0.1:9000".as_ptr();
        // SAFETY: as above.
        assert!(unsafe { init_config_v2(&cfg) }.is_err());
        // SAFETY: NULL is allowed.
        assert!(unsafe { init_config_v2(std::ptr::null()) }.is_err());
    }
}
