//! The `extern "C"` layer implementing `include/hipobj.h`, in the rustls-ffi shape:
//!
//! * [`boundary`] wraps every export, so a panic becomes `{hipObjInternalError, 0}` (or a static
//!   string) instead of unwinding into C;
//! * [`args`] holds every argument check, in the order include/hipobj.h gives;
//! * [`error`] is the only conversion from the core's [`Error`](crate::error::Error) to
//!   [`hipObjError_t`], and the error strings;
//! * [`types`] has `#[repr(C)]` copies of the header's types;
//! * the other files hold the exports, one file per area (`checksum`: include/hipobj_checksum.h;
//!   `transport`: include/hipobj_transport.h; `rails`: include/hipobj_rails.h; `v2`: include/hipobj_v2.h;
//!   `batch`: include/hipobj_batch.h). Each checks its
//!   arguments, makes one core call, and maps the result once.
//!
//! This is the only module with `#[no_mangle]`. Parameter and field names follow the header.
#![allow(non_snake_case)]

pub mod args;
pub mod batch;
pub mod boundary;
pub mod buffer;
pub mod checksum;
pub mod error;
pub mod lifecycle;
pub mod rails;
pub mod token;
pub mod transfer;
pub mod transport;
pub mod types;
pub mod v2;
pub mod version;

pub use batch::{
    hipObjBatchCancel, hipObjBatchCancelAll, hipObjBatchCreate, hipObjBatchDestroy,
    hipObjBatchEventFd, hipObjBatchPoll, hipObjBatchSubmit, EXPORTED_FUNCTIONS_BATCH,
};
pub use buffer::{hipObjBufDeregister, hipObjBufRegister, hipObjBufRegisterHost};
pub use checksum::{hipObjChecksumCheck, hipObjRdmaChecksumCheck, EXPORTED_FUNCTIONS_CHECKSUM};
pub use error::hipObjGetErrorString;
pub use lifecycle::{hipObjInit, hipObjShutdown};
pub use rails::{hipObjRailStats, EXPORTED_FUNCTIONS_RAILS};
pub use token::{
    hipObjGetRdmaToken, hipObjParseRdmaReply, hipObjPutRdmaToken, hipObjTokenClientNic,
};
pub use transfer::{hipObjBufSync, hipObjGet, hipObjPut};
pub use transport::{
    hipObjTransportChoose, hipObjTransportCounters, hipObjTransportCreate, hipObjTransportDestroy,
    hipObjTransportNoRdma, hipObjTransportRecord, EXPORTED_FUNCTIONS_TRANSPORT,
};
pub use types::{hipObjConfig_t, hipObjError_t, hipObjOps_t};
pub use v2::{
    hipObjFreeNicV2, hipObjGetV2, hipObjInitV2, hipObjInterfaceSnapshotV2, hipObjNicV2,
    hipObjPutV2, hipObjSelectedGidIndexV2, hipObjSelectedPortV2, EXPORTED_FUNCTIONS_V2,
};
pub use version::{hipObjGetVersion, hipObjGetVersionString};

/// The names of all exported functions, in header order (tests compare them with `nm -D`).
pub const EXPORTED_FUNCTIONS: [&str; 15] = [
    "hipObjGetErrorString",
    "hipObjInit",
    "hipObjShutdown",
    "hipObjBufRegister",
    "hipObjBufRegisterHost",
    "hipObjBufDeregister",
    "hipObjGet",
    "hipObjPut",
    "hipObjBufSync",
    "hipObjGetRdmaToken",
    "hipObjPutRdmaToken",
    "hipObjParseRdmaReply",
    "hipObjTokenClientNic",
    "hipObjGetVersionString",
    "hipObjGetVersion",
];
