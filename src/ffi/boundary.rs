//! The panic boundary around every export: nothing unwinds into C, and nothing aborts.
//!
//! [`call`] runs an export's body (which returns the core's `Result<()>`) and maps the outcome
//! to a [`hipObjError_t`] once; [`guard`] runs a body that returns a value directly (the
//! `const char *` functions). A panic in either becomes the type's [`PanicFallback`].

use super::types::hipObjError_t;
use crate::error::{OpError, Result};
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The string a `const char *` export returns after a panic.
pub const PANIC_STRING: &CStr = c"Internal error";

/// What an export returns when its body panicked.
pub trait PanicFallback {
    fn after_panic() -> Self;
}

impl PanicFallback for hipObjError_t {
    fn after_panic() -> Self {
        hipObjError_t {
            opError: OpError::InternalError,
            hipError: 0,
        }
    }
}

impl PanicFallback for *const c_char {
    fn after_panic() -> Self {
        PANIC_STRING.as_ptr()
    }
}

impl PanicFallback for *mut c_char {
    fn after_panic() -> Self {
        std::ptr::null_mut()
    }
}

impl PanicFallback for c_int {
    fn after_panic() -> Self {
        0
    }
}

impl PanicFallback for () {
    fn after_panic() -> Self {}
}

/// Run `body` for the export `name`; a panic is logged and becomes `R::after_panic()`.
pub fn guard<R: PanicFallback>(name: &'static str, body: impl FnOnce() -> R) -> R {
    // AssertUnwindSafe: after a panic the export only returns the fallback; the state the body
    // touched is the core's, which keeps no locks that poison (actors/src/sync.rs) and stays consistent
    // through RAII guards.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(non-string panic payload)");
            tracing::error!(
                export = name,
                panic = message,
                "panic caught at the C boundary"
            );
            // Dropping the payload can itself panic (a payload whose Drop panics); keep that
            // from escaping too.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            R::after_panic()
        }
    }
}

/// Run the body of the export `name` and map its result once: `Ok` is `hipObjSuccess`, an
/// error goes through `From<Error> for hipObjError_t`, a panic is `{hipObjInternalError, 0}`.
pub fn call(name: &'static str, body: impl FnOnce() -> Result<()>) -> hipObjError_t {
    guard(name, || match body() {
        Ok(()) => hipObjError_t::SUCCESS,
        Err(e) => {
            tracing::debug!(export = name, error = %e, "call failed");
            hipObjError_t::from(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn quiet<T>(f: impl FnOnce() -> T) -> T {
        // Silence the default hook's message for the panics these tests cause on purpose.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = f();
        std::panic::set_hook(previous);
        out
    }

    #[test]
    fn ok_is_success() {
        assert_eq!(
            call("t", || Ok(())),
            hipObjError_t {
                opError: OpError::Success,
                hipError: 0
            }
        );
    }

    #[test]
    fn error_maps_code_and_hip_error() {
        let r = call("t", || {
            Err(Error::with_hip(OpError::RdmaError, 100, "no device"))
        });
        assert_eq!(
            r,
            hipObjError_t {
                opError: OpError::RdmaError,
                hipError: 100
            }
        );
        let r = call("t", || Err(Error::busy("in use")));
        assert_eq!(
            r,
            hipObjError_t {
                opError: OpError::Busy,
                hipError: 0
            }
        );
    }

    #[test]
    fn panics_become_internal_error() {
        let r = quiet(|| call("t", || panic!("boom")));
        assert_eq!(
            r,
            hipObjError_t {
                opError: OpError::InternalError,
                hipError: 0
            }
        );
        let r = quiet(|| call("t", || std::panic::panic_any(42_i32)));
        assert_eq!(
            r,
            hipObjError_t {
                opError: OpError::InternalError,
                hipError: 0
            }
        );
        let r = quiet(|| call("t", || panic!("{}", String::from("formatted"))));
        assert_eq!(r.opError, OpError::InternalError);
    }

    #[test]
    fn panics_in_string_exports_become_a_static_string() {
        let p: *const c_char = quiet(|| guard("t", || -> *const c_char { panic!("boom") }));
        // SAFETY: the fallback is a 'static NUL-terminated literal.
        assert_eq!(unsafe { CStr::from_ptr(p) }, PANIC_STRING);
    }

    #[test]
    fn payload_whose_drop_panics_does_not_escape() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("drop");
            }
        }
        let r = quiet(|| call("t", || std::panic::panic_any(Bomb)));
        assert_eq!(r.opError, OpError::InternalError);
    }

    #[test]
    fn a_boundary_keeps_working_after_a_panic() {
        let _ = quiet(|| call("t", || panic!("first")));
        assert_eq!(call("t", || Ok(())).opError, OpError::Success);
    }
}
