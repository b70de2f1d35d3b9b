//! The exports of `include/hipobj_v2.h` (hipobj-rc-v2): `hipObjInitV2`, the interface queries,
//! `hipObjGetV2` and `hipObjPutV2`. Same shape as the rest of `ffi`: each export checks its
//! arguments ([`args`]), makes one core call (`Runtime::transfer_v2`), and maps the result once
//! (`boundary::call`).

pub mod args;
pub mod ops;
pub mod types;

use super::args::runtime;
use super::boundary;
use super::types::hipObjError_t;
use crate::rcv2::client::Deadlines;
use crate::runtime::{self, Runtime, TransferKind};
use args::V2Settings;
use ops::{CallContext, CallbackOpsV2};
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Arc, Mutex, Weak};
use types::{hipObjConfigV2_t, hipObjOpsV2_t};

/// The names of the v2 exports, in header order (tests compare them with the header and `nm`).
pub const EXPORTED_FUNCTIONS_V2: [&str; 8] = [
    "hipObjInitV2",
    "hipObjNicV2",
    "hipObjFreeNicV2",
    "hipObjSelectedPortV2",
    "hipObjSelectedGidIndexV2",
    "hipObjInterfaceSnapshotV2",
    "hipObjGetV2",
    "hipObjPutV2",
];

/// `hipObjInitV2`'s settings and the runtime they belong to (a later plain `hipObjInit` has
/// none: its transfers use the defaults).
static SETTINGS: Mutex<Option<(Weak<Runtime>, V2Settings)>> = Mutex::new(None);

fn settings_for(rt: &Arc<Runtime>) -> Option<V2Settings> {
    let g = SETTINGS.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref()
        .filter(|(owner, _)| Weak::ptr_eq(owner, &Arc::downgrade(rt)))
        .map(|(_, s)| s.clone())
}

/// `hipObjInitV2`: check the config (NULL; `v1` as `hipObjInit`; the control endpoint), start
/// the core, keep the v2 settings for this runtime.
///
/// # Safety
/// `config` is NULL or points at a readable `hipObjConfigV2_t` whose strings are NULL or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hipObjInitV2(config: *mut hipObjConfigV2_t) -> hipObjError_t {
    boundary::call("hipObjInitV2", || {
        // SAFETY: forwarded from this function's contract.
        let (core, v2) = unsafe { args::init_config_v2(config) }?;
        runtime::init(core)?;
        if let Some(rt) = runtime::current() {
            let mut g = SETTINGS.lock().unwrap_or_else(|p| p.into_inner());
            *g = Some((Arc::downgrade(&rt), v2));
        }
        Ok(())
    })
}

/// `hipObjNicV2`: a copy of the device name (free with `hipObjFreeNicV2`), NULL when not
/// initialised.
#[no_mangle]
pub extern "C" fn hipObjNicV2() -> *mut c_char {
    boundary::guard("hipObjNicV2", || match runtime::current() {
        Some(rt) => {
            CString::new(rt.device().name()).map_or(std::ptr::null_mut(), CString::into_raw)
        }
        None => std::ptr::null_mut(),
    })
}

/// `hipObjFreeNicV2`: release a name from `hipObjNicV2`; NULL is ignored.
///
/// # Safety
/// `nic` is NULL or a pointer `hipObjNicV2` returned, not yet released.
#[no_mangle]
pub unsafe extern "C" fn hipObjFreeNicV2(nic: *mut c_char) {
    boundary::guard("hipObjFreeNicV2", || {
        if !nic.is_null() {
            // SAFETY: made by `CString::into_raw` in `hipObjNicV2`, released once (contract).
            drop(unsafe { CString::from_raw(nic) });
        }
    })
}

/// `hipObjSelectedPortV2`: the port in use, 0 when not initialised.
#[no_mangle]
pub extern "C" fn hipObjSelectedPortV2() -> c_int {
    boundary::guard("hipObjSelectedPortV2", || {
        runtime::current().map_or(0, |rt| c_int::from(rt.device().port().port))
    })
}

/// `hipObjSelectedGidIndexV2`: the GID index in use, -1 when not initialised.
#[no_mangle]
pub extern "C" fn hipObjSelectedGidIndexV2() -> c_int {
    boundary::guard("hipObjSelectedGidIndexV2", || {
        runtime::current().map_or(-1, |rt| c_int::from(rt.device().port().gid_index))
    })
}

