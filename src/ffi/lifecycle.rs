//! `hipObjInit` and `hipObjShutdown`.

use super::types::{hipObjConfig_t, hipObjError_t};
use super::{args, boundary};
use crate::runtime;

/// `hipObjInit`: check the config, read the environment, start the core.
///
/// # Safety
/// `config` is NULL or points at a readable `hipObjConfig_t` whose `nicHint` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipObjInit(config: *mut hipObjConfig_t) -> hipObjError_t {
    boundary::call("hipObjInit", || {
        // SAFETY: forwarded from this function's contract.
        let cfg = unsafe { args::init_config(config) }?;
        runtime::init(cfg)
    })
}

/// `hipObjShutdown`: stop the core; a no-op when not initialised (it starts nothing then).
/// `hipObjInternalError` if the supervisor could not do it.
#[no_mangle]
pub extern "C" fn hipObjShutdown() -> hipObjError_t {
    boundary::call("hipObjShutdown", runtime::shutdown)
}
