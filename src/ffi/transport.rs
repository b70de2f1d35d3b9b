//! The exports of `include/hipobj_transport.h`: the RDMA-or-HTTP decision ([`crate::transport`])
//! for C applications, behind an opaque handle. Each export checks its arguments, makes one call
//! of the core, and writes its outputs last.

use super::args;
use super::boundary;
use super::types::hipObjError_t;
use crate::error::{Error, Result};
use crate::transport::{Destination, Direction, Mode, Path, Reason, Transport};
use std::ffi::{c_char, c_int, CStr};
use std::ptr::NonNull;

/// The exports of `include/hipobj_transport.h`, in header order.
pub const EXPORTED_FUNCTIONS_TRANSPORT: [&str; 6] = [
    "hipObjTransportCreate",
    "hipObjTransportDestroy",
    "hipObjTransportChoose",
    "hipObjTransportRecord",
    "hipObjTransportNoRdma",
    "hipObjTransportCounters",
];

/// The opaque `hipObjTransport_t` of the header: C holds a pointer to a boxed [`Transport`].
#[allow(non_camel_case_types)]
pub struct hipObjTransport_t {
    inner: Transport,
}

/// `hipObjTransportMode_t` and friends: plain ints in the header.
#[allow(non_camel_case_types)]
pub type hipObjTransportMode_t = c_int;
#[allow(non_camel_case_types)]
pub type hipObjTransportPath_t = c_int;
#[allow(non_camel_case_types)]
pub type hipObjTransportReason_t = c_int;
#[allow(non_camel_case_types)]
pub type hipObjTransportDirection_t = c_int;
#[allow(non_camel_case_types)]
pub type hipObjTransportDestination_t = c_int;

/// The header's values, in the order of their numbers (the value is the index).
/// `None` is `HIPOBJ_TRANSPORT_FROM_ENV`: the mode `HIPOBJ_TRANSPORT` names ([`Mode::from_env`]).
pub const MODES: [(&str, Option<Mode>); 4] = [
    ("HIPOBJ_TRANSPORT_AUTO", Some(Mode::Auto)),
    ("HIPOBJ_TRANSPORT_RDMA", Some(Mode::Rdma)),
    ("HIPOBJ_TRANSPORT_HTTP", Some(Mode::Http)),
    ("HIPOBJ_TRANSPORT_FROM_ENV", None),
];
pub const PATHS: [(&str, Path); 2] = [
    ("HIPOBJ_PATH_RDMA", Path::Rdma),
    ("HIPOBJ_PATH_HTTP", Path::Http),
];
pub const REASONS: [(&str, Reason); 6] = [
    ("HIPOBJ_REASON_FORCED", Reason::Forced),
    ("HIPOBJ_REASON_DEFAULT_START", Reason::DefaultStart),
    ("HIPOBJ_REASON_MEASURED", Reason::Measured),
    ("HIPOBJ_REASON_PROBE", Reason::Probe),
    ("HIPOBJ_REASON_NO_RDMA_DEVICE", Reason::NoRdmaDevice),
    ("HIPOBJ_REASON_DECLINED", Reason::Declined),
];
pub const DIRECTIONS: [(&str, Direction); 2] = [
    ("HIPOBJ_TRANSPORT_GET", Direction::Get),
    ("HIPOBJ_TRANSPORT_PUT", Direction::Put),
];
pub const DESTINATIONS: [(&str, Destination); 3] = [
    ("HIPOBJ_TRANSPORT_HOST", Destination::Host),
    ("HIPOBJ_TRANSPORT_GPU", Destination::Gpu),
    ("HIPOBJ_TRANSPORT_GPU_BOUNCE", Destination::GpuBounce),
];

/// The value numbered `v` of `table`, or `hipObjInvalidValue` naming `what`.
fn value<T: Copy>(table: &[(&str, T)], v: c_int, what: &'static str) -> Result<T> {
    usize::try_from(v)
        .ok()
        .and_then(|i| table.get(i))
        .map(|(_, t)| *t)
        .ok_or_else(|| Error::invalid(what))
}

/// The mode a `hipObjTransportMode_t` names (`HIPOBJ_TRANSPORT_FROM_ENV`: the one
/// `HIPOBJ_TRANSPORT` names); `hipObjInvalidValue` for any other number or a bad variable.
pub(super) fn mode_of(mode: hipObjTransportMode_t) -> Result<Mode> {
    match value(&MODES, mode, "mode is not a HIPOBJ_TRANSPORT_* mode")? {
        Some(mode) => Ok(mode),
        None => Mode::from_env().map_err(Error::invalid),
    }
}

/// The number of `t` in `table` (the header's value).
fn number<T: PartialEq>(table: &[(&str, T)], t: T) -> c_int {
    let i = table.iter().position(|(_, x)| *x == t).unwrap_or(0);
    c_int::try_from(i).unwrap_or(0)
}