/// `hipObjInterfaceSnapshotV2`: name (truncated), port and GID index of one runtime; 1 when
/// initialised, 0 otherwise. NULL outputs are skipped.
///
/// # Safety
/// `nicOut` is NULL or writable for `nicLen` bytes; `portOut` and `gidOut` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjInterfaceSnapshotV2(
    nicOut: *mut c_char,
    nicLen: usize,
    portOut: *mut c_int,
    gidOut: *mut c_int,
) -> c_int {
    boundary::guard("hipObjInterfaceSnapshotV2", || {
        let Some(rt) = runtime::current() else {
            return 0;
        };
        let (nic, port, gid) = CallContext::interface(&rt);
        if !nicOut.is_null() && nicLen > 0 {
            let bytes = nic.as_bytes();
            let n = bytes.len().min(nicLen - 1);
            // SAFETY: `nicOut` is writable for `nicLen` > n bytes (contract); the copy and the
            // NUL stay inside it.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), nicOut, n);
                *nicOut.add(n) = 0;
            }
        }
        // SAFETY: NULL or writable (contract).
        if let Some(p) = unsafe { portOut.as_mut() } {
            *p = port;
        }
        // SAFETY: NULL or writable (contract).
        if let Some(g) = unsafe { gidOut.as_mut() } {
            *g = gid;
        }
        1
    })
}

/// # Safety
/// As `hipObjGetV2`.
#[allow(clippy::too_many_arguments)] // the export's parameters
unsafe fn transfer(
    name: &'static str,
    kind: TransferKind,
    bucket: *const c_char,
    key: *const c_char,
    devPtr: *const c_void,
    size: u64,
    offset: u64,
    query: *const c_char,
    ops: *const hipObjOpsV2_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    boundary::call(name, || {
        let rt = runtime()?;
        let settings = settings_for(&rt);
        let deadlines = settings
            .as_ref()
            .map_or_else(Deadlines::default, |s| s.deadlines);
        // SAFETY: forwarded from this function's contract.
        let a =
            unsafe { args::transfer_v2(bucket, key, devPtr, size, offset, query, ops, deadlines) }?;
        let (nic, nic_port, nic_gid_index) = CallContext::interface(&rt);
        let call = CallContext {
            method: match kind {
                TransferKind::Get => c"GET",
                TransferKind::Put => c"PUT",
            },
            bucket,
            key,
            query,
            size,
            offset,
            endpoint: settings.and_then(|s| CString::new(s.control_endpoint).ok()),
            nic,
            nic_port,
            nic_gid_index,
        };
        // SAFETY: the application hands over these callbacks, ctx and strings for this call.
        let mut callbacks = unsafe { CallbackOpsV2::new(a.callbacks, ctx, call) };
        rt.transfer_v2(kind, a.ptr, a.size, &a.target, &mut callbacks)
            .map(drop)
    })
}

/// `hipObjGetV2`: see `include/hipobj_v2.h` for the checks and results.
///
/// # Safety
/// The strings are NULL or NUL-terminated; `ops` is NULL or points at a readable
/// `hipObjOpsV2_t` whose callbacks may be called with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn hipObjGetV2(
    bucket: *const c_char,
    key: *const c_char,
    devPtr: *mut c_void,
    size: u64,
    offset: u64,
    query: *const c_char,
    ops: *mut hipObjOpsV2_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        transfer(
            "hipObjGetV2",
            TransferKind::Get,
            bucket,
            key,
            devPtr,
            size,
            offset,
            query,
            ops,
            ctx,
        )
    }
}

/// `hipObjPutV2`: as `hipObjGetV2`, the library writing the buffer into the server's staging.
///
/// # Safety
/// As `hipObjGetV2`.
#[no_mangle]
pub unsafe extern "C" fn hipObjPutV2(
    bucket: *const c_char,
    key: *const c_char,
    devPtr: *const c_void,
    size: u64,
    offset: u64,
    query: *const c_char,
    ops: *mut hipObjOpsV2_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        transfer(
            "hipObjPutV2",
            TransferKind::Put,
            bucket,
            key,
            devPtr,
            size,
            offset,
            query,
            ops,
            ctx,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uninitialised_queries() {
        if runtime::current().is_some() {
            return;
        }
        assert!(hipObjNicV2().is_null());
        assert_eq!(hipObjSelectedPortV2(), 0);
        assert_eq!(hipObjSelectedGidIndexV2(), -1);
        let mut name = [1 as c_char; 8];
        let (mut port, mut gid) = (7, 7);
        // SAFETY: live outputs of the sizes given.
        let r = unsafe { hipObjInterfaceSnapshotV2(name.as_mut_ptr(), 8, &mut port, &mut gid) };
        assert_eq!((r, port, gid, name[0]), (0, 7, 7, 1));
        // SAFETY: NULL is allowed.
        unsafe { hipObjFreeNicV2(std::ptr::null_mut()) };
    }
}
