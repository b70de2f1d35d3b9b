//! The project's one internal S3 client, used by the command line (`cli/src/s3.rs`), the
//! gateway's client to its store (`server/src/backend/s3proxy/client.rs`) and the tests'
//! clients (`tests/support`):
//!
//! - [`sign`]: SigV4 over `aws-sigv4`, one function for every request the project signs
//!   (header or presigned, hashed body or `UNSIGNED-PAYLOAD` for large and streamed bodies);
//! - [`path`]: S3 key, path and query encoding;
//! - [`http`]: the one HTTP stack (`reqwest`'s blocking client, re-exported as [`reqwest`]), the
//!   signed request built on it, and an answer read whole;
//! - [`ops`]: the S3 operations the clients share (multipart uploads, ListObjectsV2): their
//!   requests, XML bodies and answers, ETag quoting, and the retry class of an answer's error.
//!
//! The S3 error of an answer is read by `hipobj::s3error` (the library's error type carries it,
//! and the library must not take this crate's HTTP dependencies) and classified by the SDKs'
//! retry classes of `hipobj::engine`: this crate depends on the library for both, and
//! [`ops::error`] is where every client has its answers classified.

pub mod http;
pub mod ops;
pub mod path;
pub mod sign;

pub use reqwest;
