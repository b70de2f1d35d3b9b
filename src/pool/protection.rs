//! How transfers grant the server access to a buffer: memory windows, or the registration.

use crate::env::EnvConfig;
use crate::error::{Error, Result};
use crate::verbs::{Access, Device};
use std::sync::Once;

/// How transfers of a runtime grant the server access to a buffer (docs/protocol.md 9.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Registrations have local access and window binding only; each request binds a type-2
    /// window over exactly its bytes and invalidates it before the call returns (revision 2).
    Windows,
    /// The device has no type-2 windows: the registration's rkey grants remote read and write of
    /// the whole registration (revision 1).
    Registration,
}

impl Protection {
    /// The device's protection, or `hipObjRdmaError` when `HIPOBJ_REQUIRE_MW` asks for windows
    /// the device lacks. Warns once per process when falling back.
    pub fn choose(device: &Device, env: &EnvConfig) -> Result<Protection> {
        let has_windows = device.caps().mem_window_type_2b;
        if has_windows && !env.perf_no_mw {
            return Ok(Protection::Windows);
        }
        if env.require_mw {
            return Err(Error::rdma(format!(
                "HIPOBJ_REQUIRE_MW is set but {} {}",
                device.name(),
                if has_windows {
                    "is used without memory windows (HIPOBJ_PERF_NO_MW)"
                } else {
                    "has no type-2 memory windows (MEM_WINDOW_TYPE_2B)"
                }
            )));
        }
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            if has_windows {
                tracing::warn!("HIPOBJ_PERF_NO_MW: memory windows are off (benchmarks only): registrations grant remote access for their whole life");
            } else {
                tracing::warn!(device = %device.name(), "the RDMA device has no type-2 memory windows: registrations grant remote read and write for their whole life (protocol revision 1)");
            }
        });
        Ok(Protection::Registration)
    }

    /// Access rights of every registration under this protection.
    pub fn registration_access(self) -> Access {
        match self {
            Protection::Windows => Access::LOCAL_WRITE | Access::MW_BIND,
            Protection::Registration => {
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_grant_remote_access_only_without_windows() {
        let windows = Protection::Windows.registration_access();
        assert!(windows.contains(Access::MW_BIND | Access::LOCAL_WRITE));
        assert!(!windows.contains(Access::REMOTE_WRITE));
        assert!(!windows.contains(Access::REMOTE_READ));
        let rev1 = Protection::Registration.registration_access();
        assert!(rev1.contains(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE));
        assert!(!rev1.contains(Access::MW_BIND));
    }
}
