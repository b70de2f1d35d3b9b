//! The library's own S3 client: what sends a transfer's S3 requests when the application does
//! not (the command line, `hipobj bench`; the batch API's workers), built on `hipobj-s3client`
//! (SigV4, the HTTP stack, the S3 operations).
//!
//! - [`credentials`]: keys and region as the AWS SDKs resolve them;
//! - [`s3`]: an endpoint with its credentials, its connection pools per local address, its
//!   retry policy and its RDMA protocol negotiation;
//! - [`rdma`]: one RDMA transfer (v1 or hipobj-rc-v2) whose callbacks are this client's
//!   requests, signed and sent from the address of the NIC the token names;
//! - [`plain`]: the same object operations over plain HTTP;
//! - [`store`]: the engine's `ObjectStore` over these, for one object;
//! - [`failure`]: what a request or a transfer failed with, and whether to retry it.

pub mod credentials;
pub mod failure;
pub mod plain;
pub mod rdma;
pub mod s3;
pub mod store;