/// The decision behind a handle: NULL -> `hipObjInvalidValue`.
///
/// # Safety
/// `t` is NULL or a handle from `hipObjTransportCreate` not yet destroyed.
unsafe fn handle<'a>(t: *mut hipObjTransport_t) -> Result<&'a Transport> {
    // SAFETY: the caller's guarantee; the handle is only read (the core is thread-safe).
    unsafe { t.as_ref() }
        .map(|h| &h.inner)
        .ok_or_else(|| Error::invalid("transport is NULL"))
}

/// The endpoint's name: NULL -> `hipObjInvalidValue`.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn endpoint(p: *const c_char) -> Result<String> {
    if p.is_null() {
        return Err(Error::invalid("endpoint is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Writes `v` to `p` unless NULL.
///
/// # Safety
/// `p` is NULL or writable.
unsafe fn write_optional<T>(p: *mut T, v: T) {
    if let Some(p) = NonNull::new(p) {
        // SAFETY: non-NULL and writable per the caller.
        unsafe { p.as_ptr().write(v) };
    }
}

/// `hipObjTransportCreate`.
///
/// # Safety
/// `transport` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjTransportCreate(
    mode: hipObjTransportMode_t,
    transport: *mut *mut hipObjTransport_t,
) -> hipObjError_t {
    boundary::call("hipObjTransportCreate", || {
        let mode = mode_of(mode)?;
        let out = args::non_null(transport, "transport is NULL")?;
        let made = Box::into_raw(Box::new(hipObjTransport_t {
            inner: Transport::new(mode),
        }));
        // SAFETY: non-NULL and writable per the caller.
        unsafe { out.as_ptr().write(made) };
        Ok(())
    })
}

/// `hipObjTransportDestroy`.
///
/// # Safety
/// `transport` is NULL or a handle from `hipObjTransportCreate`, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn hipObjTransportDestroy(transport: *mut hipObjTransport_t) {
    boundary::guard("hipObjTransportDestroy", || {
        if !transport.is_null() {
            // SAFETY: made by Box::into_raw in hipObjTransportCreate, given back once.
            drop(unsafe { Box::from_raw(transport) });
        }
    })
}

/// `hipObjTransportChoose`.
///
/// # Safety
/// `transport` as for [`handle`]; `endpoint` NULL or NUL-terminated; `path` and `reason` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjTransportChoose(
    transport: *mut hipObjTransport_t,
    endpoint: *const c_char,
    bytes: u64,
    direction: hipObjTransportDirection_t,
    destination: hipObjTransportDestination_t,
    path: *mut hipObjTransportPath_t,
    reason: *mut hipObjTransportReason_t,
) -> hipObjError_t {
    boundary::call("hipObjTransportChoose", || {
        // SAFETY: the caller's guarantees, passed on.
        let t = unsafe { handle(transport) }?;
        // SAFETY: as above.
        let ep = unsafe { self::endpoint(endpoint) }?;
        let direction = value(
            &DIRECTIONS,
            direction,
            "direction is not a HIPOBJ_TRANSPORT_GET/PUT",
        )?;
        let destination = value(
            &DESTINATIONS,
            destination,
            "destination is not a HIPOBJ_TRANSPORT_HOST/GPU/GPU_BOUNCE",
        )?;
        let path = args::non_null(path, "path is NULL")?;
        let ticket = t.pick(&ep, bytes, direction, destination);
        // SAFETY: non-NULL and writable per the caller.
        unsafe { path.as_ptr().write(number(&PATHS, ticket.path())) };
        // SAFETY: NULL or writable per the caller.
        unsafe { write_optional(reason, number(&REASONS, ticket.reason())) };
        Ok(())
    })
}

/// `hipObjTransportRecord`.
///
/// # Safety
/// `transport` as for [`handle`]; `endpoint` NULL or NUL-terminated.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipObjTransportRecord(
    transport: *mut hipObjTransport_t,
    endpoint: *const c_char,
    bytes: u64,
    direction: hipObjTransportDirection_t,
    destination: hipObjTransportDestination_t,
    path: hipObjTransportPath_t,
    reason: hipObjTransportReason_t,
    seconds: f64,
) -> hipObjError_t {
    boundary::call("hipObjTransportRecord", || {
        // SAFETY: the caller's guarantees, passed on.
        let t = unsafe { handle(transport) }?;
        // SAFETY: as above.
        let ep = unsafe { self::endpoint(endpoint) }?;
        let direction = value(
            &DIRECTIONS,
            direction,
            "direction is not a HIPOBJ_TRANSPORT_GET/PUT",
        )?;
        let destination = value(
            &DESTINATIONS,
            destination,
            "destination is not a HIPOBJ_TRANSPORT_HOST/GPU/GPU_BOUNCE",
        )?;
        let path = value(&PATHS, path, "path is not a HIPOBJ_PATH_*")?;
        let reason = value(&REASONS, reason, "reason is not a HIPOBJ_REASON_*")?;
        t.record_outcome(&ep, bytes, direction, destination, path, reason, seconds);
        Ok(())
    })
}

