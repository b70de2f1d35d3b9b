//! The seam between the protocol logic and the verbs: [`RdmaPort`] (one device port) and
//! [`RdmaQp`] (one server QP). The pairing table, the hipobj-rc-v2 sessions, chunking, watchdog
//! and reply logic only see these traits; `verbs_port` implements them over `hipobj::verbs`, and
//! the unit tests use an in-memory double.
//!
//! A v1 QP is created connected ([`RdmaPort::connect_qp`]); a hipobj-rc-v2 session's QP is
//! created in INIT ([`RdmaPort::create_qp`]), may get a receive and a type-2 window over its
//! staging bytes, and is connected later ([`RdmaQp::connect`]).

use std::fmt;

pub use super::staging::StagingMemory;

/// What the protocol needs to know about the local port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Device name, for logs.
    pub device: String,
    /// Port number put in server tokens.
    pub port: u8,
    /// The GID the server's QPs send from, put in server tokens.
    pub gid: [u8; 16],
    /// Largest message one work request may carry (`ibv_port_attr.max_msg_sz`).
    pub max_msg_sz: u32,
    /// RDMA READs one QP may have outstanding as initiator (`max_qp_init_rd_atom`).
    pub max_rd_atomic: u8,
}

/// The client QP a server QP is aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    pub gid: [u8; 16],
    pub qp_num: u32,
}

/// How to build one server QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSetup {
    pub peer: Peer,
    /// Random 24-bit starting PSN (`sq_psn`), returned to the client in the server token.
    pub start_psn: u32,
    /// Work requests the send queue must hold at once.
    pub max_send_wr: u32,
}

/// Direction of a one-sided operation, seen from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOp {
    /// Local staging -> client memory (GET).
    Write,
    /// Client memory -> local staging (PUT).
    Read,
}

/// One work request over a staging buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    pub op: RdmaOp,
    pub wr_id: u64,
    pub local_offset: usize,
    pub len: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    /// A WRITE with this immediate (`RDMA_WRITE_WITH_IMM`, host order; hipobj-rc-v2's last
    /// write carries the cookie). Only for [`RdmaOp::Write`].
    pub imm: Option<u32>,
}

/// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by the peer's WRITE_WITH_IMM.
pub const WC_RECV_RDMA_WITH_IMM: u32 = 129;

/// One completion; `status` 0 is success (ibv_wc_status values otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: u32,
    pub vendor_err: u32,
    /// `ibv_wc_opcode` (meaningful on success).
    pub opcode: u32,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    /// The immediate (host order) when the completion carries one.
    pub imm: Option<u32>,
}

/// A type-2 memory window bound on one QP over staging bytes: what a client may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub addr: u64,
    pub rkey: u32,
}

/// A failed verb.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortError {
    pub what: String,
}

impl PortError {
    pub fn new(what: impl Into<String>) -> Self {
        PortError { what: what.into() }
    }
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for PortError {}

/// A registered staging buffer. Its bytes are reached through the raw-pointer API of
/// [`StagingMemory`] (the NIC may read or write them while work requests are posted), through
/// the slots a transfer cuts it into ([`StagingMemory::slots`]), or whole by its owner.
pub trait StagingBuffer: Send + 'static {
    fn memory(&self) -> &StagingMemory;
    /// The whole memory ([`StagingMemory::bytes_mut`]): for the owner, once no work request and
    /// no window covers it. Never the `&mut StagingMemory` itself, which could be swapped away
    /// from its registration.
    fn bytes_mut(&mut self) -> Option<&mut [u8]>;
}

/// One server RC QP, connected (RTS) to one client QP.
pub trait RdmaQp: Send + 'static {
    type Buffer: StagingBuffer;
    fn qp_num(&self) -> u32;
    /// Post one signaled work request reading from / writing into `buf`.
    fn post(&mut self, wr: &WorkRequest, buf: &Self::Buffer) -> Result<(), PortError>;
    /// Post one signaled zero-length SEND_WITH_INV of the client's `rkey` (docs/protocol.md section
    /// 11; only to a client QP that said it keeps receives posted).
    fn post_send_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), PortError>;
    /// Append the completions available now (non-blocking).
    fn poll(&mut self, out: &mut Vec<WorkCompletion>) -> Result<(), PortError>;
    /// Move the QP to ERR: it sends nothing more and its outstanding work requests flush.
    fn to_error(&mut self) -> Result<(), PortError>;
    /// hipobj-rc-v2: move a QP made by [`RdmaPort::create_qp`] INIT -> RTR -> RTS aimed at
    /// `peer` (`hipobj::verbs::rc` attributes), expecting `rq_psn` and sending from `sq_psn`.
    fn connect(&mut self, peer: &Peer, rq_psn: u32, sq_psn: u32) -> Result<(), PortError>;
    /// Post one zero-length receive (consumed by the peer's WRITE_WITH_IMM).
    fn post_recv(&mut self, wr_id: u64) -> Result<(), PortError>;
    /// Bind a type-2 window on this QP (in RTS) over the first `len` bytes of `buf`, remote
    /// write only, and wait up to `wait` for the bind's completion. Error when it cannot be
    /// confirmed: the QP is then fenced (ERR; `hipobj::verbs::Window`'s policy).
    fn bind_window(
        &mut self,
        buf: &Self::Buffer,
        len: u32,
        wait: std::time::Duration,
    ) -> Result<Window, PortError>;
    /// Invalidate the bound window (local invalidation on this QP), waiting up to `wait`. Error
    /// when it cannot be confirmed: the QP is then fenced (ERR), and the caller destroys it and
    /// its window.
    fn invalidate_window(&mut self, wait: std::time::Duration) -> Result<(), PortError>;
}

/// One device port.
pub trait RdmaPort: Send + Sync + 'static {
    type Buffer: StagingBuffer;
    type Qp: RdmaQp<Buffer = Self::Buffer>;
    fn info(&self) -> &PortInfo;
    /// Whether the port is ACTIVE now (its link is up): a port that is not takes no new jobs. A
    /// port whose state cannot be read counts as not active.
    fn is_active(&self) -> bool;
    /// Create a QP and move it INIT -> RTR -> RTS aimed at `setup.peer`, with path MTU = the
    /// port's active MTU, max_rd_atomic = the device's max_qp_init_rd_atom, timeout 14 and
    /// retry_cnt 6.
    fn connect_qp(&self, setup: &QpSetup) -> Result<Self::Qp, PortError>;
    /// hipobj-rc-v2: create a QP in INIT that accepts remote writes (through windows bound on
    /// it), with room for `max_send_wr` work requests and one receive.
    fn create_qp(&self, max_send_wr: u32) -> Result<Self::Qp, PortError>;
    /// Allocate and register a staging buffer of `len` bytes (windows may be bound on it).
    fn alloc_staging(&self, len: usize) -> Result<Self::Buffer, PortError>;
    /// Map `len` bytes of `file` from `offset` read-only ([`StagingMemory::map_file`]) and
    /// register them for local reads only: the source of a GET's RDMA WRITEs, with no copy.
    fn register_file(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Result<Self::Buffer, PortError>;
}
