//! `Lib`: the libibverbs function-pointer table, loaded at run time with libloading.
//!
//! The runtime soname `libibverbs.so.1` is opened (never the `libibverbs.so` development symlink,
//! never linked). Every symbol is looked up at the version that rdma-core exports it under
//! (`dlvsym`): required verbs at `IBVERBS_1.1` (`ibv_query_gid` included), `_ibv_query_gid_ex` at
//! `IBVERBS_1.11` and `ibv_reg_dmabuf_mr` at `IBVERBS_1.12`. A missing required symbol fails the
//! whole load (the library is closed again and nothing is cached); a missing optional symbol
//! leaves its field `None`. `ibv_post_send` and `ibv_poll_cq` are `static inline` in verbs.h and
//! are called through `ibv_context->ops`, never looked up.

use hipobj_actors::sync::StartOnce;
use std::ffi::{c_void, CStr};
use std::sync::Arc;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use super::error::VerbsError;
use super::sys;

/// The sonames tried by [`Lib::load`], in order.
const LIBIBVERBS_NAMES: &[&str] = &["libibverbs.so.1"];

const V1_1: &CStr = c"IBVERBS_1.1";
const V1_11: &CStr = c"IBVERBS_1.11";
const V1_12: &CStr = c"IBVERBS_1.12";

/// The successfully loaded table, shared by every later `load()`. A failure is not cached, so a
/// later `load()` (a later `hipObjInit`) tries again. The mutex also serialises `dlopen`, whose
/// error reporting is not thread-safe (libloading's documentation).
static LOADED: StartOnce<Arc<Lib>> = StartOnce::new();

/// libibverbs entry points. Owns the library handle, so the pointers stay valid for as long as the
/// table lives; every handle of this module holds an `Arc<Lib>`.
pub struct Lib {
    pub(crate) get_device_list: sys::GetDeviceListFn,
    pub(crate) free_device_list: sys::FreeDeviceListFn,
    pub(crate) get_device_name: sys::GetDeviceNameFn,
    pub(crate) open_device: sys::OpenDeviceFn,
    pub(crate) close_device: sys::CloseDeviceFn,
    pub(crate) query_device: sys::QueryDeviceFn,
    pub(crate) query_port: sys::QueryPortFn,
    pub(crate) query_gid: sys::QueryGidFn,
    pub(crate) alloc_pd: sys::AllocPdFn,
    pub(crate) dealloc_pd: sys::DeallocPdFn,
    pub(crate) reg_mr: sys::RegMrFn,
    pub(crate) dereg_mr: sys::DeregMrFn,
    pub(crate) create_cq: sys::CreateCqFn,
    pub(crate) destroy_cq: sys::DestroyCqFn,
    pub(crate) create_qp: sys::CreateQpFn,
    pub(crate) modify_qp: sys::ModifyQpFn,
    pub(crate) destroy_qp: sys::DestroyQpFn,
    /// Optional (`IBVERBS_1.11`): GID entries with their type. Without it the GID type is read
    /// from sysfs (`ports/<p>/gid_attrs/types/<i>`).
    pub(crate) query_gid_ex: Option<sys::QueryGidExFn>,
    /// Optional (`IBVERBS_1.12`).
    pub(crate) reg_dmabuf_mr: Option<sys::RegDmabufMrFn>,
    soname: String,
    _library: Library,
}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lib")
            .field("soname", &self.soname)
            .field("query_gid_ex", &self.query_gid_ex.is_some())
            .field("reg_dmabuf_mr", &self.reg_dmabuf_mr.is_some())
            .finish()
    }
}

impl Lib {
    /// Loads libibverbs once per process; later calls return the same table. Never panics: a
    /// missing library or symbol is a `VerbsError`, and nothing is cached then.
    pub fn load() -> Result<Arc<Lib>, VerbsError> {
        let lib = LOADED.get_or_start(|| {
            let lib = Lib::load_from(LIBIBVERBS_NAMES)?;
            tracing::debug!(soname = %lib.soname, gid_ex = lib.query_gid_ex.is_some(),
                dmabuf = lib.reg_dmabuf_mr.is_some(), "libibverbs loaded");
            Ok(Arc::new(lib))
        })?;
        Ok(Arc::clone(lib))
    }

    /// Loads the first of `names` that opens, without caching. A name that opens but lacks a
    /// required symbol fails the load (the next name is not tried: it would be another build of
    /// the same library at best).
    pub(crate) fn load_from(names: &[&str]) -> Result<Lib, VerbsError> {
        let mut failures = Vec::new();
        for name in names {
            // SAFETY: opening runs the library's initialisers; libibverbs' initialisers only set
            // up its own state. Calls are serialised by `LOADED` for `load()`; `load_from` in
            // tests opens only names that are not libibverbs or the same soname.
            match unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) } {
                Ok(library) => return Lib::resolve(library, name),
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
        Err(VerbsError::new(
            "dlopen",
            libc::ELIBACC,
            format!("libibverbs not loaded ({})", failures.join("; ")),
        ))
    }

    /// The soname the table was loaded from.
    pub fn soname(&self) -> &str {
        &self.soname
    }

    /// Whether `ibv_reg_dmabuf_mr` exists in the loaded library.
    pub fn has_dmabuf(&self) -> bool {
        self.reg_dmabuf_mr.is_some()
    }

