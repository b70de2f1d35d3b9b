//! The exports of `include/hipobj_batch.h`: the batch queue ([`crate::batch`]) behind a handle
//! that is a number of the open queues' table ([`crate::batch::table`]), never a pointer, so a
//! queue used after destroy or shutdown is refused. Each export checks its arguments in the
//! header's order, makes one call of the core, and writes its outputs last.

use super::args;
use super::boundary;
use super::transport::hipObjTransportMode_t;
use super::types::hipObjError_t;
use crate::batch::{self, table, Config, Event, Op, OpKind, Queue, Status};
use crate::client::credentials::CredentialSources;
use crate::error::{Error, Result};
use crate::rcv2::negotiate::Protocol;
use crate::transport::Path;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::time::Duration;

/// The exports of `include/hipobj_batch.h`, in header order.
pub const EXPORTED_FUNCTIONS_BATCH: [&str; 8] = [
    "hipObjBatchCreate",
    "hipObjBatchSubmit",
    "hipObjBatchPoll",
    "hipObjBatchCancel",
    "hipObjBatchCancelAll",
    "hipObjBatchEventFd",
    "hipObjBatchHead",
    "hipObjBatchDestroy",
];

/// `HIPOBJ_BATCH_S3_CODE_LEN`.
pub const HIPOBJ_BATCH_S3_CODE_LEN: usize = 64;

/// The opaque `hipObjBatch_t`: never dereferenced; its address is the table's number.
#[allow(non_camel_case_types)]
pub struct hipObjBatch_t {
    _never: [u8; 0],
}

/// `hipObjBatchConfig_t`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct hipObjBatchConfig_t {
    pub endpoint: *const c_char,
    pub region: *const c_char,
    pub accessKey: *const c_char,
    pub secretKey: *const c_char,
    pub profile: *const c_char,
    pub caBundle: *const c_char,
    pub depth: c_uint,
    pub verify: c_int,
    pub transport: hipObjTransportMode_t,
}

/// `hipObjBatchOp_t`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct hipObjBatchOp_t {
    pub opcode: c_int,
    pub bucket: *const c_char,
    pub key: *const c_char,
    pub objectOffset: u64,
    pub length: usize,
    pub buffer: *mut c_void,
    pub bufferOffset: usize,
    pub cookie: *mut c_void,
}

/// `hipObjBatchEvent_t`.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct hipObjBatchEvent_t {
    pub cookie: *mut c_void,
    pub status: c_int,
    pub error: hipObjError_t,
    pub httpStatus: c_int,
    pub s3Code: [c_char; HIPOBJ_BATCH_S3_CODE_LEN],
    pub bytes: u64,
    pub path: c_int,
    pub verified: c_int,
    pub retries: u64,
}

/// The header's values, by name (tests/ffi_header.rs compares them with the header).
pub const OPCODES: [(&str, c_int); 2] = [("HIPOBJ_BATCH_GET", 0), ("HIPOBJ_BATCH_PUT", 1)];
pub const STATUSES: [(&str, c_int); 3] = [
    ("HIPOBJ_BATCH_COMPLETE", 0),
    ("HIPOBJ_BATCH_FAILED", 1),
    ("HIPOBJ_BATCH_CANCELLED", 2),
];
pub const PATHS: [(&str, c_int); 4] = [
    ("HIPOBJ_BATCH_PATH_UNKNOWN", 0),
    ("HIPOBJ_BATCH_PATH_RDMA_V1", 1),
    ("HIPOBJ_BATCH_PATH_RDMA_V2", 2),
    ("HIPOBJ_BATCH_PATH_HTTP", 3),
];

impl From<Event> for hipObjBatchEvent_t {
    fn from(e: Event) -> hipObjBatchEvent_t {
        let mut code = [0 as c_char; HIPOBJ_BATCH_S3_CODE_LEN];
        if let Some(text) = &e.s3_code {
            let n = text.len().min(HIPOBJ_BATCH_S3_CODE_LEN - 1);
            for (d, &b) in code.iter_mut().zip(&text.as_bytes()[..n]) {
                *d = b as c_char;
            }
        }
        hipObjBatchEvent_t {
            cookie: e.cookie as usize as *mut c_void,
            status: match e.status {
                Status::Complete => 0,
                Status::Failed => 1,
                Status::Cancelled => 2,
            },
            error: e.error.map_or(hipObjError_t::SUCCESS, hipObjError_t::from),
            httpStatus: c_int::from(e.http_status),
            s3Code: code,
            bytes: e.bytes,
            path: match (e.path, e.protocol) {
                (Some(Path::Http), _) => 3,
                (_, Some(Protocol::V1)) => 1,
                (_, Some(Protocol::V2)) => 2,
                (_, None) => 0,
            },
            verified: c_int::from(e.verified),
            retries: e.retries,
        }
    }
}

/// The handle's number.
fn number(batch: *mut hipObjBatch_t) -> Result<u64> {
    match batch as usize {
        0 => Err(Error::invalid("batch is NULL")),
        n => Ok(n as u64),
    }
}

