//! The one error type of the core. Only `ffi` turns it into a C `hipObjError_t`.

use crate::s3error::S3ErrorReply;
use std::borrow::Cow;
use std::fmt;

/// The operation error codes of `hipObjOpError_t`, with the header's values.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpError {
    Success = 0,
    InvalidValue = 1,
    NotInitialized = 2,
    AlreadyInitialized = 3,
    RdmaError = 4,
    S3Error = 5,
    BufNotRegistered = 6,
    BufAlreadyRegistered = 7,
    NicNotFound = 8,
    DmabufNotSupported = 9,
    SizeTooLarge = 10,
    InternalError = 11,
    Busy = 12,
    /// Extension (`include/hipobj_v2.h`): the server answered a hipobj-rc-v2 PREPARE with `501`
    /// and `X-Amz-Rdma-Protocol-Status: unsupported` (it speaks no v2; plain HTTP may be used).
    NotSupported = 13,
}

impl OpError {
    /// Every code, in enum order.
    pub const ALL: [OpError; 14] = [
        OpError::Success,
        OpError::InvalidValue,
        OpError::NotInitialized,
        OpError::AlreadyInitialized,
        OpError::RdmaError,
        OpError::S3Error,
        OpError::BufNotRegistered,
        OpError::BufAlreadyRegistered,
        OpError::NicNotFound,
        OpError::DmabufNotSupported,
        OpError::SizeTooLarge,
        OpError::InternalError,
        OpError::Busy,
        OpError::NotSupported,
    ];

    /// The code for a raw value, if it is one.
    pub fn from_raw(raw: i32) -> Option<OpError> {
        usize::try_from(raw)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }
}

/// A failed operation: its code, the HIP error where one caused it, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub code: OpError,
    pub hip_error: i32,
    pub detail: Cow<'static, str>,
    /// The S3 error the server answered, where the caller's HTTP side saw one.
    pub server: Option<Box<S3ErrorReply>>,
    /// Revision 5 (docs/protocol.md rule 12.3): the server refused the request with a
    /// status that starts nothing, on the connection's current pairing, so the connection goes
    /// back to the pool with its QP and pairing unchanged.
    pub pairing_kept: bool,
    /// The transfer failed on its way, not by the request's own fault: the server answered a
    /// failure of its side (`5xx` other than `501`), such as an RDMA operation that failed.
    /// With an `RdmaError` (the local NIC or QP failed), what a runtime with several devices
    /// tries again on another one ([`Error::worth_another_device`]).
    pub path_failed: bool,
}

impl Error {
    pub fn new(code: OpError, detail: impl Into<Cow<'static, str>>) -> Error {
        Error::with_hip(code, 0, detail)
    }
    pub fn with_hip(code: OpError, hip_error: i32, detail: impl Into<Cow<'static, str>>) -> Error {
        Error {
            code,
            hip_error,
            detail: detail.into(),
            server: None,
            pairing_kept: false,
            path_failed: false,
        }
    }
    pub fn invalid(detail: impl Into<Cow<'static, str>>) -> Error {
        Error::new(OpError::InvalidValue, detail)
    }
    pub fn not_initialized() -> Error {
        Error::new(OpError::NotInitialized, "hipObject is not initialized")
    }
    pub fn busy(detail: impl Into<Cow<'static, str>>) -> Error {
        Error::new(OpError::Busy, detail)
    }
    pub fn rdma(detail: impl Into<Cow<'static, str>>) -> Error {
        Error::new(OpError::RdmaError, detail)
    }
    pub fn s3(detail: impl Into<Cow<'static, str>>) -> Error {
        Error::new(OpError::S3Error, detail)
    }
    pub fn internal(detail: impl Into<Cow<'static, str>>) -> Error {
        Error::new(OpError::InternalError, detail)
    }
    /// Whether another RDMA device may succeed where this transfer failed: its path failed or
    /// its NIC did. A refusal (bad arguments, not registered, busy, an S3 `4xx`, `501`) would
    /// fail the same way anywhere.
    pub fn worth_another_device(&self) -> bool {
        self.path_failed || self.code == OpError::RdmaError
    }
    /// This error with the S3 error the server answered (its text is added to the detail).
    pub fn with_server(mut self, reply: S3ErrorReply) -> Error {
        self.detail = format!("{}: {reply}", self.detail).into();
        self.server = Some(Box::new(reply));
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.detail)?;
        if self.hip_error != 0 {
            write!(f, " (hipError {})", self.hip_error)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