    fn resolve(library: Library, soname: &str) -> Result<Lib, VerbsError> {
        let handle = library.into_raw();
        macro_rules! required {
            ($name:literal, $ty:ty) => {{
                let p = lookup(handle, $name, V1_1);
                if p.is_null() {
                    Err(VerbsError::new(
                        "dlvsym",
                        libc::ENOSYS,
                        format!(
                            "{soname} lacks required symbol {}@IBVERBS_1.1",
                            $name.to_string_lossy()
                        ),
                    ))
                } else {
                    // SAFETY: the symbol is the exported function of that name and version,
                    // whose C signature `$ty` reproduces (verbs.h, rdma-core 44).
                    Ok(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
                }
            }};
        }
        macro_rules! optional {
            ($name:literal, $version:expr, $ty:ty) => {{
                let p = lookup(handle, $name, $version);
                if p.is_null() {
                    None
                } else {
                    // SAFETY: as for `required!`.
                    Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
                }
            }};
        }
        let table = (|| {
            Ok::<_, VerbsError>((
                required!(c"ibv_get_device_list", sys::GetDeviceListFn)?,
                required!(c"ibv_free_device_list", sys::FreeDeviceListFn)?,
                required!(c"ibv_get_device_name", sys::GetDeviceNameFn)?,
                required!(c"ibv_open_device", sys::OpenDeviceFn)?,
                required!(c"ibv_close_device", sys::CloseDeviceFn)?,
                required!(c"ibv_query_device", sys::QueryDeviceFn)?,
                required!(c"ibv_query_port", sys::QueryPortFn)?,
                required!(c"ibv_query_gid", sys::QueryGidFn)?,
                required!(c"ibv_alloc_pd", sys::AllocPdFn)?,
                required!(c"ibv_dealloc_pd", sys::DeallocPdFn)?,
                required!(c"ibv_reg_mr", sys::RegMrFn)?,
                required!(c"ibv_dereg_mr", sys::DeregMrFn)?,
                (
                    required!(c"ibv_create_cq", sys::CreateCqFn)?,
                    required!(c"ibv_destroy_cq", sys::DestroyCqFn)?,
                    required!(c"ibv_create_qp", sys::CreateQpFn)?,
                    required!(c"ibv_modify_qp", sys::ModifyQpFn)?,
                    required!(c"ibv_destroy_qp", sys::DestroyQpFn)?,
                ),
            ))
        })();
        let query_gid_ex = optional!(c"_ibv_query_gid_ex", V1_11, sys::QueryGidExFn);
        let reg_dmabuf_mr = optional!(c"ibv_reg_dmabuf_mr", V1_12, sys::RegDmabufMrFn);
        // SAFETY: `handle` came from `into_raw` above and is given back exactly once; dropping
        // the result (on the error path) closes the library.
        let library = unsafe { Library::from_raw(handle) };
        let (
            get_device_list,
            free_device_list,
            get_device_name,
            open_device,
            close_device,
            query_device,
            query_port,
            query_gid,
            alloc_pd,
            dealloc_pd,
            reg_mr,
            dereg_mr,
            (create_cq, destroy_cq, create_qp, modify_qp, destroy_qp),
        ) = table?;
        Ok(Lib {
            get_device_list,
            free_device_list,
            get_device_name,
            open_device,
            close_device,
            query_device,
            query_port,
            query_gid,
            alloc_pd,
            dealloc_pd,
            reg_mr,
            dereg_mr,
            create_cq,
            destroy_cq,
            create_qp,
            modify_qp,
            destroy_qp,
            query_gid_ex,
            reg_dmabuf_mr,
            soname: soname.to_owned(),
            _library: library,
        })
    }
}

/// Looks `name` up at `version` (glibc `dlvsym`); NULL when absent.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn lookup(handle: *mut c_void, name: &CStr, version: &CStr) -> *mut c_void {
    // SAFETY: `handle` is a live dlopen handle (owned by the caller until `from_raw`); both
    // strings are NUL-terminated.
    unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) }
}

/// Without `dlvsym` (non-glibc), the default version of `name`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn lookup(handle: *mut c_void, name: &CStr, _version: &CStr) -> *mut c_void {
    // SAFETY: as above.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        let err = Lib::load_from(&[
            "libhipobj-no-such-verbs.so.1",
            "/nonexistent/libibverbs.so.1",
        ])
        .expect_err("a bogus name must not load");
        assert_eq!(err.verb, "dlopen");
        assert!(err.detail.contains("libhipobj-no-such-verbs.so.1"), "{err}");
        assert!(err.detail.contains("/nonexistent/libibverbs.so.1"), "{err}");
    }

    #[test]
    fn a_library_without_the_verbs_is_a_missing_symbol_error() {
        // libc is loaded in every process and exports none of the verbs.
        let err = Lib::load_from(&["libc.so.6"]).expect_err("libc has no verbs");
        assert_eq!(err.verb, "dlvsym");
        assert!(
            err.detail.contains("ibv_get_device_list@IBVERBS_1.1"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_name_list_is_an_error() {
        assert!(Lib::load_from(&[]).is_err());
    }

    #[test]
    fn loads_the_installed_libibverbs_with_its_optional_symbols() {
        // libibverbs1 (rdma-core 44) is installed on the build hosts; without it this test says so.
        match Lib::load() {
            Ok(lib) => {
                assert_eq!(lib.soname(), "libibverbs.so.1");
                assert!(
                    lib.query_gid_ex.is_some(),
                    "rdma-core >= 32 exports _ibv_query_gid_ex"
                );
                assert!(
                    lib.has_dmabuf(),
                    "rdma-core >= 34 exports ibv_reg_dmabuf_mr"
                );
                let again = Lib::load().expect("cached");
                assert!(Arc::ptr_eq(&lib, &again));
            }
            Err(e) => panic!("libibverbs.so.1 is expected on this host: {e}"),
        }
    }
}
