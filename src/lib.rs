//! hipObject: moves S3 objects straight between storage servers and GPU or host memory over RDMA.
//!
//! The crate is a safe Rust core (`token`, `reply`, `env`, `verbs`, `hip`, `runtime`) under a thin
//! `extern "C"` layer (`ffi`) that implements `include/hipobj.h`.

pub mod env;
pub mod error;
pub mod ffi;
pub mod reply;
pub mod runtime;
pub mod token;
pub mod verbs;
pub mod version;
