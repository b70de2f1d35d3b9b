//! hipObject: moves S3 objects straight between storage servers and GPU or host memory over RDMA.
//!
//! The crate is a safe Rust core (`token`, `reply`, `env`, `verbs`, `hip`, `registry`, `pool`,
//! `stager`, `runtime`, `checksum`, the transfer `engine` and its RDMA-or-HTTP decision
//! `transport`, and the library's own S3 `client`, which the command line and the Python package
//! share) under a thin `extern "C"` layer (`ffi`) that implements `include/hipobj.h`.

pub mod batch;
pub mod checksum;
pub mod client;
pub mod engine;
pub mod env;
pub mod error;
pub mod ffi;
pub mod hip;
mod log;
pub mod pool;
pub mod random;
pub mod rcv2;
pub mod registry;
pub mod remote_inv;
pub mod reply;
pub mod runtime;
pub use hipobj_s3client::s3error;
pub mod stager;
pub mod token;
pub mod transport;
pub mod verbs;
pub mod version;