/// `hipObjTransportNoRdma`.
///
/// # Safety
/// `transport` as for [`handle`]; `endpoint` NULL or NUL-terminated; `first` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjTransportNoRdma(
    transport: *mut hipObjTransport_t,
    endpoint: *const c_char,
    first: *mut c_int,
) -> hipObjError_t {
    boundary::call("hipObjTransportNoRdma", || {
        // SAFETY: the caller's guarantees, passed on.
        let t = unsafe { handle(transport) }?;
        let said = match endpoint.is_null() {
            true => t.no_rdma_device("hipObjTransportNoRdma: no RDMA device in this process"),
            // SAFETY: non-NULL and NUL-terminated per the caller.
            false => t.declined(&unsafe { self::endpoint(endpoint) }?),
        };
        // SAFETY: NULL or writable per the caller.
        unsafe { write_optional(first, c_int::from(said)) };
        Ok(())
    })
}

/// `hipObjTransportCounters`.
///
/// # Safety
/// `transport` as for [`handle`]; each output NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjTransportCounters(
    transport: *mut hipObjTransport_t,
    path: hipObjTransportPath_t,
    reason: hipObjTransportReason_t,
    transfers: *mut u64,
    bytes: *mut u64,
    forReason: *mut u64,
) -> hipObjError_t {
    boundary::call("hipObjTransportCounters", || {
        // SAFETY: the caller's guarantees, passed on.
        let t = unsafe { handle(transport) }?;
        let path = value(&PATHS, path, "path is not a HIPOBJ_PATH_*")?;
        let reason = value(&REASONS, reason, "reason is not a HIPOBJ_REASON_*")?;
        let counters = t.counters();
        let c = counters.path(path);
        // SAFETY: each NULL or writable per the caller.
        unsafe {
            write_optional(transfers, c.transfers);
            write_optional(bytes, c.bytes);
            write_optional(forReason, c.because(reason));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OpError;
    use std::ptr::{null, null_mut};

    const EP: &CStr = c"http://10.0.0.2:9000";

    #[test]
    fn a_handle_chooses_records_and_counts() {
        let mut t = null_mut();
        // SAFETY: a valid out-pointer.
        let e = unsafe { hipObjTransportCreate(0, &mut t) };
        assert_eq!(e.opError, OpError::Success);
        let (mut path, mut reason) = (-1, -1);
        // SAFETY: a live handle, a C string, writable outputs.
        let e =
            unsafe { hipObjTransportChoose(t, EP.as_ptr(), 1 << 20, 0, 0, &mut path, &mut reason) };
        assert_eq!(e.opError, OpError::Success);
        assert_eq!((path, reason), (0, 1), "RDMA, default start");
        // SAFETY: as above.
        let e =
            unsafe { hipObjTransportRecord(t, EP.as_ptr(), 1 << 20, 0, 0, path, reason, 0.001) };
        assert_eq!(e.opError, OpError::Success);
        let (mut n, mut b, mut why) = (0, 0, 0);
        // SAFETY: as above.
        let e = unsafe { hipObjTransportCounters(t, 0, 1, &mut n, &mut b, &mut why) };
        assert_eq!(e.opError, OpError::Success);
        assert_eq!((n, b, why), (1, 1 << 20, 1));
        // SAFETY: the handle, destroyed once.
        unsafe { hipObjTransportDestroy(t) };
    }

    #[test]
    fn bad_arguments_write_nothing() {
        let mut t = null_mut();
        // SAFETY: a valid out-pointer; the mode is out of range.
        let e = unsafe { hipObjTransportCreate(4, &mut t) };
        assert_eq!(e.opError, OpError::InvalidValue);
        assert!(t.is_null());
        // SAFETY: a valid out-pointer.
        unsafe { hipObjTransportCreate(2, &mut t) };
        let mut path = -7;
        for (ep, dir, dest) in [(null(), 0, 0), (EP.as_ptr(), 2, 0), (EP.as_ptr(), 0, 3)] {
            // SAFETY: a live handle; each call has one bad argument.
            let e = unsafe { hipObjTransportChoose(t, ep, 1, dir, dest, &mut path, null_mut()) };
            assert_eq!(e.opError, OpError::InvalidValue);
            assert_eq!(path, -7);
        }
        // SAFETY: NULL handle.
        let e = unsafe { hipObjTransportNoRdma(null_mut(), null(), null_mut()) };
        assert_eq!(e.opError, OpError::InvalidValue);
        // SAFETY: the handle, destroyed once; NULL is allowed.
        unsafe {
            hipObjTransportDestroy(t);
            hipObjTransportDestroy(null_mut());
        }
    }
}