/// The open queue of a handle.
fn queue(batch: *mut hipObjBatch_t) -> Result<std::sync::Arc<Queue>> {
    table::get(number(batch)?)
}

/// A string of the config: NULL and "" are none.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn optional(p: *const c_char) -> Option<String> {
    // SAFETY: forwarded from this function's contract.
    unsafe { args::optional_c_string(p) }
}

/// `hipObjBatchConfig_t`, checked: NULL config, endpoint, depth, the key pair.
///
/// # Safety
/// `config` is NULL or readable, its strings NULL or NUL-terminated.
unsafe fn config(config: *const hipObjBatchConfig_t) -> Result<Config> {
    // SAFETY: the caller's guarantee.
    let c = unsafe { config.as_ref() }.ok_or_else(|| Error::invalid("config is NULL"))?;
    // SAFETY: the strings are NULL or NUL-terminated per the caller.
    let (endpoint, access_key, secret_key) = unsafe {
        (
            optional(c.endpoint).ok_or_else(|| Error::invalid("config.endpoint is NULL"))?,
            optional(c.accessKey),
            optional(c.secretKey),
        )
    };
    let depth = c.depth as usize;
    if !(1..=batch::MAX_DEPTH).contains(&depth) {
        return Err(Error::invalid(format!(
            "config.depth {depth} is not 1..={}",
            batch::MAX_DEPTH
        )));
    }
    // SAFETY: as above.
    let (region, profile, ca_bundle) = unsafe {
        (
            optional(c.region),
            optional(c.profile),
            optional(c.caBundle),
        )
    };
    Ok(Config {
        endpoint,
        credentials: CredentialSources {
            access_key,
            secret_key,
            profile,
            region,
            ca_bundle: ca_bundle.map(PathBuf::from),
        },
        depth,
        verify: c.verify != 0,
        transport: super::transport::mode_of(c.transport)?,
    })
}

/// One operation, checked: opcode, bucket, key (the rest the queue checks).
///
/// # Safety
/// `op`'s strings are NULL or NUL-terminated.
unsafe fn operation(op: &hipObjBatchOp_t, i: usize) -> Result<Op> {
    let kind = match op.opcode {
        0 => OpKind::Get,
        1 => OpKind::Put,
        other => {
            return Err(Error::invalid(format!(
                "operation {i}: opcode {other} is neither HIPOBJ_BATCH_GET nor HIPOBJ_BATCH_PUT"
            )))
        }
    };
    let text = |p: *const c_char, what: &str| -> Result<String> {
        if p.is_null() {
            return Err(Error::invalid(format!("operation {i}: {what} is NULL")));
        }
        // SAFETY: non-NULL and NUL-terminated per the caller.
        let s = unsafe { CStr::from_ptr(p) };
        s.to_str()
            .map(str::to_owned)
            .map_err(|_| Error::invalid(format!("operation {i}: {what} is not UTF-8")))
    };
    Ok(Op {
        kind,
        bucket: text(op.bucket, "bucket")?,
        key: text(op.key, "key")?,
        object_offset: op.objectOffset,
        len: op.length,
        buffer: op.buffer as usize,
        buffer_offset: op.bufferOffset,
        cookie: op.cookie as usize as u64,
    })
}

/// `hipObjBatchCreate`: not initialised; config; batch NULL; then the queue.
///
/// # Safety
/// `config` is NULL or a readable config whose strings are NULL or NUL-terminated; `batch` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjBatchCreate(
    config: *const hipObjBatchConfig_t,
    batch: *mut *mut hipObjBatch_t,
) -> hipObjError_t {
    boundary::call("hipObjBatchCreate", || {
        let rt = args::runtime()?;
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { self::config(config) }?;
        let out = args::non_null(batch, "batch is NULL")?;
        let handle = table::insert(Queue::new(rt, cfg)?);
        // SAFETY: non-NULL and writable per the contract; written last, on success only.
        unsafe { out.as_ptr().write(handle as usize as *mut hipObjBatch_t) };
        Ok(())
    })
}

/// `hipObjBatchSubmit`: batch; ops NULL; count 0 or past the depth; each operation; the room.
///
/// # Safety
/// `ops` is NULL or readable for `count` operations whose strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hipObjBatchSubmit(
    batch: *mut hipObjBatch_t,
    ops: *const hipObjBatchOp_t,
    count: usize,
) -> hipObjError_t {
    boundary::call("hipObjBatchSubmit", || {
        let q = queue(batch)?;
        if ops.is_null() {
            return Err(Error::invalid("ops is NULL"));
        }
        if count == 0 || count > q.depth() {
            return Err(Error::invalid(format!(
                "count {count} is not 1..={} (the depth)",
                q.depth()
            )));
        }
        // SAFETY: non-NULL and readable for `count` elements per the contract.
        let given = unsafe { std::slice::from_raw_parts(ops, count) };
        let mut checked = Vec::with_capacity(count);
        for (i, op) in given.iter().enumerate() {
            // SAFETY: the strings are NULL or NUL-terminated per the contract.
            checked.push(unsafe { operation(op, i) }?);
        }
        q.submit(checked)
    })
}

