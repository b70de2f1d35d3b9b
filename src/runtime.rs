//! The library's running state: one `Runtime` per successful `hipObjInit`.
//!
//! INTERFACE SKELETON. The RDMA core (issue 4) replaces the bodies; the signatures are the contract
//! the `ffi` layer is written against. Until then `init` fails with `hipObjRdmaError` and there is
//! never a current runtime.

use crate::env::EnvConfig;
use crate::error::{Error, Result};
use crate::reply::Reply;
use std::sync::Arc;

/// What `hipObjInit` passes to the core after validating `hipObjConfig_t`.
#[derive(Clone, Debug, Default)]
pub struct InitConfig {
    /// HIP device index, or -1 for the calling thread's current device.
    pub gpu_device: i32,
    /// Comma-separated RDMA device names, `None` for any.
    pub nic_hint: Option<String>,
    pub env: EnvConfig,
}

/// Which way a transfer moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferKind {
    /// Server RDMA WRITEs into our buffer.
    Get,
    /// Server RDMA READs from our buffer.
    Put,
}

/// `hipObjBufSync` direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDirection {
    ToHost,
    ToDevice,
}

/// Where a registration's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Host,
    Device,
}

/// The application's S3 client, as the `hipObjOps_t` callbacks or a Rust implementation.
pub trait S3Ops {
    /// Send the request carrying `token` (88 hex digits). 0 on success.
    fn send_request(&mut self, token: &str) -> i32;
    /// Copy the `x-amz-rdma-reply` value into `buf`; the number of bytes written, or the
    /// callback's non-zero status.
    fn recv_reply(&mut self, buf: &mut [u8]) -> std::result::Result<usize, i32>;
}

/// One initialised library instance.
pub struct Runtime {
    _private: (),
}

/// The current runtime, if hipObject is initialised.
pub fn current() -> Option<Arc<Runtime>> {
    None
}

/// Initialise (the checks on `hipObjConfig_t` itself are done by the caller).
pub fn init(_cfg: InitConfig) -> Result<()> {
    Err(Error::rdma("the RDMA core is not part of this build yet"))
}

/// Shut down; a no-op when not initialised.
pub fn shutdown() {}

impl Runtime {
    /// Register `[ptr, ptr + size)`; arguments already checked for NULL, 0, size and wrap.
    pub fn register(&self, _ptr: usize, _size: usize, _kind: MemoryKind) -> Result<()> {
        Err(Error::not_initialized())
    }
    /// Deregister the registration whose base is `ptr`.
    pub fn deregister(&self, _ptr: usize) -> Result<()> {
        Err(Error::not_initialized())
    }
    /// `hipObjGet`/`hipObjPut` after the argument checks of the ffi layer.
    pub fn transfer(
        &self,
        _kind: TransferKind,
        _ptr: usize,
        _size: usize,
        _offset: u64,
        _ops: &mut dyn S3Ops,
    ) -> Result<()> {
        Err(Error::not_initialized())
    }
    /// `hipObjBufSync` after the argument checks of the ffi layer.
    pub fn sync(&self, _ptr: usize, _size: usize, _offset: u64, _dir: SyncDirection) -> Result<()> {
        Err(Error::not_initialized())
    }
    /// `hipObjGetRdmaToken`: the 88-hex token for `[ptr, ptr + size)` on the dedicated connection.
    pub fn mint_token(&self, _ptr: usize, _size: usize) -> Result<String> {
        Err(Error::not_initialized())
    }
    /// `hipObjParseRdmaReply` with a `428:<token>` reply: pair the dedicated connection.
    pub fn apply_reply(&self, _reply: &Reply) -> Result<()> {
        Err(Error::not_initialized())
    }
}
