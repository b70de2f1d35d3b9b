//! The RDMA side of the server: token -> pairing -> RDMA READ or WRITE (docs/protocol.md section 4).
//!
//! - `token_header`: the `x-amz-rdma-token` value (88 hex digits, optional legacy suffix).
//! - `port`: the [`port::RdmaPort`] seam; `verbs_port` implements it over `hipobj::verbs`.
//! - `engines`: one `engine` per device (`--device a,b`) and the dispatch of each job to one of
//!   them: `rails` chooses the device facing the client's GID (a pure function, unit-tested).
//! - `engine`: one device's share of a worker's jobs, one owner per concept over `shared` (the port, staging pool,
//!   transfer shapes and deadlines, store, statistics): `paired` (one token request end to end,
//!   over `pairing`, the pairing table) and `v2` (hipobj-rc-v2 below); `inject`: faults injected on
//!   purpose, a token transfer that fails or a GET written at the wrong offset (cargo feature
//!   `fault-injection`, tests only).
//! - `transfer`: chunked work requests, watchdog; `patience`: deadlines that follow progress and
//!   the measured rate; `local_end`: the file side of a transfer (inline or on its own thread);
//!   `staging`: registered staging buffers; `worker`: the dedicated RDMA threads and the 503
//!   limit; `selection`: which bytes a GET sends (Range, client buffer size).
//! - hipobj-rc-v2 (docs/protocol.md section 10): `session` (the session table: owners, cookies,
//!   states, deadlines, limits) and `v2` (PREPARE / READY / CANCEL over it).

pub mod engine;
pub mod engines;
#[cfg(feature = "fault-injection")]
pub mod inject;
pub mod local_end;
pub mod paired;
pub mod pairing;
pub mod patience;
pub mod port;
pub mod rails;
pub mod selection;
pub mod session;
pub mod shared;
pub mod staging;
pub mod token_header;
pub mod transfer;
pub mod v2;
pub mod verbs_port;
pub mod worker;

#[cfg(test)]
pub mod test_double;
#[cfg(test)]
pub mod test_fixture;

use hipobj::token::Token;

use crate::backend::{ObjectInfo, WriteOptions};
use crate::error::Fault;
use crate::identity::Requester;

/// A token request for one object.
#[derive(Debug)]
pub struct RdmaJob {
    pub token: Token,
    /// Who asked: part of the pairing key (rule 4.8).
    pub requester: Requester,
    pub bucket: String,
    pub key: String,
    pub kind: JobKind,
}

#[derive(Debug)]
pub enum JobKind {
    /// RDMA WRITE the whole object or its `Range` into the client's buffer.
    Get { range: Option<s3s::dto::Range> },
    /// RDMA READ token-length bytes from the client's buffer and store them, with the options
    /// the S3 layer built from the request's headers exactly as for a body (metadata, tagging,
    /// Content-MD5, checksums); the size is the token's length.
    Put { options: Box<WriteOptions> },
    /// RDMA READ token-length bytes and store them as part `part_number` of the multipart
    /// upload `upload_id` (`UploadPart` with a token), written exactly like an HTTP-body part:
    /// `options` are the ones the S3 layer built for it (digests, checksum algorithm).
    Part {
        upload_id: String,
        part_number: u32,
        options: Box<WriteOptions>,
    },
}

/// How a token request ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RdmaOutcome {
    /// 428: a new pairing was created; no data moved.
    PairingNeeded { server: Token },
    /// 200/206: the selected bytes are in the client's memory.
    Fetched {
        server: Token,
        bytes: u64,
        info: ObjectInfo,
        range: Option<std::ops::Range<u64>>,
    },
    /// 200: the object (or part) was read from the client and stored.
    Stored { server: Token, info: ObjectInfo },
    /// Refused or failed: the fault's status is the reply's bare code (no server token).
    Rejected(Fault),
}