/// `hipObjBatchPoll`: batch; events NULL with room; count NULL; minEvents > maxEvents;
/// timeoutMs < -1; then the events, and `*count`.
///
/// # Safety
/// `events` is NULL or writable for `maxEvents` events; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjBatchPoll(
    batch: *mut hipObjBatch_t,
    minEvents: usize,
    maxEvents: usize,
    events: *mut hipObjBatchEvent_t,
    count: *mut usize,
    timeoutMs: c_int,
) -> hipObjError_t {
    boundary::call("hipObjBatchPoll", || {
        let q = queue(batch)?;
        if events.is_null() && maxEvents > 0 {
            return Err(Error::invalid("events is NULL"));
        }
        let out = args::non_null(count, "count is NULL")?;
        if minEvents > maxEvents {
            return Err(Error::invalid("minEvents is more than maxEvents"));
        }
        let timeout = match timeoutMs {
            -1 => None,
            t if t >= 0 => Some(Duration::from_millis(t as u64)),
            _ => return Err(Error::invalid("timeoutMs is below -1")),
        };
        let got = q.poll(minEvents, maxEvents, timeout);
        for (i, e) in got.iter().enumerate() {
            // SAFETY: `i < got.len() <= maxEvents`, and `events` is writable for `maxEvents`
            // events per the contract (non-NULL: checked above when maxEvents > 0).
            unsafe { events.add(i).write(hipObjBatchEvent_t::from(e.clone())) };
        }
        // SAFETY: non-NULL and writable per the contract.
        unsafe { out.as_ptr().write(got.len()) };
        Ok(())
    })
}

/// `hipObjBatchCancel`: batch; then the cookie.
#[no_mangle]
pub extern "C" fn hipObjBatchCancel(
    batch: *mut hipObjBatch_t,
    cookie: *mut c_void,
) -> hipObjError_t {
    boundary::call("hipObjBatchCancel", || {
        queue(batch)?.cancel(cookie as usize as u64)
    })
}

/// `hipObjBatchCancelAll`: batch.
#[no_mangle]
pub extern "C" fn hipObjBatchCancelAll(batch: *mut hipObjBatch_t) -> hipObjError_t {
    boundary::call("hipObjBatchCancelAll", || {
        queue(batch)?.cancel_all();
        Ok(())
    })
}

/// `hipObjBatchEventFd`: batch; fd NULL.
///
/// # Safety
/// `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjBatchEventFd(
    batch: *mut hipObjBatch_t,
    fd: *mut c_int,
) -> hipObjError_t {
    boundary::call("hipObjBatchEventFd", || {
        let q = queue(batch)?;
        let out = args::non_null(fd, "fd is NULL")?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { out.as_ptr().write(q.event_fd()) };
        Ok(())
    })
}

/// `hipObjBatchHead`: batch; bucket NULL; key not UTF-8; size NULL; then the HEAD. `*httpStatus`
/// is written whenever the HEAD was sent, `*size` on success only.
///
/// # Safety
/// `bucket` and `key` are NULL or NUL-terminated; `size` and `httpStatus` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjBatchHead(
    batch: *mut hipObjBatch_t,
    bucket: *const c_char,
    key: *const c_char,
    size: *mut u64,
    httpStatus: *mut c_int,
) -> hipObjError_t {
    boundary::call("hipObjBatchHead", || {
        let q = queue(batch)?;
        // SAFETY: NULL or NUL-terminated per the contract.
        let bucket =
            unsafe { optional(bucket) }.ok_or_else(|| Error::invalid("bucket is NULL or empty"))?;
        let key = match key.is_null() {
            true => None,
            // SAFETY: non-NULL and NUL-terminated per the contract.
            false => Some(
                unsafe { CStr::from_ptr(key) }
                    .to_str()
                    .map_err(|_| Error::invalid("key is not UTF-8"))?
                    .to_owned(),
            ),
        };
        let out = args::non_null(size, "size is NULL")?;
        let (status, answer) = q.head(&bucket, key.as_deref());
        if let Some(p) = std::ptr::NonNull::new(httpStatus) {
            // SAFETY: non-NULL and writable per the contract.
            unsafe { p.as_ptr().write(c_int::from(status)) };
        }
        let len = answer?;
        // SAFETY: non-NULL and writable per the contract; written on success only.
        unsafe { out.as_ptr().write(len) };
        Ok(())
    })
}

/// `hipObjBatchDestroy`: batch; then the queue closes (when the last call using it returns).
#[no_mangle]
pub extern "C" fn hipObjBatchDestroy(batch: *mut hipObjBatch_t) -> hipObjError_t {
    boundary::call("hipObjBatchDestroy", || {
        let q = table::remove(number(batch)?)?;
        q.close_now();
        Ok(())
    })
}
