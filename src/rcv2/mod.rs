//! hipobj-rc-v2, the ecosystem's two-round-trip RC protocol (docs/protocol.md section 10; the wire is
//! docs/protocol.md section 13). [`wire`] is the one codec of its headers, used by the library's client
//! and by `hipobj-server`; the 88-hex token inside PREPARE is [`crate::token::Token`].

pub mod client;
pub mod grace;
pub mod negotiate;
pub mod wire;

pub use wire::{
    CancelRequest, Cookie, FinalAnswer, Op, PrepareAnswer, PrepareRequest, Psn, ReadyRequest,
    Session, Target, WireError,
};

/// The value of `x-amz-rdma-protocol` on every request and every 200/204 answer.
pub const PROTOCOL: &str = "hipobj-rc-v2";
/// The control routes (body-less `POST`s with `Content-Length: 0`).
pub const PREPARE_PATH: &str = "/.hipobj-rc/prepare";
pub const READY_PATH: &str = "/.hipobj-rc/ready";
pub const CANCEL_PATH: &str = "/.hipobj-rc/cancel";
/// The most bytes one v2 transfer moves (rule 10.6); larger objects are split by the caller.
pub const MAX_TRANSFER: u64 = 0x7fff_ffff;
/// `x-amz-rdma-protocol-status` of a `501` that means "this server speaks only the other
/// protocol" (the only `501` after which a client may switch, rule 10.1).
pub const UNSUPPORTED: &str = "unsupported";

/// Header names, lowercase (HTTP header names are case-insensitive; servers emit `X-Amz-Rdma-…`).
pub mod header {
    pub const PROTOCOL: &str = "x-amz-rdma-protocol";
    pub const PROTOCOL_STATUS: &str = "x-amz-rdma-protocol-status";
    pub const TOKEN: &str = "x-amz-rdma-token";
    pub const PSN: &str = "x-amz-rdma-psn";
    pub const COOKIE: &str = "x-amz-rdma-cookie";
    pub const OP: &str = "x-amz-rdma-op";
    pub const TARGET: &str = "x-amz-rdma-target";
    pub const SIZE: &str = "x-amz-rdma-size";
    pub const OFFSET: &str = "x-amz-rdma-offset";
    pub const SESSION: &str = "x-amz-rdma-session";
    pub const QPN: &str = "x-amz-rdma-qpn";
    pub const MR_ADDR: &str = "x-amz-rdma-mr-addr";
    pub const MR_RKEY: &str = "x-amz-rdma-mr-rkey";
    pub const REPLY: &str = "x-amz-rdma-reply";
    pub const BYTES_TRANSFERRED: &str = "x-amz-rdma-bytes-transferred";
    pub const ETAG: &str = "x-amz-rdma-etag";
    pub const VERSION_ID: &str = "x-amz-rdma-version-id";
    pub const CHECKSUM: &str = "x-amz-rdma-checksum";
}

/// Does an answer say "this server does not speak the protocol you used" (`501` with
/// `x-amz-rdma-protocol-status: unsupported`, rule 10.1)? `get` takes a lowercase header name.
pub fn is_unsupported<'a>(status: u16, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    status == 501
        && get(header::PROTOCOL_STATUS).is_some_and(|v| v.trim().eq_ignore_ascii_case(UNSUPPORTED))
}
