//! Buffer registration: `hipObjBufRegister`, `hipObjBufRegisterHost`, `hipObjBufDeregister`.

use super::types::hipObjError_t;
use super::{args, boundary};
use crate::runtime::MemoryKind;
use std::ffi::c_void;

/// `hipObjBufRegister`: not initialised; NULL/0; size > 4 GiB; wrap; then the core.
#[no_mangle]
pub extern "C" fn hipObjBufRegister(devPtr: *mut c_void, size: usize) -> hipObjError_t {
    register("hipObjBufRegister", devPtr, size, MemoryKind::Device)
}

/// `hipObjBufRegisterHost`: as `hipObjBufRegister`, for host memory.
#[no_mangle]
pub extern "C" fn hipObjBufRegisterHost(hostPtr: *mut c_void, size: usize) -> hipObjError_t {
    register("hipObjBufRegisterHost", hostPtr, size, MemoryKind::Host)
}

fn register(name: &'static str, ptr: *mut c_void, size: usize, kind: MemoryKind) -> hipObjError_t {
    boundary::call(name, || {
        let rt = args::runtime()?;
        let (base, size) = args::registration(ptr, size)?;
        rt.register(base, size, kind)
    })
}

/// `hipObjBufDeregister`: not initialised; NULL; then the core.
#[no_mangle]
pub extern "C" fn hipObjBufDeregister(devPtr: *mut c_void) -> hipObjError_t {
    boundary::call("hipObjBufDeregister", || {
        let rt = args::runtime()?;
        let base = args::buffer_base(devPtr)?;
        rt.deregister(base)
    })
}
