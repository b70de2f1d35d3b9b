//! The project's one internal S3 client, used by the library's own client (`hipobj::client`), the
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
//! - [`s3error`]: the S3 error of an answer, read once (the library's error type carries it);
//! - [`class`]: the AWS SDKs' standard-mode retry classes of an answer or a failure.
//!
//! [`ops::error`] is where every client has its answers classified. The library (`hipobj`)
//! depends on this crate, not the other way: its own S3 client (`hipobj::client`) is built on it.

pub mod class;
pub mod http;
pub mod ops;
pub mod path;
pub mod s3error;
pub mod sign;

pub use reqwest;
