//! `hipobj-server`: an S3 server (s3s) with a filesystem backend (or, in gateway mode, in front of
//! another S3 store) and RDMA transfers per hipObject's docs/protocol.md. The only crate of the workspace that uses tokio.

pub mod access;
pub mod backend;
pub mod config;
pub mod credentials;
pub mod error;
pub mod identity;
pub mod ownership;
pub mod passthrough;
pub mod rdma;
pub mod s3;
pub mod serve;
pub mod stats;
pub mod tls;
