//! `VerbsError`: which verb failed, its errno, and what the module was doing.

use std::fmt;

use crate::error::{Error, OpError};

/// A failed verbs call. `errno` is the positive errno the verb reported (or 0 when it reported
/// none); `verb` names the libibverbs function (or the module step) that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsError {
    pub verb: &'static str,
    pub errno: i32,
    pub detail: String,
}

impl VerbsError {
    /// The `verb` of an error that means "no usable RDMA NIC was found"; the only `VerbsError`
    /// that maps to `OpError::NicNotFound`.
    pub const NIC_SELECTION: &'static str = "nic selection";

    pub fn new(verb: &'static str, errno: i32, detail: impl Into<String>) -> VerbsError {
        VerbsError {
            verb,
            errno,
            detail: detail.into(),
        }
    }

    /// "No usable NIC": for callers that found no candidate device (maps to `NicNotFound`).
    pub fn nic_not_found(detail: impl Into<String>) -> VerbsError {
        VerbsError::new(Self::NIC_SELECTION, libc::ENODEV, detail)
    }

    /// An error for `verb` whose errno is read from the thread's `errno` (for verbs that return
    /// NULL or -1 and set `errno`).
    pub(crate) fn last_os(verb: &'static str, detail: impl Into<String>) -> VerbsError {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        VerbsError::new(verb, errno, detail)
    }

    /// An error for a verb that returned the non-zero status `rc`. libibverbs verbs return a
    /// positive errno; a few return -1 and set `errno`, and some providers return `-errno`.
    pub(crate) fn from_rc(verb: &'static str, rc: i32, detail: impl Into<String>) -> VerbsError {
        let errno = match rc {
            -1 => std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            r if r < 0 => r.saturating_neg(),
            r => r,
        };
        VerbsError::new(verb, errno, detail)
    }

    pub(crate) fn invalid(verb: &'static str, detail: impl Into<String>) -> VerbsError {
        VerbsError::new(verb, libc::EINVAL, detail)
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.verb)?;
        if self.errno != 0 {
            write!(
                f,
                ": {} (errno {})",
                std::io::Error::from_raw_os_error(self.errno),
                self.errno
            )?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for VerbsError {}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Error {
        let code = if e.verb == VerbsError::NIC_SELECTION {
            OpError::NicNotFound
        } else {
            OpError::RdmaError
        };
        Error::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_verb_errno_and_detail() {
        let e = VerbsError::new("ibv_modify_qp", libc::EINVAL, "to RTR");
        let s = e.to_string();
        assert!(s.starts_with("ibv_modify_qp failed: "), "{s}");
        assert!(s.contains("errno 22"), "{s}");
        assert!(s.ends_with(": to RTR"), "{s}");
        assert_eq!(VerbsError::new("x", 0, "").to_string(), "x failed");
    }

    #[test]
    fn maps_to_rdma_error_or_nic_not_found() {
        let e: Error = VerbsError::new("ibv_open_device", libc::ENODEV, "no rxe9").into();
        assert_eq!(e.code, OpError::RdmaError);
        let e: Error = VerbsError::nic_not_found("no device with an active port").into();
        assert_eq!(e.code, OpError::NicNotFound);
    }

    #[test]
    fn from_rc_takes_positive_and_negative_statuses() {
        assert_eq!(VerbsError::from_rc("v", libc::EBUSY, "").errno, libc::EBUSY);
        assert_eq!(
            VerbsError::from_rc("v", -libc::EINVAL, "").errno,
            libc::EINVAL
        );
    }
}
