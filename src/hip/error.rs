//! The two error types of the GPU runtime: a failed HIP call, and a HIP library that didn't load.

use std::fmt;

/// `hipSuccess`.
pub const HIP_SUCCESS: i32 = 0;
/// `hipErrorInvalidValue`.
pub const HIP_ERROR_INVALID_VALUE: i32 = 1;
/// `hipErrorOutOfMemory`.
pub const HIP_ERROR_OUT_OF_MEMORY: i32 = 2;
/// `hipErrorNoDevice`: what `hipGetDeviceCount` returns on a host without a GPU.
pub const HIP_ERROR_NO_DEVICE: i32 = 100;
/// `hipErrorInvalidDevice`: what ROCm 5.2's `hipGetDevice` returns on a host without a GPU.
pub const HIP_ERROR_INVALID_DEVICE: i32 = 101;
/// `hipErrorNotReady`: `hipEventQuery` on work that hasn't finished.
pub const HIP_ERROR_NOT_READY: i32 = 600;
/// `hipErrorNotSupported`: also what we report when no dmabuf export entry point exists.
pub const HIP_ERROR_NOT_SUPPORTED: i32 = 801;

/// A HIP call that failed: the `hipError_t` it returned and which call it was.
///
/// For the HSA dmabuf export (`hsa_amd_portable_export_dmabuf`) `code` is that call's
/// `hsa_status_t`, which `call` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HipError {
    /// The `hipError_t` value (or `hsa_status_t` for HSA calls).
    pub code: i32,
    /// The entry point that returned it.
    pub call: &'static str,
}

impl HipError {
    pub fn new(call: &'static str, code: i32) -> HipError {
        HipError { code, call }
    }

    /// A core error with this HIP error attached.
    pub fn to_error(self, code: crate::error::OpError) -> crate::error::Error {
        crate::error::Error::with_hip(code, self.code, format!("{} failed", self.call))
    }
}

impl fmt::Display for HipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} returned {}", self.call, self.code)
    }
}

impl std::error::Error for HipError {}

/// Why the HIP runtime library couldn't be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HipLoadError {
    /// None of the candidate file names could be opened; `reason` is the loader's message for
    /// the last one tried.
    LibraryNotFound { tried: Vec<String>, reason: String },
    /// The library opened but lacks an entry point that hipObject can't work without.
    MissingSymbol {
        library: String,
        symbol: &'static str,
    },
}

impl fmt::Display for HipLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HipLoadError::LibraryNotFound { tried, reason } => {
                write!(f, "none of {} could be loaded: {reason}", tried.join(", "))
            }
            HipLoadError::MissingSymbol { library, symbol } => {
                write!(f, "{library} has no {symbol}")
            }
        }
    }
}

impl std::error::Error for HipLoadError {}
